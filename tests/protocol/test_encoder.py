"""The dict encoder agrees byte for byte with kio's generated writer, for every response version
Gregor serves, on representative responses (defaults, nulls, nested arrays, tagged fields), and
for the requests its clients send (``gregor.admin.wire_client``)."""

import uuid

import pytest

from gregor.apis import REGISTRY
from gregor.protocol import codec, encoder
from gregor.protocol.api_keys import ApiKey
from tests.support.kio_entities import build, kio_bytes

SAMPLES = {
    3: {"throttle_time": 5, "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c", "controller_id": 1,
        "topics": [{"error_code": 0, "name": "t", "topic_id": uuid.UUID(int=5), "is_internal": True,
                    "partitions": [{"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0,
                                    "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}]}]},
    11: {"throttle_time": 0, "error_code": 79, "generation_id": -1, "protocol_type": None, "protocol_name": None,
         "leader": "", "member_id": "m-1", "members": [
             {"member_id": "m-1", "group_instance_id": None, "metadata": b"\x00\x01"}]},
    14: {"throttle_time": 0, "error_code": 0, "protocol_type": "consumer", "protocol_name": "range",
         "assignment": b"abc"},
    12: {"throttle_time": 0, "error_code": 27},
    13: {"throttle_time": 0, "error_code": 0, "members": [
        {"member_id": "a", "group_instance_id": "i", "error_code": 25}]},
    8: {"throttle_time": 0, "topics": [{"name": "t", "partitions": [{"partition_index": 1, "error_code": 0}]}]},
    9: {"throttle_time": 0, "error_code": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "metadata": "",
         "error_code": 0}]}],
        "groups": [{"group_id": "g", "error_code": 0, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "metadata": None,
             "error_code": 0}]}]}]},
    10: {"throttle_time": 0, "error_code": 0, "error_message": None, "node_id": 0, "host": "h", "port": 1,
         "coordinators": [{"key": "g", "node_id": 0, "host": "h", "port": 1, "error_code": 15,
                           "error_message": "why"}]},
    15: {"throttle_time": 0, "groups": [{"error_code": 0, "group_id": "g", "group_state": "Stable",
                                         "protocol_type": "consumer", "protocol_data": "range",
                                         "members": [{"member_id": "m", "group_instance_id": None,
                                                      "client_id": "c", "client_host": "/h",
                                                      "member_metadata": b"x", "member_assignment": b"y"}],
                                         "authorized_operations": -2147483648}]},
    16: {"throttle_time": 0, "error_code": 0, "groups": [{"group_id": "g", "protocol_type": "consumer",
                                                          "group_state": "Empty", "group_type": "classic"}]},
    18: {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 11}], "throttle_time": 0},
    0: {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 10, "log_append_time": -1, "log_start_offset": 0,
         "error_message": None}]}], "throttle_time": 0},
    2: {"throttle_time": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 3, "leader_epoch": 0}]}]},
    19: {"throttle_time": 0, "topics": [{"name": "t", "topic_id": uuid.UUID(int=9), "error_code": 0,
                                         "error_message": None, "num_partitions": 3, "replication_factor": 1,
                                         "configs": [{"name": "a", "value": "b", "read_only": False,
                                                      "config_source": 5, "is_sensitive": False}]}]},
    22: {"throttle_time": 0, "error_code": 0, "producer_id": 7, "producer_epoch": 0},
    42: {"throttle_time": 0, "results": [{"group_id": "g", "error_code": 69}]},
}


# Requests the clients of this repository encode with it (admin client, tests, benchmarks). A
# nullable field without a schema default is given explicitly: left out, the encoder writes
# Kafka's default (empty) where kio's entity would hold null.
REQUEST_SAMPLES = {
    0: {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"\x00" * 70}, {"index": 1, "records": None}]}]},
    1: {"replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
        "session_id": 0, "session_epoch": -1, "rack_id": "r",
        "topics": [{"topic": "t", "topic_id": uuid.UUID(int=3), "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 7, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [{"topic": "u", "topic_id": uuid.UUID(int=4), "partitions": [1, 2]}]},
    3: {"topics": [{"name": "t", "topic_id": None}], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False, "include_topic_authorized_operations": True},
    8: {"group_id": "g", "generation_id_or_member_epoch": 3, "member_id": "m", "group_instance_id": None,
        "retention_time": -1, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "commit_timestamp": -1,
             "committed_metadata": None}]}]},
    10: {"key": "g", "key_type": 0, "coordinator_keys": ["g", "h"]},
    11: {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 30000, "member_id": "",
         "group_instance_id": None, "protocol_type": "consumer", "reason": None,
         "protocols": [{"name": "range", "metadata": b"\x00\x01"}]},
    12: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": "i"},
    19: {"timeout": 1000, "validate_only": False, "topics": [
        {"name": "t", "num_partitions": 3, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "cleanup.policy", "value": "compact"}, {"name": "retention.ms", "value": None}]}]},
}


def cases():
    for key, reg in sorted(REGISTRY.items()):
        if key not in SAMPLES:
            continue
        for version in range(reg.min_version, reg.max_version + 1):
            yield key, version


@pytest.mark.parametrize("api_key,version", list(cases()))
def test_matches_kio(api_key, version):
    data = SAMPLES[api_key]
    cls = codec.response_schema(api_key, version)
    assert encoder.encode(cls, data) == kio_bytes(build(cls, data))


@pytest.mark.parametrize("api_key,version", [(key, version) for key in sorted(REQUEST_SAMPLES)
                                              for version in range(REGISTRY[key].min_version,
                                                                   REGISTRY[key].max_version + 1)])
def test_requests_match_kio(api_key, version):
    data = REQUEST_SAMPLES[api_key]
    cls = codec.request_schema(api_key, version)
    assert encoder.encode(cls, data) == kio_bytes(build(cls, data))


def test_fields_fit_the_version():
    """One dict for every version: fields a version lacks are left out, bytes become UUIDs."""
    data = {"throttle_time": 5, "brokers": [{"node_id": 1, "host": "h", "port": 9, "rack": None}],
            "cluster_id": "c", "controller_id": 1,
            "topics": [{"error_code": 0, "name": "t", "topic_id": b"\x01" * 16, "is_internal": False,
                        "partitions": []}]}
    v0 = codec.decode_response(ApiKey.METADATA, 0, encoder.encode(codec.response_schema(ApiKey.METADATA, 0), data))
    v12 = codec.decode_response(ApiKey.METADATA, 12, encoder.encode(codec.response_schema(ApiKey.METADATA, 12), data))
    assert not hasattr(v0, "cluster_id") and v12.cluster_id == "c"
    assert v12.topics[0].topic_id.bytes == b"\x01" * 16


def test_tagged_field_written_when_not_default():
    # Metadata v13? no: FindCoordinator has none; ApiVersions v3 has tagged supported_features
    cls = codec.response_schema(18, 3)
    data = {"error_code": 0, "api_keys": [], "throttle_time": 0,
            "supported_features": [{"name": "f", "min_version": 1, "max_version": 2}]}
    assert encoder.encode(cls, data) == kio_bytes(build(cls, data))
