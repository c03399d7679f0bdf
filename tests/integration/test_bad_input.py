"""Bad input: each gets a clear error or a closed connection; the broker keeps serving the rest
and loses nothing."""

import struct
import subprocess
import sys

import pytest
from confluent_kafka import Producer

from gregor.admin.wire_client import WireClient as Wire
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from tests.support.broker_process import free_port


def produce_and_check(broker, topic="alive", n=10):
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(n):
        p.produce(topic, value=b"%d" % i)
    assert p.flush(20) == 0


@pytest.mark.parametrize("payload", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",               # garbage: size prefix 'GET ' = 1.19 GB
    struct.pack(">i", 2_000_000_000) + b"\x00" * 100,   # 2 GB size prefix
    struct.pack(">i", -1),                              # negative size
    struct.pack(">i", 3) + b"abc",                      # frame too short for a header
    struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, 0),  # unknown API key
    struct.pack(">i", 14) + struct.pack(">hhih", 3, 1, 1, 0) + b"\x00\x00\x00\x05",  # 5 topics promised, none sent
])
def test_bad_frames_close_only_that_connection(broker, payload):
    produce_and_check(broker)
    w = Wire(broker.bootstrap)
    w.send_raw(payload)
    assert w.closed_by_peer()
    produce_and_check(broker)
    assert broker.alive()


def test_truncated_frame_then_disconnect(broker):
    w = Wire(broker.bootstrap)
    w.send_raw(struct.pack(">i", 100) + b"\x00\x03\x00\x01")
    w.close()
    produce_and_check(broker)


def test_unsupported_api_versions_version_gets_v0_answer(broker):
    w = Wire(broker.bootstrap)
    # ApiVersions v99 (a client newer than the broker): v0 body, error 35, and the broker's versions
    w.send_raw(struct.pack(">i", 10) + struct.pack(">hhih", 18, 99, 7, 0))
    frame = w.recv_frame()
    corr, err = struct.unpack_from(">ih", frame, 0)
    assert corr == 7 and err == ErrorCode.unsupported_version
    resp = Wire.__new__(Wire)  # decode with the v0 schema
    from gregor.protocol import codec

    body = codec.decode_response(18, 0, frame[4:])
    keys = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert keys[ApiKey.PRODUCE][0] == 3 and ApiKey.FETCH in keys
    del resp


def test_unsupported_version_of_known_api(broker):
    w = Wire(broker.bootstrap)
    # Produce v2 (magic 0/1 era) is below what Gregor serves: the connection is closed, as Kafka does
    w.send_raw(struct.pack(">i", 10) + struct.pack(">hhih", 0, 2, 1, 0))
    assert w.closed_by_peer()
    produce_and_check(broker)


def test_produce_corrupt_batch_gets_error_not_disconnect(broker):
    produce_and_check(broker, "victim", 3)
    w = Wire(broker.bootstrap)
    from gregor.protocol.records import build_batch

    bad = bytearray(build_batch([(b"k", b"v")]))
    bad[-1] ^= 0x55
    resp = w.call(0, 9, {"acks": -1, "timeout": 1000, "transactional_id": None,
                         "topic_data": [{"name": "victim", "partition_data": [{"index": 0, "records": bytes(bad)}]}]})
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.corrupt_message and "CRC" in part.error_message
    # the broker kept the good data and still takes more
    produce_and_check(broker, "victim", 3)
    lo_hi = w.call(2, 7, {"replica_id": -1, "isolation_level": 0,
                          "topics": [{"name": "victim", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert lo_hi.topics[0].partitions[0].offset == 6


def test_produce_with_bad_acks(broker):
    w = Wire(broker.bootstrap)
    from gregor.protocol.records import build_batch

    part = {"index": 0, "records": build_batch([(None, b"v")])}
    resp = w.call(0, 9, {"acks": 2, "timeout": 1000, "transactional_id": None,
                         "topic_data": [{"name": "t", "partition_data": [part]}]})
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks


def test_oversized_request_is_refused_without_reading_it(broker_factory):
    b = broker_factory(**{"socket.request.max.bytes": "1000"})
    w = Wire(b.bootstrap)
    w.send_raw(struct.pack(">i", 5000))  # the payload never comes; the broker must not wait for it
    assert w.closed_by_peer()
    assert "exceeds socket.request.max.bytes=1000" in b.output()


@pytest.mark.parametrize("args,message", [
    (["--override", "num.partitions=zero"], "num.partitions"),
    (["--override", "no.such.key=1"], "no.such.key"),
    (["--override", "listeners=nonsense"], "listeners"),
    (["/no/such/server.properties"], "cannot read"),
    (["--frobnicate"], "unrecognized arguments"),
])
def test_bad_configuration_exits_2_naming_the_key(tmp_path, args, message):
    r = subprocess.run([sys.executable, "-m", "gregor", "serve", *args,
                        "--override", f"log.dirs={tmp_path}"] if args[0] != "--frobnicate" else
                       [sys.executable, "-m", "gregor", "serve", *args], capture_output=True, timeout=30)
    assert r.returncode == 2
    assert message in r.stderr.decode()


def test_data_dir_in_use_is_refused(broker):
    r = subprocess.run([sys.executable, "-m", "gregor", "serve", "--override", f"log.dirs={broker.data_dir}",
                        "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"],
                       capture_output=True, timeout=30)
    assert r.returncode == 2 and b"in use" in r.stderr


# Issue 10, defects 1-3: the frames found against an earlier main, sent to a live broker.
HUGE_COUNTS = {
    "metadata v12": "000000130003000c00000001000372656c00ffffffff0f",
    # the same count in the first array of DeleteGroups v2, Fetch v12/v13 and DescribeConfigs v4
    "delete_groups v2": "00000013002a000200000001000372656c00ffffffff0f",
    "describe_configs v4": "000000130020000400000001000372656c00ffffffff0f",
}


@pytest.mark.parametrize("hex_frame", HUGE_COUNTS.values(), ids=HUGE_COUNTS.keys())
def test_huge_array_count_closes_only_that_connection(broker, hex_frame):
    produce_and_check(broker)
    w = Wire(broker.bootstrap)
    w.send_raw(bytes.fromhex(hex_frame))
    assert w.closed_by_peer()
    assert broker.alive()
    produce_and_check(broker)
    assert "claims 4294967294 elements" in broker.output()


def test_huge_count_in_a_fetch_request_is_refused(broker):
    w = Wire(broker.bootstrap)
    for version in (12, 13):
        frame = bytearray(w.request_bytes(ApiKey.FETCH, version, {"max_wait": 100, "topics": []}))
        # the topics array is the first compact array after the fixed fields; count it as 2^32-2
        at = frame.index(b"\x01", 4 + 2 + 2 + 4 + 2 + 4 + 1)
        frame[at:at + 1] = b"\xff\xff\xff\xff\x0f"
        frame[0:4] = struct.pack(">i", len(frame) - 4)
        w2 = Wire(broker.bootstrap)
        w2.send_raw(bytes(frame))
        assert w2.closed_by_peer()
    assert broker.alive()
    produce_and_check(broker)


def test_unknown_tagged_field_is_skipped_like_kafka(broker):
    w = Wire(broker.bootstrap)
    w.send_raw(bytes.fromhex("000000140003000c00000001000372656c00010100010500"))  # Metadata v12 + tag 5
    frame = w.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == 1  # correlation id
    from gregor.protocol import codec

    resp = codec.decode_response(ApiKey.METADATA, 12, frame[5:])
    assert resp.brokers and resp.brokers[0].port == broker.port
    assert "Traceback" not in broker.output()


def test_null_for_non_nullable_array_is_malformed_not_a_handler_error(broker):
    w = Wire(broker.bootstrap)
    w.send_raw(bytes.fromhex("000000150014000100000001000372656cffffffff000003e8"))  # DeleteTopics v1
    assert w.closed_by_peer()
    out = broker.output()
    assert "non-nullable field topic_names was serialized as null" in out
    assert "Traceback" not in out and "TypeError" not in out
    produce_and_check(broker)


def test_any_nonzero_boolean_byte_is_true(broker):
    w = Wire(broker.bootstrap)
    frame = bytearray(w.request_bytes(ApiKey.METADATA, 12, {"topics": [{"name": "bool-topic"}],
                                                          "allow_auto_topic_creation": True}))
    assert frame[-3:] == b"\x01\x00\x00"  # allow_auto_topic_creation, include_topic_authorized_ops, tags
    frame[-3] = 0x02
    w.send_raw(bytes(frame))
    resp_frame = w.recv_frame()
    from gregor.protocol import codec

    resp = codec.decode_response(ApiKey.METADATA, 12, resp_frame[5:])
    assert resp.topics[0].name == "bool-topic"
    assert resp.topics[0].error_code in (ErrorCode.none, ErrorCode.leader_not_available)
