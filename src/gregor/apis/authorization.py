"""Authorization of requests, as Kafka's KafkaApis asks its authorizer (docs/security.md has the
table of which API needs which operation on which resource). With no ``authorizer.class.name``
everything is allowed and nothing is computed on the hot paths."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any, TypeVar

from gregor.apis.handler import RequestContext
from gregor.security.acl import CLUSTER_NAME, OPERATIONS, AclOperation, ResourceType

T = TypeVar("T")
Op = AclOperation
TOPIC, GROUP, CLUSTER, TXN_ID = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                  ResourceType.TRANSACTIONAL_ID)


def _store(ctx: RequestContext) -> Any:
    return getattr(ctx.services, "acls", None)  # tests may give a bare namespace of services


def enabled(ctx: RequestContext) -> bool:
    return _store(ctx) is not None


def host_of(ctx: RequestContext) -> str:
    """The client's address as Kafka's ACLs name it (Java's getHostAddress: an IPv6 address in
    full, without leading zeros, ``0:0:0:0:0:0:0:1``)."""
    host = ctx.client_host
    if ":" in host:
        try:
            return ":".join(f"{int(g, 16):x}" for g in ipaddress.IPv6Address(host.strip("[]")).exploded.split(":"))
        except ValueError:
            return host
    return host


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
    store = _store(ctx)
    if store is None:
        return True
    return store.authorizer.authorize(str(ctx.principal), host_of(ctx), operation, resource_type, name)


def cluster_allowed(ctx: RequestContext, operation: AclOperation) -> bool:
    return allowed(ctx, operation, CLUSTER, CLUSTER_NAME)


def allowed_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
    """The names of ``names`` the request's principal may ``operation``."""
    store = _store(ctx)
    if store is None:
        return set(names)
    principal, host, authorize = str(ctx.principal), host_of(ctx), store.authorizer.authorize
    return {n for n in names if authorize(principal, host, operation, resource_type, n)}


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorized-operations bit field for the resource (every operation of its type when
    no authorizer is configured). The cluster's is 0 without DESCRIBE on it (Kafka's
    DescribeCluster and Metadata v8-v10)."""
    store = _store(ctx)
    if store is not None and resource_type == CLUSTER and not allowed(ctx, Op.DESCRIBE, CLUSTER, name):
        return 0
    if store is None:
        bits = 0
        for op in OPERATIONS.get(resource_type, ()):
            bits |= 1 << op
        return bits
    return store.authorizer.authorized_operations(str(ctx.principal), host_of(ctx), resource_type, name)


def is_follower(req: Any) -> bool:
    """A Fetch or OffsetsForLeaderEpoch from a replica (replica id >= 0) rather than a consumer."""
    replica = getattr(req, "replica_id", -1)
    state = getattr(req, "replica_state", None)
    if state is not None and getattr(state, "replica_id", -1) >= 0:
        return True
    return replica is not None and replica >= 0


# -- requests about one resource ---------------------------------------------------------------
# Kafka's checks of APIs that name a single group, transactional id or the cluster: refused, the
# request is answered with the error alone (its top-level error code) by the dispatcher, before
# the handler runs. (api key -> [(operation, resource type, the request field naming it or None
# for the cluster)]; every check must pass.)
GATES: dict[int, list[tuple[AclOperation, ResourceType, str | None]]] = {
    11: [(Op.READ, GROUP, "group_id")],  # JoinGroup
    14: [(Op.READ, GROUP, "group_id")],  # SyncGroup
    12: [(Op.READ, GROUP, "group_id")],  # Heartbeat
    13: [(Op.READ, GROUP, "group_id")],  # LeaveGroup
    68: [(Op.READ, GROUP, "group_id")],  # ConsumerGroupHeartbeat
    76: [(Op.READ, GROUP, "group_id")],  # ShareGroupHeartbeat
    78: [(Op.READ, GROUP, "group_id")],  # ShareFetch (and READ on each topic, in the handler)
    79: [(Op.READ, GROUP, "group_id")],  # ShareAcknowledge
    47: [(Op.DELETE, GROUP, "group_id")],  # OffsetDelete (and READ on each topic, in the handler)
    25: [(Op.WRITE, TXN_ID, "transactional_id"), (Op.READ, GROUP, "group_id")],  # AddOffsetsToTxn
    26: [(Op.WRITE, TXN_ID, "transactional_id")],  # EndTxn
    7: [(Op.CLUSTER_ACTION, CLUSTER, None)],  # ControlledShutdown
}
_REFUSED = {GROUP: "group_authorization_failed", TXN_ID: "transactional_id_authorization_failed",
            CLUSTER: "cluster_authorization_failed", TOPIC: "topic_authorization_failed"}


def gate(ctx: RequestContext, api_key: int, request: Any) -> str | None:
    """The error (an ErrorCode member's name) a request of a GATES API is refused with, or None."""
    checks = GATES.get(api_key)
    if checks is None or _store(ctx) is None:
        return None
    for operation, resource_type, field in checks:
        name = CLUSTER_NAME if field is None else getattr(request, field, None)
        if name is None or not allowed(ctx, operation, resource_type, name):
            return _REFUSED[resource_type]
    return None


def commit_refusal(ctx: RequestContext, group_id: str, topics: Iterable[str], transactional_id: str | None = None,
                   group_operation: AclOperation = AclOperation.READ) -> tuple[str | None, set[str]]:
    """OffsetCommit, TxnOffsetCommit, OffsetDelete: (the error every partition gets: WRITE on
    the transactional id, then ``group_operation`` on the group, else None; the topics the
    principal may not READ, whose partitions get TOPIC_AUTHORIZATION_FAILED)."""
    if _store(ctx) is None:
        return None, set()
    if transactional_id is not None and not allowed(ctx, Op.WRITE, TXN_ID, transactional_id):
        return "transactional_id_authorization_failed", set()
    if not allowed(ctx, group_operation, GROUP, group_id):
        return "group_authorization_failed", set()
    names = set(topics)
    return None, names - allowed_names(ctx, Op.READ, TOPIC, names)


def denied_topics(ctx: RequestContext, operation: AclOperation, names: Iterable[str]) -> set[str]:
    """The topics of ``names`` the principal may not ``operation`` (empty without an authorizer)."""
    if _store(ctx) is None:
        return set()
    wanted = set(names)
    return wanted - allowed_names(ctx, operation, TOPIC, wanted)


TOPIC_REFUSED = "Topic authorization failed."


def config_refusal(ctx: RequestContext, operation: AclOperation, config_type: int, name: str) -> str | None:
    """DescribeConfigs (DESCRIBE_CONFIGS), AlterConfigs and IncrementalAlterConfigs
    (ALTER_CONFIGS; steering a group is altering its configs) on a config resource: TOPIC (2) is
    the topic, BROKER (4) and BROKER_LOGGER (8) the cluster, GROUP (32) the group. The refusal's
    error name, or None."""
    if _store(ctx) is None:
        return None
    if config_type == 2:
        return None if allowed(ctx, operation, TOPIC, name) else "topic_authorization_failed"
    if config_type == 32:
        return None if allowed(ctx, operation, GROUP, name) else "group_authorization_failed"
    return None if cluster_allowed(ctx, operation) else "cluster_authorization_failed"
