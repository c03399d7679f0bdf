"""A broker with every kind of listener, for the security tests: PLAINTEXT (the test's own
door: creating users and topics), SASL_SSL and SASL_PLAINTEXT (PLAIN and SCRAM), SSL with client
certificates required; and raw-socket helpers for what real clients never send."""

from __future__ import annotations

import socket
import ssl
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.client_frames import decode_response_frame, request_frame
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.tls import KEY_PASSWORD, Pki

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


@dataclass
class SecureBroker:
    process: BrokerProcess
    pki: Pki
    ports: dict[str, int]  # listener name -> port

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def secure_broker(data_dir: Path, pki: Pki, **extra: str) -> SecureBroker:
    plain = free_port()
    ports = {"PLAINTEXT": plain, "SASL_SSL": free_port(), "SASL_PLAINTEXT": free_port(), "SSL": free_port()}
    overrides = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_encrypted),
        "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **extra,
    }
    process = BrokerProcess(data_dir, overrides)
    process.port = plain
    process.start()
    return SecureBroker(process, pki, ports)


def raw_connection(port: int, tls: ssl.SSLContext | None = None, timeout: float = 10) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname="127.0.0.1")
    return sock


def call(sock: socket.socket, api_key: ApiKey, version: int, body: dict[str, Any], corr: int = 1) -> Any:
    """One request on a raw socket; its decoded response. ConnectionError when the broker closed."""
    sock.sendall(request_frame(api_key, version, corr, body, "raw-test"))
    head = _exactly(sock, 4)
    (size,) = struct.unpack(">i", head)
    _, response = decode_response_frame(api_key, version, _exactly(sock, size))
    return response


def closed(sock: socket.socket, timeout: float = 5) -> bool:
    """Whether the broker closed the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return buf
