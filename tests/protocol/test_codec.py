import struct

import pytest

from gregor.protocol import codec
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.encoder import encode


def _header_v1(api_key, version, corr, client_id=b"cli"):
    return struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id


def test_parse_header_v1_and_v2():
    h = codec.parse_header(_header_v1(3, 1, 42), flexible=False)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (3, 1, 42, "cli")
    h2 = codec.parse_header(_header_v1(3, 12, 7) + b"\x00", flexible=True)
    assert h2.body_offset == len(_header_v1(3, 12, 7)) + 1


def test_null_client_id():
    raw = struct.pack(">hhih", 18, 0, 1, -1)
    assert codec.parse_header(raw, flexible=False).client_id is None


def test_truncated_header():
    with pytest.raises(codec.RequestDecodeError):
        codec.parse_header_prefix(b"\x00\x01")
    with pytest.raises(codec.RequestDecodeError):
        codec.parse_header(struct.pack(">hhih", 3, 1, 1, 50) + b"ab", flexible=False)


def test_response_header_versions():
    # ApiVersions responses always use response header v0 (no tagged fields)
    assert codec.response_header(ApiKey.API_VERSIONS, 3, 9) == b"\x00\x00\x00\x09"
    assert codec.response_header(ApiKey.METADATA, 12, 9) == b"\x00\x00\x00\x09\x00"


def test_trailing_bytes_ignored_like_kafka():
    body = encode(codec.request_schema(ApiKey.METADATA, 1), {"topics": None})
    frame = _header_v1(3, 1, 1) + body + b"\x00\x00\x00"
    assert codec.decode_request(3, 1, frame, len(_header_v1(3, 1, 1))).topics is None


def test_truncated_body_rejected():
    body = encode(codec.request_schema(ApiKey.METADATA, 1), {"topics": [{"name": "abc"}]})
    frame = _header_v1(3, 1, 1) + body[:-2]
    with pytest.raises(codec.RequestDecodeError, match="METADATA v1"):
        codec.decode_request(3, 1, frame, len(_header_v1(3, 1, 1)))
