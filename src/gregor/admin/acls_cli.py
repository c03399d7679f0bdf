"""``gregor acls``: list, add and remove ACLs, shaped like Kafka's kafka-acls.sh (AclCommand):
the same flags (``--add``, ``--remove``, ``--list``; ``--allow-principal``, ``--deny-principal``,
``--allow-host``, ``--deny-host``, ``--operation``; ``--topic``, ``--group``,
``--transactional-id``, ``--cluster``; ``--resource-pattern-type``; the ``--producer`` and
``--consumer`` conveniences; ``--principal`` to filter a listing; ``--force``) and the same
listing text, so that scripts written for kafka-acls.sh work with ``gregor acls`` in its place;
``--json`` for scripts. Exit codes: 0; 1 when the broker refuses (a message on stderr); 2 for
arguments that do not go together."""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from gregor.admin.client import AdminClient, AdminError
from gregor.admin.output import add_common_options, admin_client, emit
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    operation_named,
)


class UsageError(AdminError):
    pass


def add_parser(sub: Any) -> None:
    p = sub.add_parser("acls", help="list, add and remove ACLs (like kafka-acls.sh)")
    add_common_options(p)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--add", action="store_true", help="add the ACLs described")
    mode.add_argument("--remove", action="store_true", help="remove the ACLs matching")
    mode.add_argument("--list", action="store_true", help="list the ACLs (of the resources given, or all)")
    p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, All (repeatable)")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument("--resource-pattern-type", default=None, choices=["literal", "prefixed", "any", "match",
                                                                     "LITERAL", "PREFIXED", "ANY", "MATCH"])
    p.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE and CREATE on the topics "
                   "(and WRITE, DESCRIBE on the transactional ids; IDEMPOTENT_WRITE on the cluster with --idempotent)")
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--consumer", action="store_true", help="READ and DESCRIBE on the topics, READ on the groups")
    p.add_argument("--principal", action="append", default=[], help="--list only the ACLs of these principals")
    p.add_argument("--force", action="store_true", help="(accepted: gregor never asks for confirmation)")


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _ops_for(args: argparse.Namespace, rt: ResourceType) -> list[AclOperation]:
    if args.producer:
        if rt == ResourceType.TOPIC:
            return [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
        if rt == ResourceType.TRANSACTIONAL_ID:
            return [AclOperation.WRITE, AclOperation.DESCRIBE]
        if rt == ResourceType.CLUSTER and args.idempotent:
            return [AclOperation.IDEMPOTENT_WRITE]
        return []
    if args.consumer:
        if rt == ResourceType.TOPIC:
            return [AclOperation.READ, AclOperation.DESCRIBE]
        return [AclOperation.READ] if rt == ResourceType.GROUP else []
    try:
        return [operation_named(o) for o in args.operation] or [AclOperation.ALL]
    except ValueError as e:
        raise UsageError(str(e)) from None


def _bindings(args: argparse.Namespace) -> list[dict[str, Any]]:
    resources = _resources(args)
    if args.producer and args.idempotent:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if not resources:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not args.allow_principal and not args.deny_principal:
        raise UsageError("--allow-principal or --deny-principal is required")
    pattern = PatternType[(args.resource_pattern_type or "literal").upper()]
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("--add takes --resource-pattern-type literal or prefixed")
    out = []
    for rt, name in resources:
        for perm, principals, hosts in ((AclPermissionType.ALLOW, args.allow_principal, args.allow_host or ["*"]),
                                        (AclPermissionType.DENY, args.deny_principal, args.deny_host or ["*"])):
            for principal, host, op in itertools.product(principals, hosts, _ops_for(args, rt)):
                out.append({"resource_type": rt, "resource_name": name, "resource_pattern_type": pattern,
                            "principal": principal, "host": host, "operation": op, "permission_type": perm})
    return out


def _filters(args: argparse.Namespace) -> list[dict[str, Any]]:
    pattern = PatternType[(args.resource_pattern_type or ("literal" if args.remove else "any")).upper()]
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args)) or [(ResourceType.ANY, None)]
    principals: list[str | None] = (args.principal or args.allow_principal + args.deny_principal) or [None]
    out = []
    for (rt, name), principal in itertools.product(resources, principals):
        ops = [operation_named(o) for o in args.operation] if args.operation else [AclOperation.ANY]
        for op in ops:
            out.append({"resource_type_filter": rt, "resource_name_filter": name, "pattern_type_filter": pattern,
                        "principal_filter": principal, "host_filter": None, "operation": op,
                        "permission_type": AclPermissionType.ANY})
    return out


def _check(code: int, message: str | None, what: str) -> None:
    if code:
        raise AdminError(f"{what}: {ErrorCode(code).name.upper()}{': ' + message if message else ''}")


def run(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    try:
        if args.add:
            return add(admin, args)
        if args.remove:
            return remove(admin, args)
        return list_acls(admin, args)
    except UsageError as e:
        print(f"gregor acls: {e}")
        return 2
    finally:
        admin.close()


def add(admin: AdminClient, args: argparse.Namespace) -> int:
    creations = _bindings(args)
    resp = admin.bootstrap_call(ApiKey.CREATE_ACLS, {"creations": creations})
    for r in resp.results:
        _check(r.error_code, r.error_message, "CreateAcls")
    if not args.json:
        print(f"Adding ACLs for {len(creations)} binding(s).")
    return list_acls(admin, args, only=_resources(args))


def remove(admin: AdminClient, args: argparse.Namespace) -> int:
    resp = admin.bootstrap_call(ApiKey.DELETE_ACLS, {"filters": _filters(args)})
    removed = []
    for r in resp.filter_results:
        _check(r.error_code, r.error_message, "DeleteAcls")
        removed += [_row(m.resource_type, m.resource_name, m.pattern_type, m) for m in r.matching_acls]
    if args.json:
        emit(args, removed, [])
    else:
        print(f"Removed {len(removed)} ACL(s).")
    return 0


def _row(rt: int, name: str, pattern: int, a: Any) -> dict[str, Any]:
    return {"resource_type": ResourceType(rt).name, "resource_name": name, "pattern_type": PatternType(pattern).name,
            "principal": a.principal, "host": a.host, "operation": AclOperation(a.operation).name,
            "permission_type": AclPermissionType(a.permission_type).name}


def list_acls(admin: AdminClient, args: argparse.Namespace, only: list[tuple[ResourceType, str]] | None = None) -> int:
    """``--list`` (the filters of the options), or after ``--add`` the ACLs of the resources added."""
    if only is None:
        filters = _filters(args)
    else:
        pattern = PatternType[(args.resource_pattern_type or "literal").upper()]
        filters = [{"resource_type_filter": rt, "resource_name_filter": name, "pattern_type_filter": pattern,
                    "principal_filter": None, "host_filter": None, "operation": AclOperation.ANY,
                    "permission_type": AclPermissionType.ANY} for rt, name in only]
    rows: list[dict[str, Any]] = []
    for f in filters:
        resp = admin.bootstrap_call(ApiKey.DESCRIBE_ACLS, f)
        _check(resp.error_code, resp.error_message, "DescribeAcls")
        for res in resp.resources:
            rows += [_row(res.resource_type, res.resource_name, res.pattern_type, a) for a in res.acls]
    rows = [dict(t) for t in dict.fromkeys(tuple(r.items()) for r in rows)]
    if args.json:
        emit(args, rows, [])
        return 0
    by_resource: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by_resource.setdefault((r["resource_type"], r["resource_name"], r["pattern_type"]), []).append(r)
    for (rtype, rname, ptype), acls in sorted(by_resource.items()):
        print(f"Current ACLs for resource `ResourcePattern(resourceType={rtype}, name={rname}, patternType={ptype})`: ")
        for a in acls:
            print(f" \t(principal={a['principal']}, host={a['host']}, operation={a['operation']}, "
                  f"permissionType={a['permission_type']}) ")
        print()
    return 0
