"""SCRAM credentials (cluster/credentials.py): kept as Kafka keeps them, across restarts."""

from __future__ import annotations

import asyncio
import stat

from gregor.cluster.credentials import FILE, ScramCredentials

SHA256, SHA512 = 1, 2


def credential(n: int) -> dict:
    return {"salt": f"c2FsdA{n}", "stored_key": f"c3RvcmVk{n}", "server_key": f"c2VydmVy{n}", "iterations": 4096 + n}


def test_saved_credentials_are_read_back(tmp_path):
    store = ScramCredentials(tmp_path)
    assert store.users == {}
    users = {"alice": {SHA256: credential(1), SHA512: credential(2)}, "bob": {SHA512: credential(3)}, "gone": {}}
    asyncio.run(store.save(users))
    assert store.users is users
    again = ScramCredentials(tmp_path)
    # mechanisms come back as the integers Kafka numbers them with; users without any are not kept
    assert again.users == {"alice": {SHA256: credential(1), SHA512: credential(2)}, "bob": {SHA512: credential(3)}}
    assert stat.S_IMODE((tmp_path / FILE).stat().st_mode) == 0o600
    assert not list(tmp_path.glob("*.tmp"))
    asyncio.run(again.save({}))
    assert ScramCredentials(tmp_path).users == {}
