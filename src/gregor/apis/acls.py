"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as Kafka's: CLUSTER DESCRIBE to describe,
CLUSTER ALTER to create or delete; SECURITY_DISABLED when no authorizer is configured; an invalid
ACL is INVALID_REQUEST with the reason, each creation and filter answered on its own. The ACLs
are kept by the store of the assembly (a file on one node, ZooKeeper in a cluster: every broker
enforces a change within moments)."""

from __future__ import annotations

import logging
from typing import Any

from gregor.apis.authorization import Op, cluster_allowed
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

log = logging.getLogger(__name__)

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _enum(cls: Any, value: int) -> Any:
    try:
        return cls(value)
    except ValueError:
        return cls.UNKNOWN


def _filter(f: Any) -> AclBindingFilter | str:
    """A request's filter, or why it is invalid."""
    rt, pt = _enum(ResourceType, f.resource_type_filter), _enum(PatternType, f.pattern_type_filter)
    op, perm = _enum(AclOperation, f.operation), _enum(AclPermissionType, f.permission_type)
    if ResourceType.UNKNOWN in (rt,) or pt == PatternType.UNKNOWN or op == AclOperation.UNKNOWN \
            or perm == AclPermissionType.UNKNOWN:
        return "the filter has an unknown resource type, pattern type, operation or permission type"
    return AclBindingFilter(rt, f.resource_name_filter, pt, f.principal_filter, f.host_filter, op, perm)


def _describe_resources(bindings: list[AclBinding]) -> list[dict[str, Any]]:
    by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for b in bindings:
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    return [{"resource_type": rt, "resource_name": name, "pattern_type": pt,
             "acls": [{"principal": b.principal, "host": b.host, "operation": b.operation,
                       "permission_type": b.permission} for b in sorted(group, key=_order)]}
            for (rt, name, pt), group in sorted(by_resource.items())]


def _order(b: AclBinding) -> tuple[Any, ...]:
    return b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation, b.permission


@handles(ApiKey.DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx: RequestContext, req: Any) -> dict[str, Any]:
    store = getattr(ctx.services, "acls", None)
    if store is None:
        return {"throttle_time": 0, "error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER,
                "resources": []}
    if not cluster_allowed(ctx, Op.DESCRIBE):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "error_message": "Cluster authorization failed", "resources": []}
    f = _filter(req)
    if isinstance(f, str):
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "error_message": f, "resources": []}
    matched = [b for b in store.authorizer.bindings if f.matches(b)]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
            "resources": _describe_resources(matched)}


@handles(ApiKey.CREATE_ACLS, 1, 3)
async def create_acls(ctx: RequestContext, req: Any) -> dict[str, Any]:
    store = getattr(ctx.services, "acls", None)
    if store is None:
        return {"throttle_time": 0, "results": [{"error_code": ErrorCode.security_disabled,
                                                 "error_message": NO_AUTHORIZER} for _ in req.creations]}
    if not cluster_allowed(ctx, Op.ALTER):
        return {"throttle_time": 0, "results": [{"error_code": ErrorCode.cluster_authorization_failed,
                                                 "error_message": "Cluster authorization failed"}
                                                for _ in req.creations]}
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for c in req.creations:
        b = AclBinding(_enum(ResourceType, c.resource_type), c.resource_name or "",
                       _enum(PatternType, c.resource_pattern_type), c.principal or "", c.host or "",
                       _enum(AclOperation, c.operation), _enum(AclPermissionType, c.permission_type))
        reason = b.invalid()
        refusal = getattr(store, "refusal", None)
        if reason is None and refusal is not None:
            reason = refusal(b)
        if reason is not None:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": reason})
        else:
            valid.append(b)
            results.append({"error_code": ErrorCode.none, "error_message": None})
    if valid:
        try:
            await store.add(valid)
        except OSError as e:
            log.error("cannot store ACLs: %s", e)
            for r in results:
                if r["error_code"] == ErrorCode.none:
                    r.update(error_code=ErrorCode.unknown_server_error, error_message=f"cannot store the ACLs: {e}")
        else:
            log.info("ACLs created by %s: %s", ctx.principal, ", ".join(_text(b) for b in valid))
    return {"throttle_time": 0, "results": results}


@handles(ApiKey.DELETE_ACLS, 1, 3)
async def delete_acls(ctx: RequestContext, req: Any) -> dict[str, Any]:
    store = getattr(ctx.services, "acls", None)
    if store is None:
        return {"throttle_time": 0, "filter_results": [
            {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER, "matching_acls": []}
            for _ in req.filters]}
    if not cluster_allowed(ctx, Op.ALTER):
        return {"throttle_time": 0, "filter_results": [
            {"error_code": ErrorCode.cluster_authorization_failed, "error_message": "Cluster authorization failed",
             "matching_acls": []} for _ in req.filters]}
    results: list[dict[str, Any]] = []
    doomed: set[AclBinding] = set()
    current = store.authorizer.bindings
    for raw in req.filters:
        f = _filter(raw)
        if isinstance(f, str):
            results.append({"error_code": ErrorCode.invalid_request, "error_message": f, "matching_acls": []})
            continue
        matched = sorted((b for b in current if f.matches(b)), key=_order)
        doomed.update(matched)
        results.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.none, "error_message": None, "resource_type": b.resource_type,
             "resource_name": b.name, "pattern_type": b.pattern_type, "principal": b.principal, "host": b.host,
             "operation": b.operation, "permission_type": b.permission} for b in matched]})
    if doomed:
        try:
            await store.remove(doomed)
        except OSError as e:
            log.error("cannot delete ACLs: %s", e)
            for r in results:
                if r["error_code"] == ErrorCode.none:
                    r.update(error_code=ErrorCode.unknown_server_error, error_message=f"cannot store the ACLs: {e}",
                             matching_acls=[])
        else:
            log.info("ACLs deleted by %s: %s", ctx.principal, ", ".join(_text(b) for b in sorted(doomed, key=_order)))
    return {"throttle_time": 0, "filter_results": results}


def _text(b: AclBinding) -> str:
    return (f"({b.permission.kafka_name} {b.principal} {b.operation.kafka_name} from {b.host} on "
            f"{b.resource_type.kafka_name}:{b.pattern_type.name}:{b.name})")
