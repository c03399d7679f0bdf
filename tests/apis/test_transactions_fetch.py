"""Fetch and ListOffsets of transactional partitions (apis/fetch.py, apis/list_offsets.py):
read_committed answers up to the last stable offset with the aborted transactions of the range;
read_uncommitted is unchanged; a read_committed long poll wakes up when a marker commits."""

from __future__ import annotations

import asyncio

from gregor.apis import REGISTRY
from gregor.apis.handler import RequestContext
from gregor.protocol import codec
from gregor.protocol import record_batch as rb
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.control_records import build_marker_batch
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch, decode_records, iter_batches
from tests.support.in_process import decode_request, response_body


def txn(pid: int, seq: int, value: bytes = b"t") -> bytes:
    return build_batch([(None, value)], producer_id=pid, producer_epoch=0, base_sequence=seq,
                       attributes=rb.TRANSACTIONAL_BIT)


def marker(pid: int, commit: bool) -> bytes:
    return build_marker_batch(pid, 0, 0, commit, timestamp=0)


def fetch_req(offset: int, isolation: int, max_wait_ms: int = 0, min_bytes: int = 1) -> dict:
    return {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                               "last_fetched_epoch": -1, "log_start_offset": -1,
                                               "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def fetch(node, offset: int, isolation: int, version: int = 12):
    (part,) = node.call(ApiKey.FETCH, version, fetch_req(offset, isolation)).responses[0].partitions
    return part


def offsets(records: bytes | None) -> list[int]:
    data = records or b""
    return [r.offset for h in iter_batches(data) if not h.is_control for r in decode_records(data, h)]


def setup(node):
    node.services.topics.create_topic("t", 1, {})
    plog = node.services.logs.get("t", 0)
    plog.append(build_batch([(None, b"plain")]))  # 0
    plog.append(txn(1, 0))                        # 1: aborted below
    plog.append(txn(2, 0))                        # 2: committed below
    plog.append_control(marker(1, commit=False))  # 3
    plog.append_control(marker(2, commit=True))   # 4
    plog.append(txn(3, 0))                        # 5: ongoing
    plog.append(build_batch([(None, b"after")]))  # 6
    return plog


def test_read_committed_stops_at_the_last_stable_offset_with_the_aborted_list(in_process_broker):
    node = in_process_broker
    setup(node)
    for version in (4, 11, 12):
        part = fetch(node, 0, 1, version)
        assert part.error_code == ErrorCode.none
        assert (part.high_watermark, part.last_stable_offset) == (7, 5)
        assert offsets(part.records) == [0, 1, 2]
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(1, 1)]
    part = fetch(node, 2, 1)  # producer 1's aborted transaction (1-3) overlaps [2, 3): listed, as Kafka
    assert offsets(part.records) == [2]
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(1, 1)]
    part = fetch(node, 4, 1)
    assert offsets(part.records) == [] and list(part.aborted_transactions) == []  # the commit marker only
    part = fetch(node, 5, 1)  # at the last stable offset: nothing yet
    assert offsets(part.records) == [] and list(part.aborted_transactions) == []


def test_read_uncommitted_is_unchanged_but_reports_the_last_stable_offset(in_process_broker):
    node = in_process_broker
    setup(node)
    part = fetch(node, 0, 0)
    assert offsets(part.records) == [0, 1, 2, 5, 6]
    assert (part.high_watermark, part.last_stable_offset) == (7, 5)
    assert part.aborted_transactions is None


def test_list_offsets_latest_is_the_last_stable_offset_for_read_committed(in_process_broker):
    node = in_process_broker
    setup(node)

    def latest(isolation: int) -> int:
        resp = node.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        return resp.topics[0].partitions[0].offset

    assert (latest(0), latest(1)) == (7, 5)


def test_a_read_committed_long_poll_wakes_up_when_the_transaction_commits(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    plog = node.services.logs.get("t", 0)
    plog.append(txn(1, 0))

    header, request = decode_request(ApiKey.FETCH, 12, fetch_req(0, 1, max_wait_ms=5000))
    ctx = RequestContext(node.services, header, "127.0.0.1", {})

    async def scenario():
        call = asyncio.ensure_future(REGISTRY[ApiKey.FETCH].handler(ctx, request))
        await asyncio.sleep(0.05)
        assert not call.done()  # the transaction holds the last stable offset at 0
        await node.services.replicas.write_txn_marker("t", 0, 1, 0, 0, True, 5)
        return await asyncio.wait_for(call, 2)

    result = node.run(scenario())
    resp = codec.decode_response(ApiKey.FETCH, 12, response_body(ApiKey.FETCH, 12, result))
    (part,) = resp.responses[0].partitions
    assert part.last_stable_offset == 2 and offsets(part.records) == [0]
