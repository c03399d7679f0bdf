"""ShareFetch (apis/share_fetch.py) in process: KIP-1206's acquire modes (whole batches, or a
strict record limit) and an unknown mode refused."""

from __future__ import annotations

import uuid

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch


def share_fetch(node, topic_id: uuid.UUID, epoch: int, max_records: int, mode: int, member: str = "m1"):
    return node.call(ApiKey.SHARE_FETCH, 2, {
        "group_id": "g", "member_id": member, "share_session_epoch": epoch, "max_wait": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": max_records, "batch_size": max_records, "share_acquire_mode": mode,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}],
        "forgotten_topics_data": []})


def acquired(resp) -> list[tuple[int, int]]:
    assert resp.error_code == ErrorCode.none, resp
    return [(r.first_offset, r.last_offset) for t in resp.responses for p in t.partitions
            for r in p.acquired_records]


def three_batches_of_four(node) -> uuid.UUID:
    node.start_groups()
    node.run(node.broker.share_state.start())  # the share coordinator: the state of share-partitions
    topic = node.services.topics.create_topic("jobs", 1, {})
    return topic.topic_id


def fill(node) -> None:
    plog = node.services.logs.get("jobs", 0)
    for b in range(3):
        plog.append(build_batch([(None, b"r%d" % (b * 4 + i)) for i in range(4)]))


def test_batch_optimised_acquires_whole_batches_record_limit_exactly_max_records(in_process_broker):
    node = in_process_broker
    tid = three_batches_of_four(node)
    assert acquired(share_fetch(node, tid, 0, 5, 0)) == []  # the share-partition starts at the log end (0)
    fill(node)
    assert acquired(share_fetch(node, tid, 1, 5, 0)) == [(0, 7)], "batch_optimized: to the end of the batch"
    assert acquired(share_fetch(node, tid, 0, 3, 1, member="m2")) == [(8, 10)], "record_limit: strict"


def test_an_unknown_acquire_mode_is_an_invalid_request(in_process_broker):
    node = in_process_broker
    tid = three_batches_of_four(node)
    resp = share_fetch(node, tid, 0, 5, 7)
    assert resp.error_code == ErrorCode.invalid_request and "acquire mode" in resp.error_message
