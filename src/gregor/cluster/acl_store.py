"""Where ACLs live: on one node ``<log.dirs>/acls.json`` (written atomically, mode 0600); in a
cluster ZooKeeper, as Kafka's AclAuthorizer keeps them (cluster/zk/acl_store.py). Both keep the
authorizer's set equal to what is stored, and write in Kafka's JSON form per resource:
``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from gregor.atomic_file import write_atomically
from gregor.security.acl import (
    AclBinding,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    operation_named,
    resource_type_named,
)

FILE = "acls.json"


class AclStore(Protocol):
    authorizer: Authorizer

    async def add(self, bindings: Iterable[AclBinding]) -> None: ...
    async def remove(self, bindings: Iterable[AclBinding]) -> None: ...


def encode_resource_acls(bindings: Iterable[AclBinding]) -> bytes:
    """One resource's ACLs in Kafka's ZooKeeper JSON."""
    acls = sorted(({"principal": b.principal, "permissionType": b.permission.kafka_name,
                    "operation": b.operation.kafka_name, "host": b.host} for b in bindings),
                  key=lambda a: (a["principal"], a["operation"], a["permissionType"], a["host"]))
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_resource_acls(resource_type: ResourceType, name: str, pattern: PatternType,
                         data: bytes | None) -> list[AclBinding]:
    """ValueError if the JSON is not Kafka's."""
    if not data:
        return []
    obj = json.loads(data)
    out = []
    for a in obj.get("acls", []):
        out.append(AclBinding(resource_type, name, pattern, str(a["principal"]), str(a["host"]),
                              operation_named(str(a["operation"])),
                              AclPermissionType[str(a["permissionType"]).upper()]))
    return out


class FileAclStore:
    """One node's ACLs."""

    def __init__(self, data_dir: Path, authorizer: Authorizer) -> None:
        self.path = data_dir / FILE
        self.authorizer = authorizer
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            raw = []
        bindings: list[AclBinding] = []
        for r in raw:
            rt = resource_type_named(r["resourceType"])
            pattern = PatternType[r["patternType"].upper()]
            bindings += decode_resource_acls(rt, r["name"], pattern, json.dumps(r).encode())
        authorizer.update(bindings)

    async def add(self, bindings: Iterable[AclBinding]) -> None:
        self._save(self.authorizer.bindings | set(bindings))

    async def remove(self, bindings: Iterable[AclBinding]) -> None:
        self._save(self.authorizer.bindings - set(bindings))

    def _save(self, bindings: frozenset[AclBinding]) -> None:
        by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
        for b in bindings:
            by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
        out: list[dict[str, Any]] = []
        for (rt, name, pattern), group in sorted(by_resource.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                                      kv[0][2])):
            entry = json.loads(encode_resource_acls(group))
            out.append({"resourceType": rt.kafka_name, "name": name, "patternType": pattern.name, **entry})
        data = json.dumps(out, indent=1).encode()
        write_atomically(self.path, data, mode=0o600)
        self.authorizer.update(bindings)
