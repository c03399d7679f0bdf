"""A Kafka protocol client over a plain blocking socket: the one place the clients of this
repository (the admin client, the integration tests, the benchmarks) frame requests and read
responses.

A request body is a plain dict with kio's field names, encoded for the version asked with
Gregor's schema-driven encoder (``gregor.protocol.encoder``: keys the version lacks are ignored,
missing keys take the schema default, so pass ``None`` where a null is meant); a response is
decoded with kio into its dataclass. Nothing is negotiated here: the caller names the version
(the admin client picks it from ApiVersions).

- ``request_header`` / ``request_frame`` / ``decode_response_frame`` (from
  ``gregor.protocol.client_frames``, re-exported): the bytes of a request, for callers with their
  own transport or that send damaged frames on purpose, and a response frame's decoding;
- ``WireClient``: one connection, one request at a time, plus ``send_raw`` and ``recv_frame``
  for byte-level tests.
"""

from __future__ import annotations

import socket
from typing import Any

from gregor.protocol.client_frames import SIZE as _SIZE
from gregor.protocol.client_frames import decode_response_frame, request_frame, request_header
from gregor.security.client import ClientSecurity

__all__ = ["WireClient", "decode_response_frame", "request_frame", "request_header"]

class WireClient:
    """One blocking connection. ``bootstrap`` is ``host:port``; socket errors are OSErrors (a
    connection the broker closed: ConnectionError)."""

    client_id: str = "wire"
    corr: int = 0  # correlation id of the last request

    def __init__(self, bootstrap: str, timeout: float = 10, client_id: str = "wire",
                 security: ClientSecurity | None = None) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self.corr = 0
        if security is not None and security.ssl_context is not None:
            try:
                self.sock = security.ssl_context.wrap_socket(self.sock, server_hostname=host)
            except OSError:
                self.sock.close()
                raise
        if security is not None and security.sasl_mechanism:
            try:
                self._authenticate(security)
            except OSError:
                self.sock.close()
                raise

    def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 rounds (PLAIN, SCRAM); PermissionError with
        the broker's message when it refuses."""
        from gregor.protocol.api_keys import ApiKey
        from gregor.security.sasl import SaslAuthenticationError
        from gregor.security.sasl.plain import plain_client_token
        from gregor.security.sasl.scram import ScramClient

        mechanism = security.sasl_mechanism
        hs = self.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if hs.error_code:
            raise PermissionError(f"the broker does not serve SASL mechanism {mechanism} (it serves "
                                  f"{', '.join(hs.mechanisms) or 'none'})")

        def step(token: bytes) -> bytes:
            r = self.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            if r.error_code:
                raise PermissionError(f"authentication as {security.username} failed: {r.error_message}")
            return bytes(r.auth_bytes)

        try:
            if mechanism == "PLAIN":
                step(plain_client_token(security.username, security.password))
            else:
                assert mechanism is not None
                scram = ScramClient(mechanism, security.username, security.password)
                scram.verify(step(scram.final(step(scram.first()))))
        except SaslAuthenticationError as e:
            raise PermissionError(str(e)) from None

    def close(self) -> None:
        self.sock.close()

    def request_bytes(self, api_key: int, version: int, body: dict[str, Any], client_id: str | None = None) -> bytes:
        """The next request's frame, not sent (tests damage it first, or send many at once)."""
        self.corr += 1
        return request_frame(api_key, version, self.corr, body, self.client_id if client_id is None else client_id)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        """The next response frame, without its size."""
        (size,) = _SIZE.unpack(self._recv_exact(4))
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """Send one request and return its decoded response."""
        self.send_raw(self.request_bytes(api_key, version, body))
        corr, response = decode_response_frame(api_key, version, self.recv_frame())
        if corr != self.corr:
            raise ConnectionError(f"response to request {corr} where {self.corr} was expected")
        return response

    def closed_by_peer(self) -> bool:
        """Whether the broker closed the connection (waits for it up to the socket's timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
