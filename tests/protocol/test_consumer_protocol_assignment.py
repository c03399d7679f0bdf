"""ConsumerProtocolAssignment built for consumer-protocol (KIP-848) members reads back as the
classic leader's assignments do."""

from gregor.protocol.consumer_protocol import decode_assignment, encode_assignment


def test_encoded_assignment_decodes_to_the_same_partitions():
    topics = [("orders", [0, 3, 7]), ("a" * 300, list(range(50))), ("empty", [])]
    data = encode_assignment(topics)
    assert decode_assignment(data) == topics
    assert data[:2] == b"\x00\x00" and data[-4:] == b"\xff\xff\xff\xff"  # version 0, null user data
