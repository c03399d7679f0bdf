"""ControlledShutdown v3 (protocol/inter_broker_schemas.py), an API kio no longer has: its bytes
are Kafka 2.8's layout, Gregor's encoder agrees with kio's writer on it, and the codec finds it."""

from __future__ import annotations

import pytest

from gregor.protocol import codec, encoder
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.client_frames import request_frame
from gregor.protocol.request_check import MalformedRequest, check_request
from tests.support.kio_entities import build, kio_bytes

REQUEST = {"broker_id": 2, "broker_epoch": 77}
RESPONSE = {"error_code": 0, "remaining_partitions": [{"topic_name": "t", "partition_index": 3}]}


def test_bytes_are_kafkas_layout():
    # request: int32 broker id, int64 broker epoch, no tagged fields
    assert encoder.encode(codec.request_schema(7, 3), REQUEST).hex() == "00000002" "000000000000004d" "00"
    # response: int16 error, compact array (n+1) of {compact string (n+1), int32, tags}, tags
    assert encoder.encode(codec.response_schema(7, 3), RESPONSE).hex() == "0000" "02" "0274" "00000003" "00" "00"


@pytest.mark.parametrize(("schema", "data"), [(codec.request_schema, REQUEST), (codec.response_schema, RESPONSE)])
def test_encoder_matches_kio_writer(schema, data):
    cls = schema(ApiKey.CONTROLLED_SHUTDOWN, 3)
    assert encoder.encode(cls, data) == kio_bytes(build(cls, data))


def test_a_request_frame_decodes_as_the_dispatcher_decodes_it():
    frame = request_frame(ApiKey.CONTROLLED_SHUTDOWN, 3, 5, REQUEST, "broker-2")[4:]
    assert codec.is_flexible(7, 3)
    header = codec.parse_header(frame, True)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (7, 3, 5, "broker-2")
    req = codec.decode_request(7, 3, frame, header.body_offset)
    assert (req.broker_id, req.broker_epoch) == (2, 77)
    with pytest.raises(MalformedRequest):
        check_request(codec.request_schema(7, 3), frame[:-3], header.body_offset)


def test_versions_not_defined_are_unknown():
    with pytest.raises(Exception, match="7"):
        codec.request_schema(7, 2)
