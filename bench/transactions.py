"""What transactions cost (KIP-98), measured with the confluent-kafka client against one
``gregor serve`` (bench/peers.py's: a subprocess on 127.0.0.1 with a temporary data directory),
side by side in one run:

1. Produce throughput (``produce``) of ``--size`` byte records (1 KiB) with acks=all to a fresh
   one-partition topic per run: an idempotent non-transactional producer, and transactional
   producers committing every 100 and every 1,000 records (begin, produce, commit_transaction,
   which flushes). Records/s, MB/s, the broker's CPU seconds per GB, and the ratio to the
   non-transactional producer (goal: >= 0.7x with 1,000-record transactions). ``--rounds`` runs
   of each, in alternating order; the median is reported. The same runs follow against
   librdkafka's in-process mock cluster (a broker that costs nothing): the client's own ceiling
   for each ratio (``--no-ceiling`` skips them).
2. Commit latency (``commit``): a transactional producer produces 100 records (or 1), flushes
   them (delivered, so what follows is the commit alone), then times ``commit_transaction()``
   (EndTxn to the coordinator, the PrepareCommit record, the markers, the CompleteCommit
   record); p50/p99 over ``--commits`` transactions of each size. The whole transaction (begin to
   commit returned, the records' produce included) is reported beside it.
3. Fetch throughput (``fetch``): one partition filled by transactions of 100 records, every
   ``--abort-every``-th aborted (10%: the aborted transactions' batches and the markers stay in
   the log), then read from the beginning to its end (librdkafka's partition EOF) by consumers
   with isolation.level read_committed and read_uncommitted, ``--rounds`` times in alternating
   order. Both read the same log; read_committed is given fewer records (the aborted ones are
   dropped, by librdkafka, from the aborted transactions list the broker sends) and reads up to the
   last stable offset. The figure compared is the log's records over the time to reach its end
   (goal: read_committed >= 0.9x read_uncommitted); the records delivered per second are printed
   beside it.

    .venv/bin/python bench/transactions.py                 # the full run (about 2 minutes on 2 cores)
    .venv/bin/python bench/transactions.py --quick         # a smoke run (under 30 s)
    .venv/bin/python bench/transactions.py --json          # the figures as JSON on stdout (text on stderr)
    .venv/bin/python bench/transactions.py --only produce --records 200000 --rounds 5

Client and broker share the machine: the figures are for comparing modes within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import IO, Any

sys.path.insert(0, os.path.dirname(__file__))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import peers  # noqa: E402

SECTIONS = ("produce", "commit", "fetch")
BASE_PRODUCER = {"linger.ms": 5, "batch.size": 1_000_000, "acks": "all", "queue.buffering.max.messages": 1_000_000,
                 "queue.buffering.max.kbytes": 2_000_000, "compression.type": "none", "enable.idempotence": True,
                 "log_level": 4}
CONSUMER = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760, "fetch.wait.max.ms": 100,
            "queued.min.messages": 200_000, "enable.auto.commit": False, "fetch.queue.backoff.ms": 0,
            "enable.partition.eof": True, "auto.offset.reset": "earliest", "log_level": 4}
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Report:
    """Text for the reader: standard output, or standard error when the figures go out as JSON."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def __call__(self, line: str = "") -> None:
        print(line, file=self.stream, flush=True)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) a process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=10)[topic].result(30)


def percentile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def _produce_all(p: Producer, topic: str, n: int, payload: bytes) -> None:
    for _ in range(n):
        try:
            p.produce(topic, payload)
        except BufferError:
            p.poll(0.01)
            p.produce(topic, payload)
        p.poll(0)


class Failures:
    """Delivery reports: a failed delivery fails the benchmark (a figure over lost records means
    nothing)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def __call__(self, err: Any, _msg: Any) -> None:
        if err is not None and len(self.errors) < 5:
            self.errors.append(str(err))

    def check(self, what: str) -> None:
        if self.errors:
            raise RuntimeError(f"{what}: delivery failed: {'; '.join(self.errors)}")


# -- 1. produce throughput ------------------------------------------------------------------------

def produce_run(bootstrap: str, mode: str, n: int, size: int, pid: int | None) -> dict[str, Any]:
    """One run: ``mode`` is "idempotent" or "txn-<records per transaction>". ``pid``: the broker
    process whose CPU is counted; None for librdkafka's mock cluster (in this process; it creates
    topics on first use)."""
    topic = f"txbench-{mode}-{uuid.uuid4().hex[:8]}"
    if pid is not None:
        create_topic(bootstrap, topic)
    failed = Failures()
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, **BASE_PRODUCER, "on_delivery": failed}
    per_txn = int(mode.split("-")[1]) if mode.startswith("txn-") else 0
    if per_txn:
        conf["transactional.id"] = f"{topic}-tx"
    p = Producer(conf)
    payload = os.urandom(size)
    # warm up: connections, metadata, the producer id (and for transactions the coordinator and
    # the partition's first AddPartitionsToTxn)
    if per_txn:
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, payload)
        p.commit_transaction(30)
    else:
        p.produce(topic, payload)
        p.flush(30)
    c0 = process_cpu(pid) if pid is not None else 0.0
    start = time.perf_counter()
    commits = 0
    if per_txn:
        left = n
        while left > 0:
            k = min(per_txn, left)
            p.begin_transaction()
            _produce_all(p, topic, k, payload)
            p.commit_transaction(60)
            commits += 1
            left -= k
    else:
        _produce_all(p, topic, n, payload)
        if p.flush(120):
            raise RuntimeError(f"{mode}: records not delivered within 120 s")
    elapsed = time.perf_counter() - start
    cpu = process_cpu(pid) - c0 if pid is not None else float("nan")
    failed.check(mode)
    return {"mode": mode, "records": n, "seconds": elapsed, "records_s": n / elapsed,
            "mb_s": n * size / 1e6 / elapsed, "transactions": commits,
            "broker_cpu_s_per_gb": cpu / (n * size / 1e9)}


def produce_section(args: argparse.Namespace, bootstrap: str, pid: int | None, say: Callable[[str], None],
                    broker: str = "Gregor") -> dict[str, Any]:
    modes = ["idempotent", "txn-100", "txn-1000"]
    say(f"Produce throughput against {broker}: {args.records:,} records of {args.size} bytes per run, acks=all, "
        f"one partition, {args.rounds} round(s) in alternating order")
    # a discarded run first: the broker's first segments, the page cache, the client's start
    produce_run(bootstrap, "idempotent", min(args.records, 20_000), args.size, pid)
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = modes if r % 2 == 0 else list(reversed(modes))
        for mode in order:
            run = produce_run(bootstrap, mode, args.records, args.size, pid)
            run["round"] = r
            runs.append(run)
            cpu = (f"; broker CPU {run['broker_cpu_s_per_gb']:.1f} s/GB" if pid is not None else "")
            say(f"  round {r + 1} {mode:10s} {run['records_s']:>9,.0f} records/s {run['mb_s']:7.1f} MB/s "
                f"({run['transactions']} transactions{cpu})")
    median = {m: {k: statistics.median(x[k] for x in runs if x["mode"] == m)
                  for k in ("records_s", "mb_s", "broker_cpu_s_per_gb")} for m in modes}
    base = median["idempotent"]["records_s"]
    ratios = {m: median[m]["records_s"] / base for m in modes if m != "idempotent"}
    return {"records": args.records, "size": args.size, "rounds": args.rounds, "runs": runs,
            "median": median, "ratios": ratios}


# -- 2. commit latency ----------------------------------------------------------------------------

def commit_section(args: argparse.Namespace, bootstrap: str, say: Callable[[str], None]) -> dict[str, Any]:
    say(f"Commit latency: {args.commits} transactions of each size; commit_transaction() timed after the "
        "records were flushed (delivered)")
    out: dict[str, Any] = {"commits": args.commits, "sizes": {}}
    for size in (100, 1):
        topic = f"txbench-commit{size}-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic)
        failed = Failures()
        p = Producer({"bootstrap.servers": bootstrap, **BASE_PRODUCER, "linger.ms": 1, "on_delivery": failed,
                      "transactional.id": f"{topic}-tx"})
        p.init_transactions(30)
        payload = os.urandom(args.size)
        commit_ms: list[float] = []
        whole_ms: list[float] = []
        for i in range(args.commits + 3):  # the first three warm up
            t0 = time.perf_counter()
            p.begin_transaction()
            _produce_all(p, topic, size, payload)
            p.flush(30)
            t1 = time.perf_counter()
            p.commit_transaction(30)
            t2 = time.perf_counter()
            if i >= 3:
                commit_ms.append((t2 - t1) * 1000)
                whole_ms.append((t2 - t0) * 1000)
        failed.check(f"commit latency, {size}-record transactions")
        fig = {"commit_p50_ms": statistics.median(commit_ms), "commit_p99_ms": percentile(commit_ms, 99),
               "commit_max_ms": max(commit_ms), "transaction_p50_ms": statistics.median(whole_ms),
               "transaction_p99_ms": percentile(whole_ms, 99)}
        out["sizes"][str(size)] = fig
        say(f"  {size:>3}-record transactions: commit p50 {fig['commit_p50_ms']:6.2f} ms  p99 "
            f"{fig['commit_p99_ms']:6.2f} ms  max {fig['commit_max_ms']:6.2f} ms | whole transaction p50 "
            f"{fig['transaction_p50_ms']:6.2f} ms  p99 {fig['transaction_p99_ms']:6.2f} ms")
    return out


# -- 3. fetch throughput --------------------------------------------------------------------------

def fill(bootstrap: str, topic: str, n: int, size: int, abort_every: int) -> tuple[int, int]:
    """``n`` records in transactions of 100, every ``abort_every``-th aborted; returns (committed
    records, aborted records)."""
    failed = Failures()
    p = Producer({"bootstrap.servers": bootstrap, **BASE_PRODUCER, "on_delivery": failed,
                  "transactional.id": f"{topic}-filler"})
    p.init_transactions(30)
    payload = os.urandom(size)
    committed = aborted = 0
    i = 0
    while committed + aborted < n:
        k = min(100, n - committed - aborted)
        p.begin_transaction()
        _produce_all(p, topic, k, payload)
        if abort_every and i % abort_every == abort_every - 1:
            p.flush(30)  # the aborted records reach the log (what read_committed must skip)
            p.abort_transaction(30)
            aborted += k
        else:
            p.commit_transaction(30)
            committed += k
        i += 1
    failed.check("filling the fetch topic")
    return committed, aborted


def read_to_end(bootstrap: str, topic: str, isolation: str) -> tuple[float, int, int]:
    """Read the partition from its start to its end (partition EOF); (seconds, records, bytes)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txbench-{isolation}-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, **CONSUMER})
    c.assign([TopicPartition(topic, 0, 0)])
    got = nbytes = 0
    start = time.perf_counter()
    deadline = start + 300
    done = False
    while not done and time.perf_counter() < deadline:
        for m in c.consume(10_000, 0.5):
            err = m.error()
            if err is None:
                got += 1
                nbytes += len(m.value() or b"")
            elif err.code() == KafkaError._PARTITION_EOF:
                done = True
            else:
                raise RuntimeError(f"{isolation} consumer: {err}")
    elapsed = time.perf_counter() - start
    c.close()
    if not done:
        raise RuntimeError(f"{isolation} consumer did not reach the end in 300 s ({got} records)")
    return elapsed, got, nbytes


def fetch_section(args: argparse.Namespace, bootstrap: str, pid: int, say: Callable[[str], None]) -> dict[str, Any]:
    topic = f"txbench-fetch-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    committed, aborted = fill(bootstrap, topic, args.fetch_records, args.size, args.abort_every)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "txbench-probe"})
    lo, hi = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    probe.close()
    say(f"Fetch throughput: one partition of {committed + aborted:,} records in 100-record transactions, "
        f"{aborted:,} of them in aborted ones (every {args.abort_every}th), {hi - lo:,} offsets with the markers; "
        f"read from the start to the end, {args.rounds} round(s) in alternating order")
    modes = ["read_uncommitted", "read_committed"]
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for mode in (modes if r % 2 == 0 else list(reversed(modes))):
            c0 = process_cpu(pid)
            seconds, got, nbytes = read_to_end(bootstrap, topic, mode)
            cpu = process_cpu(pid) - c0
            want = committed if mode == "read_committed" else committed + aborted
            if got != want:
                raise RuntimeError(f"{mode}: got {got:,} records, expected {want:,}")
            run = {"mode": mode, "round": r, "seconds": seconds, "delivered": got,
                   "log_records_s": (committed + aborted) / seconds, "delivered_records_s": got / seconds,
                   "mb_s": nbytes / 1e6 / seconds, "broker_cpu_s": cpu}
            runs.append(run)
            say(f"  round {r + 1} {mode:16s} {run['log_records_s']:>9,.0f} log records/s "
                f"({got:,} delivered: {run['delivered_records_s']:,.0f}/s, {run['mb_s']:.1f} MB/s; "
                f"broker CPU {cpu:.2f} s)")
    median = {m: {k: statistics.median(x[k] for x in runs if x["mode"] == m)
                  for k in ("seconds", "log_records_s", "delivered_records_s", "broker_cpu_s")} for m in modes}
    ratio = median["read_committed"]["log_records_s"] / median["read_uncommitted"]["log_records_s"]
    return {"records": committed + aborted, "committed": committed, "aborted": aborted, "offsets": hi - lo,
            "rounds": args.rounds, "runs": runs, "median": median, "ratio": ratio}


# -- the table --------------------------------------------------------------------------------------

def summary(result: dict[str, Any], say: Callable[[str], None]) -> None:
    say("")
    say(f"{'figure':44s} {'value':>14s} {'ratio':>8s} {'goal':>8s}")
    say("-" * 77)
    if "produce" in result:
        pr = result["produce"]
        for mode, label in (("idempotent", "produce, idempotent (records/s)"),
                            ("txn-100", "produce, 100-record transactions"),
                            ("txn-1000", "produce, 1,000-record transactions")):
            ratio = f"{pr['ratios'][mode]:.2f}x" if mode in pr["ratios"] else "1.00x"
            goal = ">=0.70x" if mode == "txn-1000" else ""
            say(f"{label:44s} {pr['median'][mode]['records_s']:>14,.0f} {ratio:>8s} {goal:>8s}")
    if "produce_ceiling" in result:
        ce = result["produce_ceiling"]
        for mode in ("txn-100", "txn-1000"):
            say(f"{f'  client ceiling (mock broker), {mode}':44s} {ce['median'][mode]['records_s']:>14,.0f} "
                f"{ce['ratios'][mode]:>7.2f}x")
    if "commit" in result:
        for size, fig in result["commit"]["sizes"].items():
            say(f"{f'commit_transaction, {size}-record txn p50/p99':44s} "
                f"{fig['commit_p50_ms']:>6.2f}/{fig['commit_p99_ms']:<6.2f}ms")
    if "fetch" in result:
        fe = result["fetch"]
        say(f"{'fetch, read_uncommitted (log records/s)':44s} "
            f"{fe['median']['read_uncommitted']['log_records_s']:>14,.0f} {'1.00x':>8s}")
        say(f"{'fetch, read_committed (log records/s)':44s} "
            f"{fe['median']['read_committed']['log_records_s']:>14,.0f} {fe['ratio']:>7.2f}x {'>=0.90x':>8s}")
    ratios = []
    if "produce" in result:
        ratios += [f"txn-100/idempotent {result['produce']['ratios']['txn-100']:.2f}x",
                   f"txn-1000/idempotent {result['produce']['ratios']['txn-1000']:.2f}x"]
    if "fetch" in result:
        ratios.append(f"read_committed/read_uncommitted {result['fetch']['ratio']:.2f}x")
    if "produce_ceiling" in result:
        ratios += [f"client ceiling txn-1000/idempotent {result['produce_ceiling']['ratios']['txn-1000']:.2f}x"]
    if ratios:
        say("ratios: " + ", ".join(ratios))


def _sections(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in parts if p not in SECTIONS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(bad)}; the parts are {', '.join(SECTIONS)}")
    return parts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 5000 records per produce run, 1 round, 30 commits, 10000 fetched records")
    ap.add_argument("--records", type=int, help="records per produce run (default 100000, --quick 5000)")
    ap.add_argument("--size", type=int, default=1024, help="record size in bytes (default 1024)")
    ap.add_argument("--rounds", type=int, help="produce and fetch rounds (default 3, --quick 1)")
    ap.add_argument("--commits", type=int, help="timed commits per transaction size (default 300, --quick 30)")
    ap.add_argument("--fetch-records", type=int, help="records in the fetched partition (default 200000, "
                                                      "--quick 10000)")
    ap.add_argument("--abort-every", type=int, default=10,
                    help="abort every n-th transaction of the fetched partition (default 10: 10%%)")
    ap.add_argument("--only", type=_sections, metavar="PART[,PART]",
                    help=f"run these parts only, of {', '.join(SECTIONS)}")
    ap.add_argument("--json", action="store_true", help="the figures as JSON on stdout, the text on stderr")
    ap.add_argument("--no-ceiling", action="store_true",
                    help="skip the produce runs against librdkafka's mock cluster (the client's own ceiling)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config override (repeatable)")
    args = ap.parse_args(argv)
    args.records = args.records or (5_000 if args.quick else 100_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.commits = args.commits or (30 if args.quick else 300)
    args.fetch_records = args.fetch_records or (10_000 if args.quick else 200_000)
    args.only = args.only or list(SECTIONS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = Report(sys.stderr if args.json else sys.stdout)
    load = os.getloadavg()
    say(f"bench/transactions.py: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    result: dict[str, Any] = {"cores": os.cpu_count(), "load_average": load}
    with peers.gregor_process(*args.override) as (bootstrap, proc):
        if "produce" in args.only:
            result["produce"] = produce_section(args, bootstrap, proc.pid, say)
        if "commit" in args.only:
            result["commit"] = commit_section(args, bootstrap, say)
        if "fetch" in args.only:
            result["fetch"] = fetch_section(args, bootstrap, proc.pid, say)
    if "produce" in args.only and not args.no_ceiling:
        # the same runs against librdkafka's in-process mock cluster, which answers every request at
        # once: what this client reaches when the broker costs nothing, so how much of the
        # transactional penalty is the client's own (it enqueues a transaction's records, then
        # waits for the commit, while an idempotent stream overlaps the two)
        with peers.mock_cluster() as mock:
            result["produce_ceiling"] = produce_section(args, mock, None, say, "librdkafka's mock cluster")
    summary(result, say)
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
