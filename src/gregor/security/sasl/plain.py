"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer: ``authzid NUL authcid NUL password``; the
users are the ``user_<name>="<password>"`` options of the listener's PlainLoginModule JAAS entry."""

from __future__ import annotations

import hmac

from gregor.security.sasl import SaslAuthenticationError, SaslServer, Step


class PlainServer(SaslServer):
    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users

    def evaluate(self, token: bytes) -> Step:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self.users.get(username)
        # compared in constant time, also for an unknown user (no timing hint of which users exist)
        ok = hmac.compare_digest((expected or "\0unknown").encode(), password.encode()) and expected is not None
        if not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        self.authorization_id = username
        return Step(b"", True)


def plain_client_token(username: str, password: str) -> bytes:
    return b"\0" + username.encode() + b"\0" + password.encode()


def plain_users(options: dict[str, str]) -> dict[str, str]:
    return {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_")}
