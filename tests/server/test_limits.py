"""Pure logic of the connection limits (server/limits.py): the request memory pool, per-address
counts, the frame decoder's reservations, and the configuration keys."""

from __future__ import annotations

import struct

import pytest

from gregor.config import BrokerConfig, ConfigError, ip_overrides
from gregor.protocol.framing import FrameDecoder
from gregor.server.limits import ConnectionQuotas, RequestMemoryPool


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_pool_is_non_strict_and_wakes_waiters_in_order():
    pool = RequestMemoryPool(100)
    assert pool.try_reserve(150)  # granted while anything is left, even beyond the limit
    assert not pool.try_reserve(1)
    woken: list[str] = []
    pool.wait(lambda: woken.append("a"))
    pool.wait(lambda: woken.append("b"))
    pool.release(20)  # 130 used: still nothing left
    assert woken == []
    pool.release(60)
    assert woken == ["a", "b"] and pool.used == 70


def test_unbounded_pool_only_counts():
    pool = RequestMemoryPool(-1)
    assert all(pool.try_reserve(10**9) for _ in range(10))
    pool.release(10 * 10**9)
    assert pool.used == 0


def test_decoder_reserves_each_frame_before_reading_its_payload():
    pool = RequestMemoryPool(10)
    dec = FrameDecoder(1 << 20, pool.try_reserve)
    # fast path: two whole frames in one read; the second one finds the pool exhausted
    got = dec.feed(frame(b"x" * 12) + frame(b"yy"))
    assert got == [b"x" * 12]
    assert dec.feed(b"") == [] and dec.blocked
    pool.release(12)
    assert dec.feed(b"") == [b"yy"] and not dec.blocked
    # a size prefix alone reserves its whole size; the payload is buffered as it comes
    pool.release(2)
    assert dec.feed(struct.pack(">i", 1000)) == []
    assert pool.used == 1000 and dec.buffered == 0
    assert dec.feed(b"z" * 10) == [] and dec.buffered == 10


def test_decoder_without_pool_does_not_preallocate():
    dec = FrameDecoder(100 << 20)
    assert dec.feed(struct.pack(">i", 100 << 20) + b"abc") == []
    assert dec.buffered == 3


def test_per_ip_limits_and_overrides():
    q = ConnectionQuotas(10, 2, {"127.0.0.1": 3})
    assert [q.admit_ip("10.0.0.1") for _ in range(3)] == [True, True, False]
    assert [q.admit_ip("127.0.0.1") for _ in range(4)] == [True, True, True, False]
    q.release_ip("10.0.0.1")
    assert q.admit_ip("10.0.0.1")
    assert q.per_ip == {"10.0.0.1": 2, "127.0.0.1": 3}


def test_localhost_override_is_resolved():
    q = ConnectionQuotas(10, 0, {"localhost": 1})
    assert q.limit_for("127.0.0.1") == 1
    assert q.limit_for("10.0.0.1") == 0


def test_config_keys_with_kafka_defaults_and_checks():
    cfg = BrokerConfig.from_mapping({})
    assert cfg["connections.max.idle.ms"] == 600000
    assert cfg["queued.max.request.bytes"] == -1
    assert cfg["max.connections"] == cfg["max.connections.per.ip"] == 2**31 - 1
    assert cfg["fetch.max.bytes"] == 57671680
    cfg = BrokerConfig.from_mapping({"max.connections.per.ip": "0",
                                     "max.connections.per.ip.overrides": "127.0.0.1:5, broker-host:7"})
    assert ip_overrides(cfg["max.connections.per.ip.overrides"]) == {"127.0.0.1": 5, "broker-host": 7}
    for bad in ({"queued.max.request.bytes": "1000"}, {"max.connections.per.ip": "0"},
                {"max.connections.per.ip.overrides": "127.0.0.1"}, {"fetch.max.bytes": "1023"},
                {"max.connections": "-1"}):
        with pytest.raises(ConfigError):
            BrokerConfig.from_mapping(bad)
    assert BrokerConfig.from_mapping({"connections.max.idle.ms": "-1"})["connections.max.idle.ms"] == -1
