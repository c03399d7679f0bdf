"""What the live fuzzer (bench/fuzz.py, with the transactional seeds) found in the handlers, each
pinned by the request that showed it."""

from __future__ import annotations

import uuid

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


def test_fetch_by_the_zero_topic_id_answers_unknown_topic_id(in_process_broker):
    """Fetch v13+ names topics by id; kio decodes the zero id (Kafka's Uuid.ZERO_UUID) as None, and
    the response encoder asserted the id was a UUID (protocol/fetch_response.py,
    encode_fetch_response): the handler failed (a Traceback in the broker's log, no answer) where
    Kafka answers UNKNOWN_TOPIC_ID with the zero id. Found by the live fuzzer from a read_committed
    Fetch seed that named its topic only by name."""
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    for version in (13, 16):
        resp = node.call(ApiKey.FETCH, version, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic_id": uuid.UUID(int=0), "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
        assert resp.error_code == ErrorCode.none
        (topic,) = resp.responses
        assert topic.topic_id in (None, uuid.UUID(int=0))
        assert [p.error_code for p in topic.partitions] == [ErrorCode.unknown_topic_id]
