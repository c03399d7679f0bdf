"""Fetch semantics on the wire: long poll, min/max bytes, sessions declined, topic ids."""

import threading
import time

from gregor.admin.wire_client import WireClient as Wire
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch


def produce(w, topic, n=1, size=10, partition=0):
    w.call(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": True,
                   "include_topic_authorized_operations": False})  # auto-creates, as clients do
    for _ in range(n):
        r = w.call(0, 9, {"acks": -1, "timeout": 1000, "transactional_id": None,
                          "topic_data": [{"name": topic, "partition_data": [
                              {"index": partition, "records": build_batch([(b"k", b"x" * size)])}]}]})
        assert r.responses[0].partition_responses[0].error_code == 0


def fetch_v11(topic, offset=0, max_wait=0, min_bytes=1, max_bytes=1 << 20, pmax=1 << 20, session=(0, -1)):
    return {"replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": session[0], "session_epoch": session[1],
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "log_start_offset": -1,
                                                        "partition_max_bytes": pmax}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def test_long_poll_waits_for_data_and_wakes_on_produce(broker):
    w = Wire(broker.bootstrap)
    produce(w, "lp")
    start = time.monotonic()
    r = w.call(1, 11, fetch_v11("lp", offset=1, max_wait=400))
    assert time.monotonic() - start >= 0.35
    assert r.responses[0].partitions[0].records in (b"", None)

    other = Wire(broker.bootstrap)
    threading.Timer(0.2, lambda: produce(other, "lp")).start()
    start = time.monotonic()
    r = w.call(1, 11, fetch_v11("lp", offset=1, max_wait=5000))
    elapsed = time.monotonic() - start
    assert 0.15 < elapsed < 2.0
    assert r.responses[0].partitions[0].records
    assert r.responses[0].partitions[0].high_watermark == 2


def test_min_bytes_waits_until_enough(broker):
    w = Wire(broker.bootstrap)
    produce(w, "mb", size=10)
    start = time.monotonic()
    r = w.call(1, 11, fetch_v11("mb", max_wait=300, min_bytes=10_000))
    assert time.monotonic() - start >= 0.25
    assert r.responses[0].partitions[0].records  # what there is, at the deadline


def test_partition_max_bytes_and_first_batch_rule(broker):
    w = Wire(broker.bootstrap)
    produce(w, "pm", n=5, size=1000)
    r = w.call(1, 11, fetch_v11("pm", pmax=100))
    recs = r.responses[0].partitions[0].records
    assert 1000 < len(recs) < 1200  # one whole batch although larger than the limit


def test_fetch_sessions_are_declined(broker):
    w = Wire(broker.bootstrap)
    produce(w, "fs")
    r = w.call(1, 11, fetch_v11("fs", session=(0, 0)))  # asks for a new session
    assert r.error_code == 0 and r.session_id == 0  # declined: keep sending full requests
    r = w.call(1, 11, fetch_v11("fs", session=(1234, 5)))
    assert r.error_code == ErrorCode.fetch_session_id_not_found


def test_unknown_topic_and_out_of_range(broker):
    w = Wire(broker.bootstrap)
    produce(w, "oor")
    r = w.call(1, 11, fetch_v11("missing"))
    assert r.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    r = w.call(1, 11, fetch_v11("oor", offset=50))
    p = r.responses[0].partitions[0]
    assert p.error_code == ErrorCode.offset_out_of_range and p.high_watermark == 1


def test_fetch_by_topic_id_v13(broker):
    w = Wire(broker.bootstrap)
    produce(w, "byid")
    md = w.call(3, 12, {"topics": [{"name": "byid"}], "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    tid = md.topics[0].topic_id
    body = fetch_v11("byid")
    body["topics"] = [{"topic_id": tid, "partitions": body["topics"][0]["partitions"]}]
    r = w.call(1, 13, body)
    assert r.responses[0].topic_id == tid and r.responses[0].partitions[0].records
    body["topics"][0]["topic_id"] = b"\x09" * 16
    r = w.call(1, 13, body)
    assert r.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
