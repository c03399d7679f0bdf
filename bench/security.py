"""What TLS and SASL cost, measured with the confluent-kafka client against one ``gregor serve``
with four listeners (PLAINTEXT, SSL, SASL_PLAINTEXT with SCRAM-SHA-512, SASL_SSL with
SCRAM-SHA-512), side by side in one run:

1. Produce throughput (``produce``): ``--records`` records of ``--size`` bytes (1 KiB), acks=all,
   idempotent, to a fresh one-partition topic per run, over each listener; records/s, MB/s and
   the ratio to PLAINTEXT.
2. Fetch throughput (``fetch``): one partition of ``--records`` records read from the beginning to
   its end by a consumer over each listener; ratio to PLAINTEXT.
3. Connection setup (``connect``): ``--connections`` times, a new TCP (and TLS) connection, then
   ApiVersions, SaslHandshake and the SCRAM-SHA-512 rounds (raw sockets, one at a time):
   connections/s per listener, and the broker CPU per connection.

``--rounds`` rounds, the listeners in alternating order; medians reported.

    .venv/bin/python bench/security.py                 # the full run (a few minutes on 2 cores)
    .venv/bin/python bench/security.py --quick         # a smoke run
    .venv/bin/python bench/security.py --json          # figures as JSON on stdout

Client and broker share the machine: compare the listeners within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from tests.support.tls import KEY_PASSWORD, make_pki  # noqa: E402

import peers  # noqa: E402
from gregor.protocol.api_keys import ApiKey  # noqa: E402
from gregor.protocol.client_frames import decode_response_frame, request_frame  # noqa: E402
from gregor.security.sasl.scram import ScramClient  # noqa: E402

LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def client_conf(listener: str, port: int, ca: Path) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": listener,
                            "log_level": 3}
    if "SSL" in listener:
        conf["ssl.ca.location"] = str(ca)
    if listener.startswith("SASL"):
        conf.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD})
    return conf


def produce_run(conf: dict[str, Any], admin: AdminClient, n: int, size: int) -> tuple[float, str]:
    topic = f"secbench-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({**conf, "linger.ms": 5, "acks": "all", "enable.idempotence": True,
                  "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 2_000_000})
    payload = os.urandom(size)
    p.produce(topic, payload)
    p.flush(30)
    start = time.perf_counter()
    for _ in range(n):
        try:
            p.produce(topic, payload)
        except BufferError:
            p.poll(0.01)
            p.produce(topic, payload)
        p.poll(0)
    if p.flush(120):
        raise RuntimeError("records not delivered")
    return n / (time.perf_counter() - start), topic


def fetch_run(conf: dict[str, Any], topic: str, n: int) -> float:
    c = Consumer({**conf, "group.id": f"secbench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.max.bytes": 52_428_800,
                  "max.partition.fetch.bytes": 10_485_760, "queued.min.messages": 200_000})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    stalled_at = start + 30
    while got < n:
        msgs = c.consume(10_000, 0.1)
        for m in msgs:
            if m.error() is None:
                got += 1
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(f"fetch failed: {m.error()}")
        if msgs:
            stalled_at = time.perf_counter() + 30
        elif time.perf_counter() > stalled_at:
            raise RuntimeError("fetch stalled")
    elapsed = time.perf_counter() - start
    c.close()
    return got / elapsed


def _call(sock: socket.socket, api_key: int, version: int, body: dict[str, Any], corr: int) -> Any:
    sock.sendall(request_frame(api_key, version, corr, body, "secbench"))
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    size = int.from_bytes(head, "big")
    frame = b""
    while len(frame) < size:
        frame += sock.recv(size - len(frame))
    return decode_response_frame(api_key, version, frame)[1]


def connect_once(listener: str, port: int, ctx: ssl.SSLContext) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if "SSL" in listener:
        sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    try:
        _call(sock, ApiKey.API_VERSIONS, 3, {"client_software_name": "b", "client_software_version": "1"}, 1)
        if listener.startswith("SASL"):
            assert _call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}, 2).error_code == 0
            scram = ScramClient("SCRAM-SHA-512", USER, PASSWORD)
            first = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first()}, 3)
            final = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.final(bytes(first.auth_bytes))}, 4)
            assert final.error_code == 0, final.error_message
            scram.verify(bytes(final.auth_bytes))
    finally:
        sock.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--connections", type=int)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    records = args.records or (5_000 if args.quick else 100_000)
    rounds = args.rounds or (1 if args.quick else 3)
    connections = args.connections or (20 if args.quick else 200)
    out = sys.stderr if args.json else sys.stdout

    def say(line: str = "") -> None:
        print(line, file=out, flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="secbench-"))
    pki = make_pki(tmp / "pki")
    ports = {name: peers.free_port() for name in LISTENERS}
    overrides = [f"listeners={','.join(f'{n}://127.0.0.1:{p}' for n, p in ports.items())}",
                 "sasl.enabled.mechanisms=SCRAM-SHA-512", "ssl.keystore.type=PEM",
                 f"ssl.keystore.location={pki.server_encrypted}", f"ssl.key.password={KEY_PASSWORD}"]
    load = os.getloadavg()
    say(f"bench/security.py: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    result: dict[str, Any] = {"records": records, "size": args.size, "rounds": rounds, "connections": connections}
    with peers.gregor_process(*overrides, port=ports["PLAINTEXT"]) as (_bootstrap, proc):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode())]).values():
            f.result(30)
        produce: dict[str, list[float]] = {n: [] for n in LISTENERS}
        fetch: dict[str, list[float]] = {n: [] for n in LISTENERS}
        cpu_gb: dict[str, list[float]] = {n: [] for n in LISTENERS}  # broker CPU s per GB produced
        say(f"Produce and fetch: {records:,} records of {args.size} bytes, {rounds} round(s)")
        for r in range(rounds):
            order = LISTENERS if r % 2 == 0 else tuple(reversed(LISTENERS))
            for name in order:
                conf = client_conf(name, ports[name], pki.ca)
                c0 = process_cpu(proc.pid)
                rate, topic = produce_run(conf, admin, records, args.size)
                cpu_gb[name].append((process_cpu(proc.pid) - c0) / (records * args.size / 1e9))
                produce[name].append(rate)
                frate = fetch_run(conf, topic, records)
                fetch[name].append(frate)
                say(f"  round {r + 1} {name:15s} produce {rate:>10,.0f} records/s (broker CPU "
                    f"{cpu_gb[name][-1]:.1f} s/GB)   fetch {frate:>10,.0f} records/s")
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        connect: dict[str, float] = {}
        cpu_per: dict[str, float] = {}
        say(f"Connection setup: {connections} connections per listener")
        for name in LISTENERS:
            c0 = process_cpu(proc.pid)
            start = time.perf_counter()
            for _ in range(connections):
                connect_once(name, ports[name], ctx)
            elapsed = time.perf_counter() - start
            connect[name] = connections / elapsed
            cpu_per[name] = (process_cpu(proc.pid) - c0) / connections * 1000
            say(f"  {name:15s} {connect[name]:>8,.0f} connections/s  broker CPU {cpu_per[name]:.2f} ms each")
    med = {k: {n: statistics.median(v) for n, v in d.items()} for k, d in (("produce", produce), ("fetch", fetch))}
    result["broker_cpu_s_per_gb_produced"] = {n: statistics.median(v) for n, v in cpu_gb.items()}
    result.update(median=med, connect=connect, broker_cpu_ms_per_connection=cpu_per,
                  ratios={k: {n: med[k][n] / med[k]["PLAINTEXT"] for n in LISTENERS} for k in med})
    say("")
    say(f"{'listener':16s} {'produce/s':>12s} {'ratio':>6s} {'CPU s/GB':>9s} {'fetch/s':>12s} {'ratio':>6s} "
        f"{'conn/s':>8s}")
    for n in LISTENERS:
        say(f"{n:16s} {med['produce'][n]:>12,.0f} {result['ratios']['produce'][n]:>5.2f}x "
            f"{result['broker_cpu_s_per_gb_produced'][n]:>9.1f} "
            f"{med['fetch'][n]:>12,.0f} {result['ratios']['fetch'][n]:>5.2f}x {connect[n]:>8,.0f}")
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
