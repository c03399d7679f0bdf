"""Kafka's default partitioner (murmur2): the hash values Kafka's own tests publish, and the
partitions librdkafka's murmur2 partitioner picks (checked against a real client in
tests/integration/test_metrics.py, the telemetry layout)."""

from __future__ import annotations

from gregor.protocol.partitioner import murmur2, partition_for_key


def test_murmur2_matches_kafka():
    known = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"1": -1993445489,
             b"12": 126087238, b"123": -267702483, b"1234": -1614185708, b"12345": -1188365604}
    assert {k: murmur2(k) for k in known} == known


def test_partition_is_positive_hash_modulo_count():
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert all(0 <= partition_for_key(bytes([i]) * i, 5) < 5 for i in range(40))
