"""Storage faults against a real broker: a full disk (a small tmpfs the test mounts itself), topic
deletion as the way out of it, and a corrupt batch in the middle of a segment.

Full disk: produce while full answers KAFKA_STORAGE_ERROR per partition on an open connection;
once space is freed, 200 x 10 KB acks=all records are acknowledged and every acknowledged record
reads back, also after a clean restart and after SIGKILL."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.admin.wire_client import WireClient as Wire
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch
from tests.support.broker_process import BrokerProcess

VALUE = 10 * 1024


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs mounted for this test (root only)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the full-disk tests fill a small file system of their own)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def start_broker(data: Path, logs: Path, **overrides: str) -> BrokerProcess:
    b = BrokerProcess(data, {k.replace("_", "."): v for k, v in overrides.items()})
    b.log_path = logs / f"broker-{b.port}.log"  # the broker's own output must not need the full disk
    return b.start()


@pytest.fixture
def disk_broker(small_disk, tmp_path):
    started: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        b = start_broker(small_disk / "data", tmp_path, **overrides)
        started.append(b)
        return b

    yield make
    for b in started:
        if b.alive():
            b.kill()


def fill(mnt: Path) -> Path:
    """Fill the file system with one file; returns it."""
    filler = mnt / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
        for size in (4096, 512, 1):  # the last bytes too
            while True:
                try:
                    f.write(b"\0" * size)
                except OSError:
                    break
    return filler


def value(tag: str, i: int) -> bytes:
    head = f"{tag}-{i:05d}-".encode()
    return head + b"x" * (VALUE - len(head))


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> list[int]:
    acked: dict[bytes, int] = {}
    errors: list[object] = []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            errors.append(err)

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000})
    for v in values:
        p.produce(topic, value=v, partition=partition, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors
    return [acked[v] for v in values]


def consume(bootstrap: str, topic: str, partition: int, expected: int, timeout: float = 30) -> list[tuple[int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "check.crcs": True, "fetch.max.bytes": 1 << 20})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append((m.offset(), m.value()))
    c.close()
    return out


def raw_produce(w: Wire, topic: str, partition: int, records: bytes) -> object:
    resp = w.call(0, 9, {"acks": -1, "timeout": 5000, "transactional_id": None,
                         "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return resp.responses[0].partition_responses[0]


def metadata_topics(w: Wire) -> set[str]:
    resp = w.call(3, 1, {"topics": None})
    return {t.name for t in resp.topics}


def test_full_disk_loses_nothing_acknowledged(disk_broker, small_disk):
    b = disk_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("t", 2)])["t"].result(10)
    before = [value("pre", i) for i in range(50)]
    assert produce(b.bootstrap, "t", 0, before) == list(range(50))

    filler = fill(small_disk)
    w = Wire(b.bootstrap)
    for i in range(5):  # batches of 10 KB .. 200 KB: some fail after a short write, some at once
        for part in (0, 1):
            res = raw_produce(w, "t", part, build_batch([(None, value("lost", i))] * (1 + 4 * i)))
            assert res.error_code == ErrorCode.kafka_storage_error, res
    assert "t" in metadata_topics(w)  # the connection is still open and other requests are served
    w.close()
    assert consume(b.bootstrap, "t", 0, 50) == list(enumerate(before))  # reads need no space

    filler.unlink()
    after = [value("post", i) for i in range(200)]
    assert produce(b.bootstrap, "t", 0, after) == list(range(50, 250))
    expected = list(enumerate(before + after))
    assert consume(b.bootstrap, "t", 0, 250) == expected

    b.restart()
    assert consume(b.bootstrap, "t", 0, 250) == expected
    b.kill()
    b.start()
    assert consume(b.bootstrap, "t", 0, 250) == expected
    assert "torn or corrupt" not in b.output()
    b.stop()


def test_a_transaction_committed_while_the_disk_is_full_ends_all_or_nothing(disk_broker, small_disk):
    """A transactional producer commits while the disk is full: the coordinator cannot write its
    PrepareCommit record (or the markers), the client keeps retrying EndTxn, and once space is
    freed the transaction commits whole: read_committed sees all of it, before and after a
    SIGKILL of the broker, and no transaction is left open."""
    import threading

    b = disk_broker(**{"transaction.state.log.num.partitions": "4"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("tx", 1)])["tx"].result(10)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "full-disk", "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    values = [value("txn", i)[:200] for i in range(20)]
    for v in values:
        p.produce("tx", v, partition=0)
    assert p.flush(30) == 0
    filler = fill(small_disk)
    outcome: list[object] = []

    def commit() -> None:
        try:
            p.commit_transaction(90)
            outcome.append("committed")
        except Exception as e:  # noqa: BLE001 - reported below
            outcome.append(e)

    t = threading.Thread(target=commit)
    t.start()
    time.sleep(3)
    assert t.is_alive() or outcome, outcome  # retrying, or refused: not committed while the disk is full
    filler.unlink()
    t.join(100)
    assert outcome == ["committed"], outcome

    def read_committed() -> list[bytes]:
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"rc-{time.monotonic_ns()}",
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
        c.assign([TopicPartition("tx", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < len(values) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        return got

    assert read_committed() == values
    b.kill()
    b.start()
    assert read_committed() == values
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    low, high = c.get_watermark_offsets(TopicPartition("tx", 0), 10)
    c.close()
    assert high == len(values) + 1  # the last stable offset is past the marker: nothing left open
    b.stop()


def test_a_full_disk_keeps_storage_errors_per_partition(disk_broker, small_disk):
    """A produce request to two topics on a full disk: each partition gets its own answer."""
    b = disk_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("a", 1), NewTopic("b", 1)]).values():
        f.result(10)
    filler = fill(small_disk)
    w = Wire(b.bootstrap)
    resp = w.call(0, 9, {"acks": 1, "timeout": 5000, "transactional_id": None, "topic_data": [
        {"name": "a", "partition_data": [{"index": 0, "records": build_batch([(None, value("a", 0))])}]},
        {"name": "nope", "partition_data": [{"index": 0, "records": build_batch([(None, b"v")])}]},
    ]})
    codes = [p.error_code for t in resp.responses for p in t.partition_responses]
    assert codes[0] == ErrorCode.kafka_storage_error and codes[1] != ErrorCode.kafka_storage_error
    filler.unlink()
    res = raw_produce(w, "a", 0, build_batch([(None, value("a", 1))]))
    assert res.error_code == 0 and res.base_offset == 0
    b.stop()


def test_delete_topic_is_the_way_out_of_a_full_disk(disk_broker, small_disk):
    b = disk_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("big", 1), NewTopic("keep", 1)]).values():
        f.result(10)
    produce(b.bootstrap, "big", 0, [value("big", i) for i in range(300)])  # 3 MB
    kept = [value("keep", i) for i in range(20)]
    produce(b.bootstrap, "keep", 0, kept)
    fill(small_disk)  # left in place: only the deletion frees space
    w = Wire(b.bootstrap)
    res = raw_produce(w, "keep", 0, build_batch([(None, value("full", 0))]))
    assert res.error_code == ErrorCode.kafka_storage_error

    admin.delete_topics(["big"], operation_timeout=30)["big"].result(30)
    st = os.statvfs(small_disk)
    assert st.f_bavail * st.f_frsize > 2_000_000  # the space is back
    assert "big" not in metadata_topics(w)
    more = [value("more", i) for i in range(50)]
    assert produce(b.bootstrap, "keep", 0, more) == list(range(20, 70))
    expected = list(enumerate(kept + more))
    w.close()

    for restart in ("kill", "clean"):
        if restart == "kill":
            b.kill()
        else:
            b.stop()
        b.start()
        w = Wire(b.bootstrap)
        assert "big" not in metadata_topics(w), f"the deleted topic came back after a {restart} restart"
        w.close()
        assert consume(b.bootstrap, "keep", 0, 70) == expected
    leftovers = [p.name for p in (small_disk / "data").iterdir() if p.name.startswith("big")]
    assert leftovers == []
    b.stop()


def test_corrupt_batch_mid_segment_is_reported_not_skipped(broker_factory):
    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("c", 2)])["c"].result(10)
    w = Wire(b.bootstrap)
    for part in (0, 1):
        for i in range(30):  # 30 batches of 10 records
            recs = build_batch([(None, b"v%03d" % (10 * i + j)) for j in range(10)])
            assert raw_produce(w, "c", part, recs).error_code == 0
    w.close()
    b.stop()
    positions = []
    for part in (0, 1):
        seg = b.data_dir / f"c-{part}" / "00000000000000000000.log"
        data = seg.read_bytes()
        pos = 0
        for _ in range(15):  # to the batch of offsets 150..159
            pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
        positions.append((seg, pos))
    seg, pos = positions[0]
    with open(seg, "r+b") as f:  # partition 0: the batch length is destroyed
        f.seek(pos + 8)
        f.write(b"\0\0\0\0")
    seg, pos = positions[1]
    with open(seg, "r+b") as f:  # partition 1: a byte of the records (the CRC no longer matches)
        f.seek(pos + 70)
        f.write(b"\xee")
    b.start()

    for part in (0, 1):
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"crc-{part}", "enable.auto.commit": False,
                      "check.crcs": True})
        c.assign([TopicPartition("c", part, 0)])
        got, errors = [], []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (errors and len(got) >= 150):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(m.error())
                continue
            got.append(m.offset())
        c.close()
        assert errors, f"partition {part}: the corruption was not reported"
        assert got[:150] == list(range(150))
        assert not [o for o in got if 150 <= o < 160], f"partition {part}: records of the corrupt batch delivered"
        if part == 0:  # nothing after the corruption was served as if it were not there
            assert max(got) == 149
    assert "corrupt record batch at position" in b.output()
    # lookups that walk the batch headers answer per partition instead of failing the request
    w = Wire(b.bootstrap)
    resp = w.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "c", "partitions": [
        {"partition_index": 0, "timestamp": 2**62}, {"partition_index": 1, "timestamp": -3}]}]})
    parts = resp.topics[0].partitions
    assert [p.partition_index for p in parts] == [0, 1]
    assert all(p.error_code in (ErrorCode.none, ErrorCode.corrupt_message) for p in parts)
    w.close()
    b.stop()


def test_sigkill_during_deletion_leaves_the_topic_or_nothing(broker_factory):
    b = broker_factory()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("doomed", 400), NewTopic("other", 1)])["doomed"].result(30)
    w = Wire(b.bootstrap)
    for part in range(0, 400, 40):
        assert raw_produce(w, "doomed", part, build_batch([(None, b"d%03d" % part)])).error_code == 0
    assert raw_produce(w, "other", 0, build_batch([(None, b"o")])).error_code == 0
    b.stop()  # a clean stop: the next start loads partitions lazily, as in production
    for delay in (0.0, 0.02, 0.1):
        b.start()
        w = Wire(b.bootstrap)
        if "doomed" not in metadata_topics(w):
            break
        w.send_raw(w.request_bytes(20, 4, {"topic_names": ["doomed"], "timeout_ms": 30000}))
        time.sleep(delay)
        b.kill()
        b.start()
        w = Wire(b.bootstrap)
        names = metadata_topics(w)
        assert "other" in names
        dirs = [p.name for p in b.data_dir.iterdir() if p.name.startswith("doomed")]
        if "doomed" in names:  # the deletion had not begun: everything is still there
            assert sorted(dirs) == sorted(f"doomed-{p}" for p in range(400))
            resp = w.call(2, 1, {"replica_id": -1, "topics": [
                {"name": "doomed", "partitions": [{"partition_index": p, "timestamp": -1} for p in range(400)]}]})
            ends = {p.partition_index: p.offset for p in resp.topics[0].partitions}
            assert ends == {p: (1 if p % 40 == 0 else 0) for p in range(400)}
        else:  # the deletion had begun: it was finished at the start
            assert dirs == []
        w.close()
        b.stop()
