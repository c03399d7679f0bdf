"""Produce (apis/produce.py) in process: appends, per-partition errors, acks=0."""

from __future__ import annotations

import pytest

from gregor.apis.handler import CloseConnection
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch, decode_records, iter_batches

V = 9


def produce(node, topic: str, partition: int, records: bytes | None, acks: int = -1):
    return node.call(ApiKey.PRODUCE, V, {"transactional_id": None, "acks": acks, "timeout": 1000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})


def partition_response(resp):
    (topic,) = resp.responses
    (part,) = topic.partition_responses
    return part


def test_appends_at_consecutive_offsets(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 2, {})
    first = partition_response(produce(node, "t", 1, build_batch([(b"k", b"a"), (b"k", b"b")], timestamp=1000)))
    second = partition_response(produce(node, "t", 1, build_batch([(None, b"c")], timestamp=2000)))
    assert (first.error_code, first.base_offset, first.log_start_offset) == (ErrorCode.none, 0, 0)
    assert (second.error_code, second.base_offset) == (ErrorCode.none, 2)
    plog = node.services.logs.get("t", 1)
    assert plog.log_end_offset == 3 and node.services.logs.get("t", 0).log_end_offset == 0
    data = plog.read(0, 1 << 20).records
    assert [(r.offset, r.key, r.value) for h in iter_batches(data) for r in decode_records(data, h)] == [
        (0, b"k", b"a"), (1, b"k", b"b"), (2, None, b"c")]


@pytest.mark.parametrize("topic,partition,acks,code", [
    ("missing", 0, -1, ErrorCode.unknown_topic_or_partition),
    ("t", 5, -1, ErrorCode.unknown_topic_or_partition),
    ("__consumer_offsets", 0, -1, ErrorCode.invalid_topic_exception),
    ("t", 0, 2, ErrorCode.invalid_required_acks),
])
def test_refused_partitions_are_answered_with_their_error(in_process_broker, topic, partition, acks, code):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    node.services.topics.create_topic("__consumer_offsets", 1, {}, internal=True)
    part = partition_response(produce(node, topic, partition, build_batch([(b"k", b"v")]), acks=acks))
    assert part.error_code == code and part.base_offset == -1 and part.error_message
    assert node.services.logs.get("t", 0).log_end_offset == 0
    assert node.services.logs.get("__consumer_offsets", 0).log_end_offset == 0


def test_corrupt_or_missing_records_are_corrupt_message(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    bad = bytearray(build_batch([(b"k", b"value")]))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    assert partition_response(produce(node, "t", 0, bytes(bad))).error_code == ErrorCode.corrupt_message
    assert partition_response(produce(node, "t", 0, None)).error_code == ErrorCode.corrupt_message
    assert node.services.logs.get("t", 0).log_end_offset == 0


def test_too_large_batch_is_refused_by_the_topic_limit(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {"max.message.bytes": "200"})
    part = partition_response(produce(node, "t", 0, build_batch([(b"k", b"x" * 500)])))
    assert part.error_code == ErrorCode.message_too_large


def test_acks_zero_has_no_response_and_a_failure_closes_the_connection(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    assert produce(node, "t", 0, build_batch([(b"k", b"v")]), acks=0) is None
    assert node.services.logs.get("t", 0).log_end_offset == 1
    with pytest.raises(CloseConnection):
        produce(node, "missing", 0, build_batch([(b"k", b"v")]), acks=0)
