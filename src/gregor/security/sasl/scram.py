"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer: no
channel binding (gs2 header ``n,,`` or ``n,a=<authzid>,``), the credentials as Kafka stores them
(salt, StoredKey, ServerKey, iterations; never the password) looked up by user and mechanism.
Kafka's ``tokenauth`` extension (delegation tokens) is refused: Gregor issues no tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gregor.security.sasl import SaslAuthenticationError, SaslServer, Step

DIGESTS: dict[str, Callable[..., Any]] = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


MIN_ITERATIONS = 4096
log = logging.getLogger(__name__)
_NONCE_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
CredentialLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism) -> credential


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslAuthenticationError(f"Invalid SCRAM message: {part[:20]!r} is not an attribute")
        out.setdefault(part[0], part[2:])
    return out


def _sasl_name(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is a comma, ``=3D`` an equals sign, nothing else after ``=``."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1:i + 3]
            if code not in ("2C", "3D"):
                raise SaslAuthenticationError("Invalid SCRAM user name encoding")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


class ScramServer(SaslServer):
    def __init__(self, mechanism: str, credentials: CredentialLookup) -> None:
        self.mechanism = mechanism
        self.digest = DIGESTS[mechanism]
        self.credentials = credentials
        self._state = "first"
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._user = ""
        self._credential: ScramCredential | None = None

    def evaluate(self, token: bytes) -> Step:
        """Kafka answers every SCRAM failure with one message (its SaslServerAuthenticator replaces
        the mechanism's SaslException): which check failed is logged here, not told to the client."""
        try:
            message = token.decode("utf-8")
            if self._state == "first":
                return self._client_first(message)
            if self._state == "final":
                return self._client_final(message)
            raise SaslAuthenticationError("Unexpected SCRAM message after authentication completed")
        except (SaslAuthenticationError, UnicodeDecodeError, ValueError) as e:
            log.info("SCRAM authentication (%s) failed: %s", self.mechanism, e)
            raise SaslAuthenticationError("Authentication failed during authentication due to invalid credentials "
                                          f"with SASL mechanism {self.mechanism}") from None

    def _client_first(self, message: str) -> Step:
        # gs2-header: "n" (no channel binding) "," [a=authzid] ","
        if not message.startswith(("n,", "y,")):
            raise SaslAuthenticationError("Invalid SCRAM client first message: channel binding is not supported")
        flag_end = message.index(",")
        authz_end = message.find(",", flag_end + 1)
        if authz_end < 0:
            raise SaslAuthenticationError("Invalid SCRAM client first message")
        authz = message[flag_end + 1:authz_end]
        self._gs2 = message[:authz_end + 1]
        bare = message[authz_end + 1:]
        parts = bare.split(",")
        attrs = _attributes(",".join(parts[:2]))
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise SaslAuthenticationError("Invalid SCRAM client first message: no user name or nonce")
        # Kafka's SCRAM extensions (key=value after the nonce)
        extensions = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslAuthenticationError("Authentication failed: delegation tokens are not supported")
        user = _sasl_name(attrs["n"])
        if authz and (not authz.startswith("a=") or _sasl_name(authz[2:]) != user):
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        credential = self.credentials(user, self.mechanism)
        if credential is None:
            raise SaslAuthenticationError(f"Authentication failed: Invalid user credentials ({user!r} has none)")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslAuthenticationError(f"{user!r}'s credential has {credential.iterations} iterations, fewer than "
                                          f"{MIN_ITERATIONS}")
        self._user, self._credential = user, credential
        self._client_first_bare = bare
        # the server's half: letters and digits only, as Kafka's ScramFormatter makes it (older
        # librdkafka clients mangle a nonce with '-' or '_')
        self._nonce = attrs["r"] + "".join(secrets.choice(_NONCE_CHARS) for _ in range(32))
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "final"
        return Step(self._server_first.encode(), False)

    def _client_final(self, message: str) -> Step:
        assert self._credential is not None
        proof_at = message.rfind(",p=")
        if proof_at < 0:
            raise SaslAuthenticationError("Invalid SCRAM client final message: no proof")
        without_proof = message[:proof_at]
        attrs = _attributes(message)
        if attrs.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise SaslAuthenticationError("Invalid SCRAM client final message: channel binding does not match")
        # Kafka's check is endsWith: librdkafka before 2.1 sends its own nonce again in front of
        # the combined one (and signs what it sent, so the proof still verifies)
        if not attrs.get("r", "").endswith(self._nonce):
            raise SaslAuthenticationError("Invalid SCRAM client final message: nonce does not match")
        try:
            proof = base64.b64decode(attrs["p"], validate=True)
        except (ValueError, KeyError):
            raise SaslAuthenticationError("Invalid SCRAM client final message: proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        signature = hmac.new(cred.stored_key, auth_message, self.digest).digest()
        if len(proof) != len(signature):
            raise SaslAuthenticationError("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self.digest(client_key).digest(), cred.stored_key):
            raise SaslAuthenticationError("Authentication failed: Invalid user credentials")
        server_signature = hmac.new(cred.server_key, auth_message, self.digest).digest()
        self.authorization_id = self._user
        self._state = "done"
        return Step(f"v={base64.b64encode(server_signature).decode()}".encode(), True)


class ScramClient:
    """The client side (a broker authenticating to another, a tool): ``first()``, then
    ``final(server_first)``, then ``verify(server_final)``."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self.digest = DIGESTS[mechanism]
        self.username = username
        self.password = password
        self._nonce = secrets.token_urlsafe(24)
        self._first_bare = f"n={username.replace('=', '=3D').replace(',', '=2C')},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = _attributes(server_first.decode())
        nonce, salt, iterations = attrs.get("r", ""), base64.b64decode(attrs.get("s", "")), int(attrs.get("i", "0"))
        if not nonce.startswith(self._nonce) or iterations < MIN_ITERATIONS:
            # fewer iterations than SCRAM's minimum would make offline guessing cheap (Kafka's client refuses too)
            raise SaslAuthenticationError("the server's SCRAM first message is invalid")
        self._salted = hashlib.pbkdf2_hmac(self.digest().name, self.password.encode(), salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._first_bare},{server_first.decode()},{without_proof}".encode()
        client_key = hmac.new(self._salted, b"Client Key", self.digest).digest()
        signature = hmac.new(self.digest(client_key).digest(), self._auth_message, self.digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode())
        if "e" in attrs:
            raise SaslAuthenticationError(f"the server refused the SCRAM authentication: {attrs['e']}")
        server_key = hmac.new(self._salted, b"Server Key", self.digest).digest()
        expected = hmac.new(server_key, self._auth_message, self.digest).digest()
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), expected):
            raise SaslAuthenticationError("the server's SCRAM signature does not verify (not the real server?)")
