"""The bounded walk before kio reads a request (issue 10, defects 1-3): no count can make the
decoder allocate beyond the frame, unknown tagged fields are skipped, null is refused where the
schema does not allow it, and any nonzero boolean byte is true."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.apis import REGISTRY
from gregor.protocol import codec
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.encoder import encode
from gregor.protocol.request_check import MAX_ELEMENTS, MalformedRequest, check_request

SERVED = sorted((r.api_key, v) for r in REGISTRY.values() for v in range(r.min_version, r.max_version + 1))


def _decode(hex_frame: str):
    """A frame as the issue gives it (size prefix included), through header and body decoding."""
    frame = bytes.fromhex(hex_frame)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    payload = frame[4:]
    key, version, _ = codec.parse_header_prefix(payload)
    header = codec.parse_header(payload, codec.is_flexible(key, version))
    return codec.decode_request(key, version, payload, header.body_offset)


@pytest.mark.parametrize("hex_frame", [
    "000000130003000c00000001000372656c00ffffffff0f",  # Metadata v12, topics count 0xFFFFFFFF
])
def test_huge_compact_count_is_refused_before_any_allocation(hex_frame):
    with pytest.raises(codec.RequestDecodeError, match="claims 4294967294 elements"):
        _decode(hex_frame)


@pytest.mark.parametrize(("key", "version", "field"), [
    (ApiKey.DELETE_GROUPS, 2, "groups_names"),
    (ApiKey.FETCH, 12, "topics"),
    (ApiKey.FETCH, 13, "topics"),
    (ApiKey.DESCRIBE_CONFIGS, 4, "resources"),
    (ApiKey.METADATA, 12, "topics"),
])
def test_every_huge_count_is_bounded_by_the_bytes_left(key, version, field):
    """Take a valid request, and set the count of its first array to each of the values that
    make a naive reader allocate gigabytes."""
    cls = codec.request_schema(key, version)
    body = encode(cls, {field: []})
    empty = b"\x01"  # compact count of an empty array
    at = _first_array_position(cls, body, field)
    assert body[at:at + 1] == empty
    for count in (0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 10_000_000, len(body) + 1):
        varint = bytearray()
        n = count + 1
        while n >= 0x80:
            varint.append((n & 0x7F) | 0x80)
            n >>= 7
        varint.append(n)
        bad = body[:at] + bytes(varint) + body[at + 1:]
        with pytest.raises(MalformedRequest):
            check_request(cls, bad, 0)


def _first_array_position(cls, body, field):
    """Where ``field``'s count sits in an otherwise default body (found by re-encoding)."""
    marker = encode(cls, {field: [{}]} if field != "groups_names" else {field: ["g"]})
    for i, (a, b) in enumerate(zip(body, marker, strict=False)):
        if a != b:
            return i
    raise AssertionError("field not found")


def test_unknown_tagged_field_is_skipped():
    # Metadata v12 with tag 5 in the body's tagged fields
    req = _decode("000000140003000c00000001000372656c00010100010500")
    assert req.topics == () and req.allow_auto_topic_creation is True


def test_unknown_tags_are_skipped_in_nested_structs_and_known_ones_kept():
    cls = codec.request_schema(ApiKey.FETCH, 12)
    body = encode(cls, {"max_wait": 500, "cluster_id": "c1", "topics": [
        {"topic": "t", "partitions": [{"partition": 3, "fetch_offset": 7}]}]})
    # the request's own tagged section (cluster_id is tag 0) is at the very end: add tag 9
    assert body.endswith(b"\x01\x00\x03\x03c1")
    extended = body[:-6] + b"\x02\x00\x03\x03c1\x09\x02\xab\xcd"
    req = codec.decode_request(ApiKey.FETCH, 12, extended, 0)
    assert req.cluster_id == "c1"
    assert req.topics[0].partitions[0].fetch_offset == 7


def test_null_for_a_non_nullable_array_is_malformed():
    with pytest.raises(codec.RequestDecodeError, match="non-nullable field topic_names"):
        _decode("000000150014000100000001000372656cffffffff000003e8")  # DeleteTopics v1


def test_null_for_a_non_nullable_string_is_malformed():
    cls = codec.request_schema(ApiKey.HEARTBEAT, 0)
    body = struct.pack(">h", -1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"m"
    with pytest.raises(MalformedRequest, match="group_id"):
        check_request(cls, body, 0)


def test_nonzero_boolean_byte_reads_as_true():
    cls = codec.request_schema(ApiKey.METADATA, 12)
    body = b"\x01" + b"\x07" + b"\x00" + b"\x00"  # no topics, allow_auto_topic_creation = 7
    req = codec.decode_request(ApiKey.METADATA, 12, body, 0)
    assert req.allow_auto_topic_creation is True
    assert check_request(cls, b"\x01\x00\x00\x00", 0) == b"\x01\x00\x00\x00"


def test_negative_legacy_length_other_than_minus_one_is_null_where_nullable():
    cls = codec.request_schema(ApiKey.METADATA, 1)
    req = codec.decode_request(ApiKey.METADATA, 1, struct.pack(">i", -7), 0)
    assert req.topics is None
    assert check_request(cls, struct.pack(">i", -1), 0) == struct.pack(">i", -1)


def test_element_budget_bounds_a_request_of_many_tiny_elements():
    cls = codec.request_schema(ApiKey.DELETE_GROUPS, 0)  # array of int16-length strings, 2 bytes each
    n = MAX_ELEMENTS + 1
    body = struct.pack(">i", n) + b"\x00\x00" * n
    with pytest.raises(MalformedRequest, match="array elements"):
        check_request(cls, body, 0)


@pytest.mark.parametrize(("key", "version"), SERVED)
def test_valid_requests_pass_unchanged(key, version):
    cls = codec.request_schema(key, version)
    body = encode(cls, {})
    assert check_request(cls, body, 0) is body
    codec.decode_request(key, version, body, 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SERVED), st.binary(max_size=200), st.integers(0, 400), st.data())
def test_any_bytes_decode_or_raise_request_decode_error(served, noise, cut, data):
    """Valid bodies cut, spliced with noise or overwritten: decode_request answers a request or
    RequestDecodeError, never anything else."""
    key, version = served
    body = encode(codec.request_schema(key, version), {})
    where = data.draw(st.integers(0, len(body)))
    candidates = [body[:cut], body[:where] + noise + body[where:], noise,
                  body[:where] + noise[: max(0, len(body) - where)]]
    for candidate in candidates:
        try:
            codec.decode_request(key, version, candidate, 0)
        except codec.RequestDecodeError:
            pass


@pytest.mark.parametrize(("key", "version", "field", "fill"), [
    (ApiKey.JOIN_GROUP, 9, "group_id", {"member_id": "", "protocol_type": "consumer", "protocols": []}),
    (ApiKey.OFFSET_COMMIT, 9, "group_id", {"member_id": "m", "topics": []}),
    (ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, "member_id", {"group_id": "g"}),
])
def test_a_compact_string_longer_than_32767_bytes_is_refused(key, version, field, fill):
    """As Kafka's readers: such a string could not be written to __consumer_offsets (a group id or
    member id in a record key), so it never reaches a handler."""
    cls = codec.request_schema(key, version)
    for n, ok in ((32767, True), (32768, False), (100_000, False)):
        body = encode(cls, {**fill, field: "g" * n})
        if ok:
            check_request(cls, body, 0)
        else:
            with pytest.raises(MalformedRequest, match=f"string field {field} had invalid length {n}"):
                check_request(cls, body, 0)
