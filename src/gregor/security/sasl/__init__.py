"""SASL mechanisms, the server side of each as a small state machine over tokens
(``SaslServer``) and the client side of PLAIN and SCRAM (brokers authenticate to each other and
tools to brokers with them)."""

from __future__ import annotations

from dataclasses import dataclass


class SaslAuthenticationError(Exception):
    """The client failed to authenticate (wrong credentials, a malformed token): Kafka's
    SASL_AUTHENTICATION_FAILED with this message."""


@dataclass
class Step:
    challenge: bytes  # what goes back to the client (may be empty)
    complete: bool  # True: the client is authenticated as ``SaslServer.authorization_id``


class SaslServer:
    mechanism = ""
    authorization_id = ""  # once complete: the principal's name
    session_lifetime_ms = 0  # a credential's own lifetime (OAUTHBEARER tokens); 0: none

    def evaluate(self, token: bytes) -> Step:
        raise NotImplementedError
