"""The lag-report Spark job over N telemetry records, beside a single-process DuckDB baseline
doing the same work in the same run.

Setup (not timed): a Gregor broker; N telemetry records (the broker's JSON format) for G groups
x P partitions x S samples, with healthy, slow, stalled, stopped and rewinding groups, produced
to topic ``bench_telemetry``; N/10 offset commits in ``__consumer_offsets``' format produced to
``bench_offsets``.

Timed:
- Spark: ``gregor lag-report --telemetry-topic bench_telemetry --offsets-topic bench_offsets`` as
  a user runs it (a subprocess: JVM start, read through the connector, evaluate, write every
  Parquet table, the HTML report), once per ``--master``;
- DuckDB: one process reads both topics with one confluent-kafka consumer, decodes the commits,
  evaluates the same rules in SQL (the same window definitions) and writes the same tables.

The statuses of both are compared per (group, topic, partition, ts).

    python bench/lag_pipeline.py --records 10000000 --master 'local[1]' --master 'local[2]'
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gregor.config import KEYS  # noqa: E402
from gregor.protocol import consumer_offsets as records  # noqa: E402
from gregor.protocol.partitioner import partition_for_key  # noqa: E402
from peers import gregor  # noqa: E402

TELEMETRY, OFFSETS = "bench_telemetry", "bench_offsets"
TELEMETRY_PARTITIONS = KEYS["telemetry.topic.num.partitions"].default  # laid out as the broker lays it out
PARTITIONS = 10
STEP_MS = 10_000
BEHAVIOURS = ("healthy", "slow", "stalled", "stopped", "rewind")


def generate(bootstrap: str, n: int) -> tuple[int, int]:
    """Produce ~n telemetry records and ~n/10 commits; returns the exact counts."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for t, n_parts in ((TELEMETRY, TELEMETRY_PARTITIONS), (OFFSETS, 1)):
        admin.create_topics([NewTopic(t, n_parts)])[t].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000})
    samples = 1000
    groups = max(1, n // (PARTITIONS * samples))
    t0 = int(time.time() * 1000) - samples * STEP_MS
    template = ('{{"ts":{ts},"broker":0,"broker_start":{start},"group":"{g}","topic":"{t}","partition":{p},'
                '"messages":{m},"bytes":{b},"committed":{c},"log_end":{e},"lag":{lag},"time_lag_s":{tl},'
                '"state":"{state}","members":{mem},"commit_ts":{ct}}}')
    tel = commits = 0

    def send(topic: str, value: bytes, key: bytes, partition: int = 0) -> None:
        while True:
            try:
                p.produce(topic, value, key, partition)
                return
            except BufferError:
                p.poll(0.05)

    for g in range(groups):
        kind = BEHAVIOURS[g % len(BEHAVIOURS)]
        group, topic = f"group-{g:05d}-{kind}", f"topic-{g % 50:02d}"
        home = partition_for_key(group.encode(), TELEMETRY_PARTITIONS)  # the broker's telemetry layout
        for part in range(PARTITIONS):
            key = f"{group}/{topic}/{part}".encode()
            ckey = records.encode_key(records.OffsetCommitKey(group, topic, part))
            end = committed = consumed = 0
            last_commit = "null"
            members = 0 if kind == "stopped" else 3
            for i in range(samples):
                ts = t0 + i * STEP_MS
                end += 100
                if kind == "healthy":
                    committed = end if i % 3 else end - 40
                elif kind == "slow" or i < samples // 2:
                    committed = min(end, committed + 80)
                elif kind == "rewind" and i % 200 == 0:
                    committed = max(0, committed - 500)
                elif kind == "rewind":
                    committed = min(end, committed + 90)
                consumed = max(consumed, committed)
                committing = not (kind in ("stalled", "stopped") and i >= samples // 2)
                state = "Empty" if kind == "stopped" and i >= samples // 2 else "Stable"
                if committing and i % 10 == 0:
                    cval = records.encode_value(records.OffsetCommitValue(committed, "", ts - 1000))
                    assert cval is not None
                    send(OFFSETS, cval, ckey)
                    commits += 1
                    last_commit = str(ts - 1000)
                value = template.format(ts=ts, start=t0, g=group, t=topic, p=part, m=consumed, b=consumed * 200,
                                        c=committed, e=end, lag=end - committed, tl=round((end - committed) / 10, 1),
                                        state=state, mem=0 if state == "Empty" else members, ct=last_commit)
                send(TELEMETRY, value.encode(), key, home)
                tel += 1
        p.poll(0)
    p.flush(120)
    return tel, commits


def run_spark(bootstrap: str, master: str, out: Path) -> tuple[float, dict]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gregor", "lag-report", "--bootstrap-server", bootstrap,
                           "--telemetry-topic", TELEMETRY, "--offsets-topic", OFFSETS, "--out", str(out),
                           "--master", master, "--driver-memory", "6g", "--json",
                           "--conf", "spark.driver.host=127.0.0.1"], capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"lag-report failed:\n{proc.stderr[-4000:]}")
    return elapsed, json.loads(proc.stdout)


SQL = """
CREATE TABLE samples AS
WITH s AS (SELECT * EXCLUDE (commit_ts), commit_ts AS last_commit_ts FROM tel),
st AS (
  SELECT *,
    (ts - lag(ts) OVER o) / 1000.0 AS _secs,
    lag(broker_start) OVER o AS _pstart, lag(messages) OVER o AS _pm, lag(bytes) OVER o AS _pb,
    CASE WHEN committed < lag(committed) OVER o THEN 1 ELSE 0 END AS _rw,
    CASE WHEN lag < lag(lag) OVER o THEN 1 ELSE 0 END AS _down
  FROM s WINDOW o AS (PARTITION BY "group", topic, "partition" ORDER BY ts)),
ev AS (
  SELECT *,
    count(committed) OVER w AS window_samples, min(ts) OVER w AS _wstart, min(lag) OVER w AS _minlag,
    min(committed) OVER w AS _minc, max(committed) OVER w AS _maxc,
    max(_rw) OVER ws AS _rewound, max(_down) OVER ws AS _wentdown
  FROM st
  WINDOW w AS (PARTITION BY "group", topic, "partition" ORDER BY ts ROWS BETWEEN {w1} PRECEDING AND CURRENT ROW),
         ws AS (PARTITION BY "group", topic, "partition" ORDER BY ts ROWS BETWEEN {w2} PRECEDING AND CURRENT ROW))
SELECT "group", topic, "partition", ts, committed, log_end, lag, time_lag_s, state, members, messages, bytes,
  CASE WHEN _secs > 0 THEN (CASE WHEN _pstart = broker_start AND messages >= _pm THEN messages - _pm
                                 ELSE messages END) / _secs END AS messages_per_s,
  CASE WHEN _secs > 0 THEN (CASE WHEN _pstart = broker_start AND bytes >= _pb THEN bytes - _pb
                                 ELSE bytes END) / _secs END AS bytes_per_s,
  last_commit_ts, window_samples,
  CASE WHEN committed IS NULL THEN NULL
       WHEN window_samples < 2 OR _minlag = 0 THEN 'OK'
       WHEN _rewound = 1 THEN 'REWIND'
       WHEN NOT (last_commit_ts IS NOT NULL AND last_commit_ts >= _wstart) AND coalesce(members, 0) = 0 THEN 'STOP'
       WHEN _minc = _maxc THEN 'STALL'
       WHEN _wentdown = 0 THEN 'WARNING'
       ELSE 'OK' END AS status
FROM ev;
CREATE TABLE group_timeline AS
  SELECT "group", ts, count(*) AS partitions, sum(lag) AS total_lag, max(time_lag_s) AS max_time_lag_s,
         sum(messages_per_s) AS messages_per_s, max(members) AS members,
         CASE WHEN bool_or(status IN ('STALL', 'STOP', 'REWIND')) THEN 'ERROR'
              WHEN bool_or(status = 'WARNING') THEN 'WARNING' ELSE 'OK' END AS status
  FROM samples GROUP BY "group", ts;
CREATE TABLE partition_throughput AS
  SELECT topic, "partition", ts, sum(messages_per_s) AS messages_per_s, sum(bytes_per_s) AS bytes_per_s
  FROM samples GROUP BY topic, "partition", ts;
CREATE TABLE partition_status AS
  SELECT * FROM samples QUALIFY row_number() OVER (PARTITION BY "group", topic, "partition" ORDER BY ts DESC) = 1;
CREATE TABLE group_status AS
  SELECT * FROM group_timeline QUALIFY row_number() OVER (PARTITION BY "group" ORDER BY ts DESC) = 1;
CREATE TABLE top_lagging AS
  SELECT * FROM group_status WHERE total_lag > 0 ORDER BY total_lag DESC, max_time_lag_s DESC, "group" LIMIT 10;
"""


def run_duckdb(bootstrap: str, out: Path, tel_count: int, commit_count: int, window: int = 10) -> tuple[float, dict]:
    import duckdb
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition

    started = time.monotonic()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-duckdb", "enable.auto.commit": False,
                  "fetch.queue.backoff.ms": 0})

    def read_all(topic: str, count: int) -> list:
        c.assign([TopicPartition(topic, p, 0) for p in c.list_topics(topic, timeout=30).topics[topic].partitions])
        got: list = []
        while len(got) < count:
            got += [m for m in c.consume(100_000, 1.0) if m.error() is None]
        return got

    tel_path = out / "telemetry.ndjson"
    with open(tel_path, "wb") as f:
        f.write(b"\n".join(m.value() for m in read_all(TELEMETRY, tel_count)))
    cols: dict[str, list] = {k: [] for k in ("group", "topic", "partition", "offset", "commit_ts")}
    for m in read_all(OFFSETS, commit_count):
        key = records.decode_key(m.key())
        value = records.decode_value(key, m.value())
        if isinstance(key, records.OffsetCommitKey) and isinstance(value, records.OffsetCommitValue):
            for name, v in (("group", key.group), ("topic", key.topic), ("partition", key.partition),
                            ("offset", value.offset), ("commit_ts", value.commit_timestamp)):
                cols[name].append(v)
    c.close()
    commits = pa.table(cols)  # noqa: F841 - read by DuckDB by name
    db = duckdb.connect()
    db.execute(f"""CREATE TABLE tel AS SELECT * FROM read_json('{tel_path}', format='newline_delimited',
        columns={{ts: 'BIGINT', broker: 'INTEGER', broker_start: 'BIGINT', "group": 'VARCHAR', topic: 'VARCHAR',
                 "partition": 'INTEGER', messages: 'BIGINT', bytes: 'BIGINT', committed: 'BIGINT',
                 log_end: 'BIGINT', lag: 'BIGINT', time_lag_s: 'DOUBLE', state: 'VARCHAR', members: 'INTEGER',
                 commit_ts: 'BIGINT'}})""")
    db.execute("CREATE TABLE commits AS SELECT * FROM commits")
    db.execute(SQL.format(w1=window - 1, w2=window - 2))
    for table in ("commits", "samples", "group_timeline", "partition_throughput", "partition_status", "group_status",
                  "top_lagging"):
        db.execute(f"COPY {table} TO '{out / table}.parquet' (FORMAT parquet)")
    counts = dict(db.execute("SELECT status, count(*) FROM samples GROUP BY status").fetchall())
    elapsed = time.monotonic() - started
    tel_path.unlink()
    return elapsed, counts


def spark_counts(out: Path) -> dict:
    import duckdb

    return dict(duckdb.sql(f"SELECT status, count(*) FROM read_parquet('{out}/tables/samples/*.parquet') "
                           "GROUP BY status").fetchall())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--master", action="append", help="Spark masters to time (default local[2])")
    args = ap.parse_args()
    masters = args.master or ["local[2]"]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="lag-bench-"))
    try:
        with gregor("log.segment.bytes=1073741824") as bootstrap:
            t = time.monotonic()
            tel, commits = generate(bootstrap, args.records)
            print(f"setup: {tel:,} telemetry records, {commits:,} commits produced in {time.monotonic() - t:.1f} s")
            base_dir = work / "duckdb"
            base_dir.mkdir()
            base_s, base_counts = run_duckdb(bootstrap, base_dir, tel, commits)
            print(f"duckdb  (one process):   {base_s:6.1f} s  {tel / base_s:>12,.0f} records/s")
            results = {}
            for master in masters:
                out = work / master.replace("[", "_").replace("]", "").replace("*", "all")
                spark_s, summary = run_spark(bootstrap, master, out)
                results[master] = spark_s
                same = spark_counts(out) == base_counts
                print(f"spark   {master:<16} {spark_s:6.1f} s  {tel / spark_s:>12,.0f} records/s  "
                      f"spark/duckdb {base_s / spark_s:.2f}x  statuses equal: {same}  "
                      f"groups: {summary['status_counts']}")
            if len(results) > 1:
                first, *rest = masters
                for m in rest:
                    print(f"scaling {first} -> {m}: {results[first] / results[m]:.2f}x")
            print(f"statuses per sample: {base_counts}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
