"""ACLs in a cluster, where Kafka's AclAuthorizer keeps them in ZooKeeper, mirrored by every
broker (a change made through any broker applies on every broker within moments):

- literal ACLs: ``/kafka-acl/<Topic|Group|Cluster|TransactionalId|...>/<name>``;
- prefixed ACLs: ``/kafka-acl-extended/prefixed/<type>/<prefix>``;

each node holding the resource's ACLs in Kafka's JSON (cluster/acl_store.py). A change is
announced as Kafka announces it (``/kafka-acl-changes/acl_changes_`` with ``Topic:name`` for a
literal resource, ``/kafka-acl-extended-changes/acl_changes_`` with a JSON for a prefixed one);
the brokers here watch the ACL nodes themselves."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Iterable
from typing import Any

from gregor.cluster.acl_store import decode_resource_acls, encode_resource_acls
from gregor.cluster.zk.client import BadVersionError, NodeExistsError, NoNodeError, ZkClient
from gregor.security.acl import AclBinding, Authorizer, PatternType, ResourceType

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
         ResourceType.DELEGATION_TOKEN, ResourceType.USER)


def _dir(pattern: PatternType, rt: ResourceType) -> str:
    return f"{LITERAL_ROOT if pattern == PatternType.LITERAL else PREFIXED_ROOT}/{rt.kafka_name}"


class ZkAclStore:
    def __init__(self, zk: ZkClient, authorizer: Authorizer) -> None:
        self.zk = zk
        self.authorizer = authorizer
        self._resources: dict[tuple[PatternType, ResourceType, str], list[AclBinding]] = {}
        self._watched: dict[tuple[PatternType, ResourceType, str], Any] = {}
        self._stops: list[Any] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for pattern in (PatternType.LITERAL, PatternType.PREFIXED):
            for rt in TYPES:
                path = _dir(pattern, rt)
                await self.zk.ensure_path(path)
                for name in await self.zk.get_children(path):
                    got = await self.zk.get(f"{path}/{name}")
                    self._node_changed(pattern, rt, name, got[0] if got is not None else None)
                self._stops.append(await self.zk.watch_children(
                    path, functools.partial(self._children_changed, pattern, rt)))
        self._publish()

    def stop(self) -> None:
        for stop in self._stops:
            stop()
        for stop in self._watched.values():
            if stop is not None:
                stop()
        self._watched.clear()

    def _children_changed(self, pattern: PatternType, rt: ResourceType, names: list[str]) -> None:
        for key in [k for k in self._watched if k[0] == pattern and k[1] == rt and k[2] not in names]:
            stop = self._watched.pop(key)
            if stop is not None:
                stop()
            self._resources.pop(key, None)
        for name in names:
            key = (pattern, rt, name)
            if key not in self._watched:
                self._watched[key] = None
                task = asyncio.get_running_loop().create_task(self._watch(key))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self._publish()

    async def _watch(self, key: tuple[PatternType, ResourceType, str]) -> None:
        pattern, rt, name = key
        stop = await self.zk.watch_data(f"{_dir(pattern, rt)}/{name}",
                                        lambda data, _s: self._node_changed(pattern, rt, name, data, True))
        if key not in self._watched or self._watched[key] is not None:
            stop()
            return
        self._watched[key] = stop

    def _node_changed(self, pattern: PatternType, rt: ResourceType, name: str, data: bytes | None,
                      publish: bool = False) -> None:
        try:
            acls = decode_resource_acls(rt, name, pattern, data)
        except (ValueError, KeyError, TypeError) as e:
            log.error("ignoring the ACLs of %s %s (%s) in ZooKeeper: %s", rt.kafka_name, name, pattern.name, e)
            return
        key = (pattern, rt, name)
        if acls:
            self._resources[key] = acls
        else:
            self._resources.pop(key, None)
        if publish:
            self._publish()

    def _publish(self) -> None:
        self.authorizer.update(b for acls in self._resources.values() for b in acls)

    async def add(self, bindings: Iterable[AclBinding]) -> None:
        await self._change(bindings, add=True)

    async def remove(self, bindings: Iterable[AclBinding]) -> None:
        await self._change(bindings, add=False)

    @staticmethod
    def refusal(binding: AclBinding) -> str | None:
        """A resource name ZooKeeper cannot hold as one node (Kafka's ZooKeeper authorizer fails
        such a creation too)."""
        if "/" in binding.name or binding.name in (".", ".."):
            return f"resource name {binding.name!r} cannot be a ZooKeeper node name (ACLs live in ZooKeeper here)"
        return None

    async def _change(self, bindings: Iterable[AclBinding], add: bool) -> None:
        by_resource: dict[tuple[PatternType, ResourceType, str], set[AclBinding]] = {}
        for b in bindings:
            by_resource.setdefault((b.pattern_type, b.resource_type, b.name), set()).add(b)
        try:
            for (pattern, rt, name), change in by_resource.items():
                await self._write(pattern, rt, name, change, add)
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable
            raise OSError(5, f"cannot write the ACLs to ZooKeeper: {e}") from None
        self._publish()

    async def _write(self, pattern: PatternType, rt: ResourceType, name: str, change: set[AclBinding],
                     add: bool) -> None:
        path = f"{_dir(pattern, rt)}/{name}"
        for _ in range(10):
            got = await self.zk.get(path)
            current = set(decode_resource_acls(rt, name, pattern, got[0] if got else None))
            wanted = current | change if add else current - change
            if wanted == current:
                return
            data = encode_resource_acls(wanted)
            try:
                if got is None:
                    await self.zk.create(path, data, makepath=True)
                elif wanted:
                    await self.zk.set(path, data, version=got[1].version)
                else:
                    await self.zk.delete(path, version=got[1].version)
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue
            self._node_changed(pattern, rt, name, data if wanted else None)
            if pattern == PatternType.LITERAL:
                await self.zk.create("/kafka-acl-changes/acl_changes_", f"{rt.name}:{name}".encode(),
                                     makepath=True, sequential=True)
            else:
                note = {"version": 1, "resourceType": rt.name, "name": name, "patternType": pattern.name}
                await self.zk.create("/kafka-acl-extended-changes/acl_changes_", json.dumps(note).encode(),
                                     makepath=True, sequential=True)
            return
        raise OSError(5, f"{path} kept changing while it was written")
