"""ListOffsets (apis/list_offsets.py) in process: earliest, latest, max timestamp, by time, errors."""

from __future__ import annotations

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import Record, build_batch

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def list_offsets(node, queries: list[tuple[str, int, int]]):
    resp = node.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": ts}]}
        for t, p, ts in queries]})
    return [(p.error_code, p.offset, p.timestamp) for t in resp.topics for p in t.partitions]


def test_earliest_latest_max_timestamp_and_by_time(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    plog = node.services.logs.get("t", 0)
    plog.append(build_batch([(None, b"a"), (None, b"b")], timestamp=1000))  # offsets 0, 1 at 1000
    plog.append(build_batch([Record(0, 5000, None, b"c"), Record(1, 3000, None, b"d")]))  # 2 at 5000, 3 at 3000
    assert list_offsets(node, [("t", 0, EARLIEST), ("t", 0, LATEST), ("t", 0, MAX_TIMESTAMP), ("t", 0, 2000),
                               ("t", 0, 1000), ("t", 0, 9000)]) == [
        (ErrorCode.none, 0, -1), (ErrorCode.none, 4, -1), (ErrorCode.none, 2, 5000),
        (ErrorCode.none, 2, 5000), (ErrorCode.none, 0, 1000), (ErrorCode.none, -1, -1)]


def test_unknown_partitions_and_bad_special_timestamps(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    assert list_offsets(node, [("missing", 0, LATEST), ("t", 1, LATEST), ("t", 0, -7)]) == [
        (ErrorCode.unknown_topic_or_partition, -1, -1), (ErrorCode.unknown_topic_or_partition, -1, -1),
        (ErrorCode.invalid_request, -1, -1)]


def test_log_start_moves_with_delete_records(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    plog = node.services.logs.get("t", 0)
    for i in range(4):
        plog.append(build_batch([(None, b"%d" % i)]))
    resp = node.call(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "offset": 3}]}], "timeout": 1000})
    assert resp.topics[0].partitions[0].low_watermark == 3
    assert list_offsets(node, [("t", 0, EARLIEST), ("t", 0, LATEST)]) == [(ErrorCode.none, 3, -1),
                                                                         (ErrorCode.none, 4, -1)]
