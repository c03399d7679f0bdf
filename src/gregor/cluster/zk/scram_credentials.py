"""SCRAM credentials in a cluster: ZooKeeper holds them as Kafka's ZooKeeper mode does, every
broker mirrors them, so a user created through any broker authenticates on all of them within
moments (docs/security.md).

Each user with a credential is ``/config/users/<user>`` (the name URL-encoded as Kafka's
Sanitizer) with Kafka's entity config JSON; a credential is the value of its mechanism's key:
``{"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}``
(other keys a user node holds, such as quotas, are kept as they are). A change is also announced
with a ``/config/changes/config_change_`` node (``{"version":2,"entity_path":"users/<user>"}``), as
Kafka's AdminZkClient announces it. Brokers watch ``/config/users`` and each user's node."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any
from urllib.parse import quote, unquote

from gregor.cluster.credentials import MECHANISMS
from gregor.cluster.zk.client import BadVersionError, NodeExistsError, NoNodeError, ZkClient
from gregor.security.sasl.scram import ScramCredential

log = logging.getLogger(__name__)

CONFIG_USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
NAMES = {number: name for number, (name, _) in MECHANISMS.items()}


def _path(user: str) -> str:
    return f"{CONFIG_USERS}/{quote(user, safe='').replace('~', '%7E')}"


def encode_credential(c: dict[str, Any]) -> str:
    return (f"salt={c['salt']},stored_key={c['stored_key']},server_key={c['server_key']},"
            f"iterations={c['iterations']}")


def decode_credential(value: str) -> dict[str, Any]:
    fields = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
    for key in ("salt", "stored_key", "server_key"):
        base64.b64decode(fields[key], validate=True)  # KeyError/ValueError: not Kafka's form
    return {"salt": fields["salt"], "stored_key": fields["stored_key"], "server_key": fields["server_key"],
            "iterations": int(fields["iterations"])}


class ZkScramCredentials:
    """The same interface as the single node's file store (``users``, ``save``, ``lookup``),
    over ZooKeeper."""

    path = CONFIG_USERS

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk
        self.users: dict[str, dict[int, dict[str, Any]]] = {}
        self._watched: dict[str, Any] = {}
        self._stop_children: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.zk.ensure_path(CONFIG_USERS)
        for name in await self.zk.get_children(CONFIG_USERS):
            got = await self.zk.get(f"{CONFIG_USERS}/{name}")
            self._node_changed(name, got[0] if got is not None else None)
        self._stop_children = await self.zk.watch_children(CONFIG_USERS, self._children_changed)

    def stop(self) -> None:
        if self._stop_children is not None:
            self._stop_children()
        for stop in self._watched.values():
            if stop is not None:
                stop()
        self._watched.clear()

    def _children_changed(self, names: list[str]) -> None:
        for name in set(self._watched) - set(names):
            stop = self._watched.pop(name)
            if stop is not None:
                stop()
            self.users.pop(unquote(name), None)
        for name in names:
            if name not in self._watched:
                self._watched[name] = None
                task = asyncio.get_running_loop().create_task(self._watch(name))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _watch(self, name: str) -> None:
        stop = await self.zk.watch_data(f"{CONFIG_USERS}/{name}", lambda data, _s: self._node_changed(name, data))
        if name not in self._watched or self._watched[name] is not None:
            stop()
            return
        self._watched[name] = stop

    def _node_changed(self, name: str, data: bytes | None) -> None:
        user = unquote(name)
        mechs: dict[int, dict[str, Any]] = {}
        try:
            config = json.loads(data)["config"] if data else {}
            for number, mechanism in NAMES.items():
                if mechanism in config:
                    mechs[number] = decode_credential(config[mechanism])
        except (ValueError, KeyError, TypeError) as e:
            log.error("user %s: ignoring its SCRAM credentials in ZooKeeper: %s", user, e)
            return
        if mechs:
            self.users[user] = mechs
        else:
            self.users.pop(user, None)

    async def save(self, users: dict[str, dict[int, dict[str, Any]]]) -> None:
        """Write the users whose credentials differ from the mirrored ones (each node written on
        the version read; a concurrent change is read again). OSError when ZooKeeper cannot be
        written (the handler answers KAFKA_STORAGE_ERROR... as for the file)."""
        changed = [u for u in set(users) | set(self.users) if users.get(u, {}) != self.users.get(u, {})]
        try:
            for user in changed:
                await self._write(user, users.get(user, {}))
                await self.zk.create(f"{CONFIG_CHANGES}/config_change_",
                                     json.dumps({"version": 2,
                                                 "entity_path": f"users/{_path(user).rsplit('/', 1)[1]}"}).encode(),
                                     makepath=True, sequential=True)
        except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: the same answer as a failed file write
            raise OSError(5, f"cannot write the credentials to ZooKeeper: {e}") from None
        for user in changed:  # mirrored now; the watches confirm it
            if users.get(user):
                self.users[user] = users[user]
            else:
                self.users.pop(user, None)

    async def _write(self, user: str, mechs: dict[int, dict[str, Any]]) -> None:
        path = _path(user)
        for _ in range(10):
            got = await self.zk.get(path)
            if got is None:
                config: dict[str, Any] = {}
            else:
                config = dict(json.loads(got[0] or b"{}").get("config", {}))
            for number, mechanism in NAMES.items():
                config.pop(mechanism, None)
                if number in mechs:
                    config[mechanism] = encode_credential(mechs[number])
            data = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
            try:
                if got is None:
                    await self.zk.create(path, data, makepath=True)
                else:
                    await self.zk.set(path, data, version=got[1].version)
                return
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue
        raise OSError(5, f"{path} kept changing while it was written")

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        number = next((n for n, name in NAMES.items() if name == mechanism), None)
        c = self.users.get(user, {}).get(number) if number is not None else None
        if c is None:
            return None
        return ScramCredential(base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]),
                               base64.b64decode(c["server_key"]), int(c["iterations"]))
