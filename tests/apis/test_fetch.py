"""Fetch (apis/fetch.py) in process: records back as appended, limits, long polls, errors."""

from __future__ import annotations

import time
import uuid

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch, decode_records, iter_batches


def fetch(node, topics: list[dict], version: int = 12, max_wait_ms: int = 0, min_bytes: int = 1,
          max_bytes: int = 1 << 20, session_id: int = 0, session_epoch: int = -1):
    return node.call(ApiKey.FETCH, version, {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
        "isolation_level": 0, "session_id": session_id, "session_epoch": session_epoch, "topics": topics,
        "forgotten_topics_data": [], "rack_id": ""})


def wanted(topic: str, partition: int, offset: int, max_bytes: int = 1 << 20, key: str = "topic") -> dict:
    return {key: topic, "partitions": [{"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                                        "last_fetched_epoch": -1, "log_start_offset": -1,
                                        "partition_max_bytes": max_bytes}]}


def values(records: bytes | None) -> list[tuple[int, bytes | None]]:
    data = records or b""
    return [(r.offset, r.value) for h in iter_batches(data) for r in decode_records(data, h)]


def test_returns_the_appended_batches_from_the_fetch_offset(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    plog = node.services.logs.get("t", 0)
    for i in range(3):
        plog.append(build_batch([(None, b"v%d" % i)]))
    resp = fetch(node, [wanted("t", 0, 1)])
    assert resp.error_code == ErrorCode.none and resp.session_id == 0
    (part,) = resp.responses[0].partitions
    assert (part.error_code, part.high_watermark, part.log_start_offset) == (ErrorCode.none, 3, 0)
    assert values(part.records) == [(1, b"v1"), (2, b"v2")]


def test_first_batch_is_whole_even_beyond_the_limits(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    plog = node.services.logs.get("t", 0)
    plog.append(build_batch([(None, b"x" * 2000)]))
    plog.append(build_batch([(None, b"y" * 2000)]))
    (part,) = fetch(node, [wanted("t", 0, 0, max_bytes=100)], max_bytes=100).responses[0].partitions
    assert values(part.records) == [(0, b"x" * 2000)]


def test_unknown_topics_partitions_and_topic_ids(in_process_broker):
    node = in_process_broker
    topic = node.services.topics.create_topic("t", 1, {})
    resp = fetch(node, [wanted("missing", 0, 0), wanted("t", 3, 0)])
    assert [(t.topic, [p.error_code for p in t.partitions]) for t in resp.responses] == [
        ("missing", [ErrorCode.unknown_topic_or_partition]), ("t", [ErrorCode.unknown_topic_or_partition])]
    # v13+: topics by id
    node.services.logs.get("t", 0).append(build_batch([(None, b"a")]))
    resp = fetch(node, [wanted(topic.topic_id, 0, 0, key="topic_id"), wanted(uuid.uuid4(), 0, 0, key="topic_id")],
                 version=13)
    known, unknown = resp.responses
    assert known.topic_id == topic.topic_id and values(known.partitions[0].records) == [(0, b"a")]
    assert unknown.partitions[0].error_code == ErrorCode.unknown_topic_id


def test_offset_out_of_range(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    node.services.logs.get("t", 0).append(build_batch([(None, b"a")]))
    (part,) = fetch(node, [wanted("t", 0, 5)]).responses[0].partitions
    assert part.error_code == ErrorCode.offset_out_of_range and part.high_watermark == 1


def test_fetch_sessions_are_declined(in_process_broker):
    node = in_process_broker
    assert fetch(node, [], session_id=7).error_code == ErrorCode.fetch_session_id_not_found
    assert fetch(node, [], session_epoch=3).error_code == ErrorCode.invalid_fetch_session_epoch


def test_long_poll_waits_for_min_bytes_until_max_wait(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    started = time.monotonic()
    (part,) = fetch(node, [wanted("t", 0, 0)], max_wait_ms=150).responses[0].partitions
    assert time.monotonic() - started >= 0.14
    assert part.error_code == ErrorCode.none and values(part.records) == []


def test_long_poll_is_woken_by_an_append(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    plog = node.services.logs.get("t", 0)

    def append_soon() -> None:
        plog.append(build_batch([(None, b"late")]))
        node.services.logs.notifier.notify(("t", 0))

    node.loop.call_later(0.05, append_soon)
    started = time.monotonic()
    (part,) = fetch(node, [wanted("t", 0, 0)], max_wait_ms=5000).responses[0].partitions
    assert time.monotonic() - started < 2
    assert values(part.records) == [(0, b"late")]
