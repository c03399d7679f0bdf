"""The hand-written Fetch response encoder agrees byte for byte with kio's generated encoder."""

import uuid

import pytest

from gregor.protocol.fetch_response import PartitionData, TopicData, encode_fetch_response
from gregor.protocol.records import build_batch
from tests.support.kio_entities import build_response, kio_bytes

RECORDS = build_batch([(b"k", b"v"), (None, b"w")])


@pytest.mark.parametrize("version", range(4, 17))
def test_matches_generated_encoder(version):
    tid = uuid.UUID(int=0x1234)
    topics = [
        TopicData(tid if version >= 13 else "orders", [
            PartitionData(0, 0, 10, 10, 0, RECORDS),
            PartitionData(1, 1, 5, 5, 2, b""),
            PartitionData(2, 0, 7, 7, 0, b"", preferred_read_replica=3),  # KIP-392 (v11+)
            PartitionData(4, 0, 12, 9, 0, RECORDS, aborted_transactions=[(7, 3), (-5, 2**40)]),  # read_committed
            PartitionData(5, 0, 12, 9, 0, b"", aborted_transactions=[]),
        ]),
        TopicData(uuid.UUID(int=7) if version >= 13 else "b", [PartitionData(3, 3)]),
    ]
    ours = b"".join(encode_fetch_response(version, 0, 0, topics))
    key = "topic_id" if version >= 13 else "topic"
    generic = kio_bytes(build_response(1, version, {
        "throttle_time": 0, "error_code": 0, "session_id": 0,
        "responses": [{key: t.topic, "partitions": [
            {"partition_index": p.partition, "error_code": p.error_code, "high_watermark": p.high_watermark,
             "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
             "aborted_transactions": None if p.aborted_transactions is None else [
                 {"producer_id": pid, "first_offset": first} for pid, first in p.aborted_transactions],
             "preferred_read_replica": p.preferred_read_replica if version >= 11 else -1, "records": p.records}
            for p in t.partitions]} for t in topics]}))
    assert ours == generic
