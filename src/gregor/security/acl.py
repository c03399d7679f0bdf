"""Kafka's access control lists and its authorizer's decision (AclAuthorizer, StandardAuthorizer),
pure: no storage, no network (docs/security.md).

An ACL (``AclBinding``) allows or denies a principal (``User:alice``, or ``User:*``) from a host
(an address, or ``*``) an operation on resources: a literal name (or ``*``, every resource of the
type) or a prefix. A request is allowed when:

1. its principal is a super user (``super.users``), or
2. no DENY ACL matches it (the operation itself or ALL), and an ALLOW ACL does (the operation, ALL,
   or one that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
   DESCRIBE_CONFIGS), or
3. no ACL at all names the resource and ``allow.everyone.if.no.acl.found`` is true.

Codes and names are Kafka's (the wire's numbers; the names ZooKeeper and kafka-acls.sh use)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def kafka_name(self) -> str:  # as in ZooKeeper paths and kafka-acls.sh output
        return {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId", 6: "DelegationToken",
                7: "User"}.get(self.value, self.name.title())


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15

    @property
    def kafka_name(self) -> str:  # Read, ClusterAction, DescribeConfigs ...
        return "".join(p.title() for p in self.name.split("_"))


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def kafka_name(self) -> str:
        return self.name.title()


def operation_named(name: str) -> AclOperation:
    key = name.replace("-", "").replace("_", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key:
            return op
    raise ValueError(f"unknown operation {name!r}")


def resource_type_named(name: str) -> ResourceType:
    key = name.replace("-", "").replace("_", "").lower()
    for rt in ResourceType:
        if rt.name.replace("_", "").lower() == key or rt.kafka_name.lower() == key:
            return rt
    raise ValueError(f"unknown resource type {name!r}")


# the operations each resource type has (Kafka's ResourceType/AclOperation table), which
# authorized-operations fields report on
OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
                         AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str  # "User:alice" or "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission: AclPermissionType  # ALLOW or DENY

    def invalid(self) -> str | None:
        """Why Kafka refuses to create it (None: valid)."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return "the resource type must be a specific one"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "the pattern type must be LITERAL or PREFIXED"
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return "the operation must be a specific one"
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return "the permission type must be ALLOW or DENY"
        if not self.name:
            return "the resource name must not be empty"
        if ":" not in self.principal or not self.principal.split(":", 1)[1]:
            return f"principal {self.principal!r} is not <type>:<name>"
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME}"
        if self.resource_type == ResourceType.CLUSTER and self.pattern_type != PatternType.LITERAL:
            return "the cluster resource only takes LITERAL ACLs"
        if not self.host:
            return "the host must not be empty (use * for any host)"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls and DeleteAcls filters: None/ANY match anything; pattern type MATCH matches
    every ACL that applies to ``name`` (literal equal or ``*``, prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is not None and not _applies(b, self.name):
                return False
        elif self.pattern_type != PatternType.ANY:
            if b.pattern_type != self.pattern_type or (self.name is not None and b.name != self.name):
                return False
        elif self.name is not None and b.name != self.name:
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation != AclOperation.ANY and b.operation != self.operation:
            return False
        return self.permission == AclPermissionType.ANY or b.permission == self.permission


def _applies(b: AclBinding, name: str) -> bool:
    if b.pattern_type == PatternType.LITERAL:
        return b.name == name or b.name == WILDCARD
    return b.pattern_type == PatternType.PREFIXED and name.startswith(b.name)


class Authorizer:
    """The decision over a set of ACLs (replaced as a whole when they change: ``update``)."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.bindings: frozenset[AclBinding] = frozenset()
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}

    def update(self, bindings: Iterable[AclBinding]) -> None:
        self.bindings = frozenset(bindings)
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[ResourceType, list[AclBinding]] = {}
        for b in self.bindings:
            if b.pattern_type == PatternType.LITERAL:
                literal.setdefault((b.resource_type, b.name), []).append(b)
            else:
                prefixed.setdefault(b.resource_type, []).append(b)
        self._literal, self._prefixed = literal, prefixed

    def _matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        out = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out += self._literal.get((resource_type, WILDCARD), ())
        out += [b for b in self._prefixed.get(resource_type, ()) if name.startswith(b.name)]
        return out

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self._matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        mine = [b for b in acls if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)]
        if any(b.permission == AclPermissionType.DENY and b.operation in (operation, AclOperation.ALL)
               for b in mine):
            return False
        allowed = _IMPLIED_BY.get(operation, frozenset({operation}))
        return any(b.permission == AclPermissionType.ALLOW
                   and (b.operation == AclOperation.ALL or b.operation in allowed) for b in mine)

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType (Authorizer's default method): allowed on some resource
        of the type. Super users and ``allow.everyone.if.no.acl.found`` through a hard-coded name
        first; a literal ``*`` DENY refuses, a literal ``*`` ALLOW allows; otherwise some ALLOWed
        literal or prefix that no DENY of the same literal, nor a DENY prefix of it, dominates."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allowed: list[tuple[PatternType, str]] = []
        for b in self.bindings:
            if b.resource_type != resource_type or b.host not in (host, WILDCARD) \
                    or b.principal not in (principal, WILDCARD_PRINCIPAL) \
                    or b.operation not in (operation, AclOperation.ALL):
                continue
            if b.permission == AclPermissionType.DENY:
                if b.pattern_type == PatternType.LITERAL:
                    if b.name == WILDCARD:
                        return False
                    deny_literal.add(b.name)
                else:
                    deny_prefixed.add(b.name)
            elif b.permission == AclPermissionType.ALLOW:
                if b.pattern_type == PatternType.LITERAL and b.name == WILDCARD:
                    return True
                allowed.append((b.pattern_type, b.name))
        for pattern, name in allowed:
            if pattern == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field: bit n for operation code n the principal may
        perform on the resource."""
        bits = 0
        for op in OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:broker``)."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())
