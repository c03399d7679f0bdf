"""Many partitions (issue 10, item 9): creating them does not stop the broker from answering other
requests, segment files are opened on demand within log.segment.open.files.max, a request over
topic.creation.max.partitions is refused with POLICY_VIOLATION, and every partition's data
survives restarts. Timings are in bench/topic_scale.py, not here."""

from __future__ import annotations

import os
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from gregor.admin.wire_client import WireClient as Wire
from gregor.protocol.errors import ErrorCode


def broker_fds(b) -> int:
    return len(os.listdir(f"/proc/{b.proc.pid}/fd"))


def test_creation_does_not_stall_other_requests(broker_factory):
    b = broker_factory(log_segment_open_files_max="64")
    answered_during: list[int] = []
    done = threading.Event()

    def probe():
        w = Wire(b.bootstrap, timeout=60)
        n = 0
        while not done.is_set():
            w.call(3, 1, {"topics": []})
            n += 1
        answered_during.append(n)
        w.close()

    w = Wire(b.bootstrap, timeout=120)
    t = threading.Thread(target=probe)
    t.start()
    resp = w.call(19, 4, {"topics": [{"name": "wide", "num_partitions": 4000, "replication_factor": 1,
                                      "assignments": [], "configs": []}],
                          "timeout_ms": 120000, "validate_only": False})
    done.set()
    t.join()
    assert resp.topics[0].error_code == 0
    # Metadata requests kept being answered while the 4000 partitions were made
    assert answered_during[0] >= 3
    assert broker_fds(b) < 64 + 100


def test_partition_limit_is_a_policy_violation(broker_factory):
    b = broker_factory(topic_creation_max_partitions="100")
    w = Wire(b.bootstrap)
    resp = w.call(19, 4, {"topics": [
        {"name": "ok", "num_partitions": 60, "replication_factor": 1, "assignments": [], "configs": []},
        {"name": "over", "num_partitions": 60, "replication_factor": 1, "assignments": [], "configs": []},
    ], "timeout_ms": 10000, "validate_only": False})
    codes = {t.name: t.error_code for t in resp.topics}
    assert codes == {"ok": 0, "over": ErrorCode.policy_violation}
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    f = admin.create_partitions([NewPartitions("ok", 200)])["ok"]
    try:
        f.result(10)
        raise AssertionError("adding 140 partitions over a limit of 100 succeeded")
    except Exception as e:  # noqa: BLE001 - confluent's KafkaException
        assert e.args[0].code() == ErrorCode.policy_violation
    admin.create_partitions([NewPartitions("ok", 150)])["ok"].result(10)
    md = admin.list_topics("ok", timeout=10)
    assert len(md.topics["ok"].partitions) == 150


def test_more_partitions_than_open_files_keep_their_data(broker_factory):
    b = broker_factory(log_segment_open_files_max="16", log_segment_bytes="2000")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("many", 120)])["many"].result(30)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(1200):  # 10 records a partition, several segments each
        p.produce("many", value=b"r%05d" % i + b"x" * 300, partition=i % 120)
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert broker_fds(b) < 16 + 100

    def read_all():
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "v", "enable.auto.commit": False})
        c.assign([TopicPartition("many", q, 0) for q in range(120)])
        seen = set()
        deadline = time.monotonic() + 60
        while len(seen) < 1200 and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    seen.add(m.value()[:6])
        c.close()
        return seen

    assert len(read_all()) == 1200
    for how in ("clean", "kill"):
        if how == "clean":
            b.stop()
        else:
            b.kill()
        b.start()
        assert len(read_all()) == 1200
        assert broker_fds(b) < 16 + 100
