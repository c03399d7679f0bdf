"""SCRAM credentials (KIP-554), kept in the form Kafka keeps them (salt, StoredKey, ServerKey,
iterations; never the salted password) in ``<log.dirs>/scram-credentials.json`` (mode 0600,
written atomically). SASL/SCRAM listeners authenticate clients with them (``lookup``)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any, Protocol

from gregor.atomic_file import write_atomically
from gregor.security.sasl.scram import ScramCredential

FILE = "scram-credentials.json"
MECHANISMS = {1: ("SCRAM-SHA-256", hashlib.sha256), 2: ("SCRAM-SHA-512", hashlib.sha512)}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


class CredentialStore(Protocol):
    """Where SCRAM credentials live: a file on one node, ZooKeeper in a cluster."""

    users: dict[str, dict[int, dict[str, Any]]]
    path: Any  # where, for messages

    async def save(self, users: dict[str, dict[int, dict[str, Any]]]) -> None: ...
    def lookup(self, user: str, mechanism: str) -> ScramCredential | None: ...


class ScramCredentials:
    """user -> mechanism -> {salt, stored_key, server_key (base64), iterations}."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE
        self.users: dict[str, dict[int, dict[str, Any]]] = {}
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        self.users = {u: {int(m): c for m, c in mechs.items()} for u, mechs in raw.items()}

    async def save(self, users: dict[str, dict[int, dict[str, Any]]]) -> None:
        data = json.dumps({u: {str(m): c for m, c in mechs.items()} for u, mechs in users.items() if mechs},
                          indent=1, sort_keys=True).encode()
        write_atomically(self.path, data, mode=0o600)
        self.users = users

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for ``mechanism`` (SCRAM-SHA-256 or SCRAM-SHA-512), as of now (a
        credential altered since is used by the next authentication)."""
        number = next((n for n, (name, _) in MECHANISMS.items() if name == mechanism), None)
        c = self.users.get(user, {}).get(number) if number is not None else None
        if c is None:
            return None
        return ScramCredential(base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]),
                               base64.b64decode(c["server_key"]), int(c["iterations"]))
