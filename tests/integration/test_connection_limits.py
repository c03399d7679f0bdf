"""Connection limits against a broker subprocess: idle expiry, per-address and total connection
limits, queued.max.request.bytes under many partial 1 MB requests, fetch.max.bytes on a giant
Fetch, and a client that never reads its responses. Memory is checked as the broker's VmRSS
(a bound, not a timing)."""

from __future__ import annotations

import socket
import struct
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from gregor.admin.wire_client import WireClient as Wire
from gregor.protocol import codec
from gregor.protocol.records import build_batch

MiB = 1 << 20


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def wait_for(cond, timeout: float = 20.0, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every)
    return cond()


def api_versions_ok(w: Wire) -> bool:
    return w.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0


def closed(s: socket.socket) -> bool:
    """True once the broker closed ``s`` (reads and drops whatever it had sent before)."""
    s.setblocking(False)
    try:
        while True:
            if s.recv(1 << 20) == b"":
                return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        s.setblocking(True)


def raw(bootstrap: str, rcvbuf: int | None = None) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect((host, int(port)))
    return s


def fill_topic(bootstrap: str, topic: str, mib: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 900_000,
                  "compression.type": "none", "queue.buffering.max.kbytes": 512 * 1024})
    value = bytes(1000)
    for i in range(mib * 1024):
        while True:
            try:
                p.produce(topic, value, key=str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def fetch_body(topic: str, max_bytes: int, pmax: int) -> dict:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "log_start_offset": -1,
                                                        "partition_max_bytes": pmax}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def test_idle_connections_are_closed_active_ones_kept(broker_factory):
    b = broker_factory(connections_max_idle_ms="1000")
    silent = raw(b.bootstrap)
    partial = raw(b.bootstrap)
    partial.sendall(struct.pack(">i", MiB) + b"\x00" * 1000)  # a request begun, never finished
    busy = Wire(b.bootstrap)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # a client that keeps talking is never idle
        assert api_versions_ok(busy)
        time.sleep(0.1)
    assert wait_for(lambda: closed(silent) and closed(partial))
    assert api_versions_ok(busy)
    assert "idle for more than connections.max.idle.ms" in b.output()


def test_max_connections_per_ip(broker_factory):
    b = broker_factory(max_connections_per_ip="3")
    conns = [Wire(b.bootstrap) for _ in range(3)]
    assert all(api_versions_ok(w) for w in conns)
    extra = Wire(b.bootstrap)
    assert wait_for(extra.closed_by_peer)
    conns[0].close()
    # the slot is given back when the broker sees the close
    assert wait_for(lambda: _try_connect_and_call(b.bootstrap))
    assert "already has max.connections.per.ip=3" in b.output()


def test_max_connections_per_ip_override(broker_factory):
    b = broker_factory(max_connections_per_ip="0", max_connections_per_ip_overrides="127.0.0.1:2")
    conns = [Wire(b.bootstrap) for _ in range(2)]
    assert all(api_versions_ok(w) for w in conns)
    assert wait_for(Wire(b.bootstrap).closed_by_peer)


def _try_connect_and_call(bootstrap: str) -> bool:
    try:
        w = Wire(bootstrap, timeout=2)
        try:
            return api_versions_ok(w)
        finally:
            w.close()
    except (ConnectionError, OSError):
        return False


def test_max_connections_makes_new_connections_wait(broker_factory):
    b = broker_factory(max_connections="2")
    first, second = Wire(b.bootstrap), Wire(b.bootstrap)
    assert api_versions_ok(first) and api_versions_ok(second)
    third = Wire(b.bootstrap, timeout=1.0)
    third.send_raw(third.request_bytes(18, 3, {"client_software_name": "t", "client_software_version": "1"}))
    try:
        third.recv_frame()
        raise AssertionError("a connection beyond max.connections was served")
    except TimeoutError:
        pass
    first.close()
    third.sock.settimeout(10)
    assert third.recv_frame()  # served once a slot is free
    assert api_versions_ok(second)


def test_queued_max_request_bytes_bounds_partial_requests(broker_factory):
    """300 connections each send a 1 MB size prefix and all but the last byte: without a bound
    the broker would hold ~300 MB; with queued.max.request.bytes=20 MiB it holds about that."""
    b = broker_factory(queued_max_request_bytes=str(20 * MiB), socket_request_max_bytes=str(MiB),
                       connections_max_idle_ms="4000")
    time.sleep(0.5)
    before = rss_mib(b.proc.pid)
    socks = []
    for _ in range(300):
        s = raw(b.bootstrap)
        s.setblocking(False)
        try:
            s.send(struct.pack(">i", MiB) + b"\x00" * (MiB - 1))
        except BlockingIOError:
            pass
        socks.append(s)
    time.sleep(2)
    grown = rss_mib(b.proc.pid) - before
    print(f"RSS before {before:.0f} MiB, grown by {grown:.0f} MiB with 300 partial 1 MB requests")
    assert grown < 80, grown
    # the half-sent requests are idle: once they are closed, the memory serves others again
    assert wait_for(lambda: all(closed(s) for s in socks), timeout=30)
    w = Wire(b.bootstrap)
    assert api_versions_ok(w)
    r = w.call(0, 9, {"acks": -1, "timeout": 1000, "transactional_id": None,
                      "topic_data": [{"name": "after", "partition_data": [
                          {"index": 0, "records": build_batch([(b"k", b"v")])}]}]})
    assert r.responses[0].partition_responses[0].error_code in (0, 3)  # 3: not auto-created by produce


def test_giant_fetch_is_capped_by_fetch_max_bytes(broker_factory):
    b = broker_factory(fetch_max_bytes=str(2 * MiB))
    fill_topic(b.bootstrap, "big", 8)
    w = Wire(b.bootstrap, timeout=30)
    r = w.call(1, 11, fetch_body("big", 2**31 - 1, 2**31 - 1))
    records = r.responses[0].partitions[0].records
    assert 0 < len(records) <= 2 * MiB
    # a consumer reads everything through the capped responses
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 2_000_000_000, "max.partition.fetch.bytes": 1_000_000_000,
                  "receive.message.max.bytes": 2**31 - 1})
    c.assign([TopicPartition("big", 0, 0)])
    got = 0
    deadline = time.monotonic() + 60
    while got < 8 * 1024 and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            assert m.error() is None, m.error()
            got += 1
    c.close()
    assert got == 8 * 1024


def test_large_fetches_to_a_client_that_never_reads_stay_bounded(broker_factory):
    """Ten connections each ask for 55 MB (fetch.max.bytes' default) of a 60 MB topic, again and
    again, and never read: the broker must neither build those responses in memory nor keep
    working for them, and closes them once idle."""
    b = broker_factory(connections_max_idle_ms="5000")
    fill_topic(b.bootstrap, "huge", 60)
    time.sleep(0.5)
    before = rss_mib(b.proc.pid)
    readers = []
    for _ in range(10):
        s = raw(b.bootstrap, rcvbuf=64 * 1024)
        w = Wire.__new__(Wire)
        w.sock, w.corr = s, 0
        for _ in range(20):
            s.sendall(w.request_bytes(1, 11, fetch_body("huge", 2**31 - 1, 2**31 - 1)))
        readers.append(s)
    time.sleep(3)
    grown = rss_mib(b.proc.pid) - before
    print(f"RSS before {before:.0f} MiB, grown by {grown:.0f} MiB with 10 never-reading 55 MB fetchers")
    assert grown < 100, grown  # ten responses held whole would be 550 MB
    # (reading now would make them active again: the broker's log tells when they are closed)
    assert wait_for(lambda: b.output().count("idle for more than connections.max.idle.ms") >= 10, timeout=30)
    assert all(wait_for(lambda s=s: closed(s)) for s in readers)
    w = Wire(b.bootstrap)
    assert api_versions_ok(w)


def test_response_being_sent_survives_topic_deletion(broker_factory):
    """A large fetched range is read from the segment while the socket drains; deleting the
    topic in the meantime must not change or cut what the client receives."""
    from confluent_kafka.admin import AdminClient

    from gregor.protocol.record_batch import validate_batches

    b = broker_factory()
    fill_topic(b.bootstrap, "gone", 16)
    s = raw(b.bootstrap, rcvbuf=64 * 1024)
    w = Wire.__new__(Wire)
    w.sock, w.corr = s, 0
    s.sendall(w.request_bytes(1, 11, fetch_body("gone", 2**31 - 1, 2**31 - 1)))
    time.sleep(0.5)  # the broker has sent what the socket took and waits for it to drain
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics(["gone"])["gone"].result(10)
    assert not (b.data_dir / "gone-0").exists()
    s.settimeout(30)
    frame = w.recv_frame()

    records = codec.decode_response(1, 11, frame[4:]).responses[0].partitions[0].records
    assert len(records) > 15 * MiB
    headers = validate_batches(records, 2**31 - 1)  # whole batches, every CRC intact
    assert headers[0].base_offset == 0
    assert sum(h.records_count for h in headers) == headers[-1].last_offset + 1
