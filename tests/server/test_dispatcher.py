"""The dispatcher (server/dispatcher.py) on real request frames: from the bytes a connection
read to the size-prefixed response, with the broker's services in process (no sockets)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from gregor.apis import REGISTRY
from gregor.apis.handler import CloseConnection
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.server.dispatcher import Dispatcher
from tests.support.in_process import request_frame, request_header, split_response

PEER = "127.0.0.1:40000"
API_VERSIONS_BODY = {"client_software_name": "test", "client_software_version": "1"}


def dispatch(dispatcher: Dispatcher, node, frame: bytes, state: dict | None = None):
    return node.run(dispatcher.handle(frame, PEER, {} if state is None else state))


def registry_versions(config=None) -> list[tuple[int, int, int]]:
    """What the registry holds and ``config`` enables (None: the defaults, every group protocol)."""
    return sorted((r.api_key, r.min_version, r.max_version) for r in REGISTRY.values() if r.enabled(config))


@pytest.mark.parametrize("version", range(5))
def test_api_versions_in_every_version(in_process_broker, version):
    node = in_process_broker
    out = dispatch(Dispatcher(node.services), node, request_frame(ApiKey.API_VERSIONS, version, API_VERSIONS_BODY,
                                                                  correlation_id=1000 + version))
    corr, resp = split_response(ApiKey.API_VERSIONS, version, out)
    assert corr == 1000 + version and resp.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == registry_versions()


def test_api_versions_too_new_is_answered_in_v0_with_the_supported_versions(in_process_broker):
    node = in_process_broker
    # the body of a version the broker does not know is never read
    frame = request_header(ApiKey.API_VERSIONS, 9, correlation_id=77, flexible=True) + b"\x00anything"
    corr, resp = split_response(ApiKey.API_VERSIONS, 0, dispatch(Dispatcher(node.services), node, frame))
    assert corr == 77 and resp.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == registry_versions()


HEARTBEAT_848 = {"group_id": "g", "member_id": "m", "member_epoch": 0, "instance_id": None, "rack_id": None,
                 "rebalance_timeout": 30000, "subscribed_topic_names": ["t"], "subscribed_topic_regex": None,
                 "server_assignor": None, "topic_partitions": []}


def test_the_consumer_protocol_apis_are_served_only_when_enabled(in_process_broker_factory):
    """ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) are advertised and served only
    when group.coordinator.rebalance.protocols lists consumer: franz-go and librdkafka switch to
    the protocol as soon as a broker lists them."""
    for protocols, enabled in (("classic", False), ("classic,consumer", True)):
        node = in_process_broker_factory({"group.coordinator.rebalance.protocols": protocols})
        d = Dispatcher(node.services)
        _, resp = split_response(ApiKey.API_VERSIONS, 3, dispatch(d, node, request_frame(
            ApiKey.API_VERSIONS, 3, API_VERSIONS_BODY)))
        keys = {k.api_key for k in resp.api_keys}
        assert ({ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE} <= keys) is enabled
        assert keys == {k for k, _, _ in registry_versions(node.config)}
        _, hb = split_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, dispatch(d, node, request_frame(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, HEARTBEAT_848)))
        if enabled:
            assert hb.error_code != ErrorCode.unsupported_version  # served (here: no shard loaded yet)
        else:
            assert hb.error_code == ErrorCode.unsupported_version


def test_unsupported_version_answered_where_the_schema_has_an_error_code(in_process_broker):
    node = in_process_broker
    top = REGISTRY[ApiKey.FETCH].max_version + 1
    out = dispatch(Dispatcher(node.services), node, request_header(ApiKey.FETCH, top, correlation_id=5, flexible=True))
    corr, resp = split_response(ApiKey.FETCH, top, out)
    assert corr == 5 and resp.error_code == ErrorCode.unsupported_version and resp.responses == ()
    # Produce's response has no top-level error code: the connection is closed instead
    low = REGISTRY[ApiKey.PRODUCE].min_version - 1
    with pytest.raises(CloseConnection):
        dispatch(Dispatcher(node.services), node, request_header(ApiKey.PRODUCE, low, flexible=False))


@pytest.mark.parametrize("frame", [
    b"\x00\x03\x00",  # shorter than api key, version and correlation id
    (999).to_bytes(2, "big") + b"\x00\x00\x00\x00\x00\x01\xff\xff",  # no such API
    int(ApiKey.SASL_HANDSHAKE).to_bytes(2, "big") + b"\x00\x01\x00\x00\x00\x01\xff\xff",  # a Kafka API not served
    request_header(ApiKey.METADATA, 1)[:9],  # client id length cut
    request_header(ApiKey.METADATA, 1, client_id="abcdef")[:-3],  # client id cut
    request_header(ApiKey.METADATA, 1) + b"\x00\x00",  # body cut in the topic array's count
    request_header(ApiKey.METADATA, 1) + b"\x00\x00\x00\x05\x00\x01a",  # five topics announced, one sent
])
def test_undecodable_requests_close_the_connection(in_process_broker, frame, caplog):
    node = in_process_broker
    with caplog.at_level(logging.WARNING, "gregor.server.connection"), pytest.raises(CloseConnection):
        dispatch(Dispatcher(node.services), node, frame)
    assert PEER in caplog.text


def test_correlation_id_client_id_and_flexible_response_header(in_process_broker):
    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    frame = request_frame(ApiKey.METADATA, 12, {"topics": [{"name": "t", "topic_id": None}]},
                          correlation_id=-12345)
    out = dispatch(Dispatcher(node.services), node, frame)
    data = b"".join(out)
    assert data[4:8] == (-12345).to_bytes(4, "big", signed=True) and data[8] == 0  # v1 header: empty tags
    corr, resp = split_response(ApiKey.METADATA, 12, out)
    assert corr == -12345 and [t.name for t in resp.topics] == ["t"]


def test_fetch_answers_in_several_buffers_with_one_size_prefix(in_process_broker):
    from gregor.protocol.records import build_batch

    node = in_process_broker
    node.services.topics.create_topic("t", 1, {})
    batch = build_batch([(None, b"x" * 100)])
    node.services.logs.get("t", 0).append(batch)
    frame = request_frame(ApiKey.FETCH, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                             "session_epoch": -1, "topics": [{"topic": "t", "partitions": [
                                                 {"partition": 0, "fetch_offset": 0,
                                                  "partition_max_bytes": 1 << 20}]}]})
    out = dispatch(Dispatcher(node.services), node, frame)
    assert len(out) > 1 and batch in out  # the record bytes travel as they were read, not copied
    _, resp = split_response(ApiKey.FETCH, 12, out)
    assert resp.responses[0].partitions[0].records == batch


class Exploding:
    """A service whose every method fails as a bug would."""

    def __getattr__(self, name: str):
        def fail(*args, **kwargs):
            raise RuntimeError(f"{name} exploded")
        return fail


def test_a_failing_handler_is_answered_unknown_server_error(in_process_broker, caplog):
    node = in_process_broker
    services = dataclasses.replace(node.services, groups=Exploding())
    frame = request_frame(ApiKey.HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": "m"},
                          correlation_id=9)
    with caplog.at_level(logging.ERROR, "gregor.server.connection"):
        corr, resp = split_response(ApiKey.HEARTBEAT, 4, dispatch(Dispatcher(services), node, frame))
    assert corr == 9 and resp.error_code == ErrorCode.unknown_server_error
    assert "HEARTBEAT v4" in caplog.text and "exploded" in caplog.text


def test_a_failing_handler_without_an_error_field_closes_the_connection(in_process_broker):
    node = in_process_broker
    services = dataclasses.replace(node.services, topics=Exploding())
    with pytest.raises(CloseConnection):
        dispatch(Dispatcher(services), node, request_frame(ApiKey.METADATA, 12, {"topics": None}))


def test_requests_are_counted_when_metrics_are_on(in_process_broker_factory):
    node = in_process_broker_factory({"telemetry.interval.ms": "1000"})
    assert node.services.metrics is not None
    dispatcher = Dispatcher(node.services)
    for _ in range(3):
        dispatch(dispatcher, node, request_frame(ApiKey.API_VERSIONS, 3, API_VERSIONS_BODY))
    count, seconds = node.services.metrics.requests[ApiKey.API_VERSIONS]
    assert count == 3 and seconds >= 0


def test_connection_state_reaches_the_handler(in_process_broker):
    node = in_process_broker
    seen = []
    original = REGISTRY[ApiKey.API_VERSIONS]

    async def spy(ctx, req):
        seen.append((ctx.connection_state, ctx.client_host, ctx.header.client_id, ctx.version))
        return await original.handler(ctx, req)

    REGISTRY[ApiKey.API_VERSIONS] = dataclasses.replace(original, handler=spy)
    try:
        state: dict = {}
        dispatch(Dispatcher(node.services), node, request_frame(ApiKey.API_VERSIONS, 2, {}, client_id="me"), state)
    finally:
        REGISTRY[ApiKey.API_VERSIONS] = original
    assert seen == [(state, "127.0.0.1", "me", 2)] and seen[0][0] is state

