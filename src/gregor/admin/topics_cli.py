"""``gregor topics``: list, describe, create, delete. Shaped like kafka-topics.sh."""

from __future__ import annotations

import argparse
from typing import Any

from gregor.admin.client import AdminClient, AdminError
from gregor.admin.output import add_action, add_common_options, admin_client, emit
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


def add_parser(sub: Any) -> None:
    p = sub.add_parser("topics", help="topics (like kafka-topics.sh)")
    add_common_options(p)
    ts = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = add_action(ts, "list", "topic names")
    ls.add_argument("--exclude-internal", action="store_true")
    d = add_action(ts, "describe", "partitions, leaders, offsets and configs")
    d.add_argument("topic", nargs="?")
    c = add_action(ts, "create", "create a topic")
    c.add_argument("topic")
    c.add_argument("--partitions", type=int, default=-1)
    c.add_argument("--replication-factor", type=int, default=-1)
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    dl = add_action(ts, "delete", "delete a topic")
    dl.add_argument("topic")


def run(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    try:
        return {"list": list_topics, "describe": describe, "create": create, "delete": delete}[args.action](admin, args)
    finally:
        admin.close()


def list_topics(admin: AdminClient, args: argparse.Namespace) -> int:
    md = admin.metadata()
    names = sorted(t.name for t in md.topics if not (args.exclude_internal and t.is_internal))
    if args.json:
        emit(args, names, [])
    else:
        for n in names:
            print(n)
    return 0


def describe(admin: AdminClient, args: argparse.Namespace) -> int:
    md = admin.metadata([args.topic] if args.topic else None)
    out = []
    for t in sorted(md.topics, key=lambda t: t.name):
        if t.error_code:
            raise AdminError(f"topic {t.name!r}: {ErrorCode(t.error_code).name.upper()}")
        tps = [(t.name, p.partition_index) for p in t.partitions]
        start, end = admin.list_offsets(tps, -2), admin.list_offsets(tps, -1)
        try:
            configs = admin.conn().call(ApiKey.DESCRIBE_CONFIGS, {
                "resources": [{"resource_type": 2, "resource_name": t.name, "configuration_keys": None}],
                "include_synonyms": False, "include_documentation": False}).results[0].configs
        except AdminError:
            configs = ()  # a cluster without DescribeConfigs (e.g. librdkafka's mock): no overrides shown
        out.append({
            "topic": t.name, "topic_id": str(getattr(t, "topic_id", "")), "partitions": len(t.partitions),
            "internal": t.is_internal,
            "configs": {c.name: c.value for c in configs if c.config_source == 1},
            "partition_details": [{"partition": p.partition_index, "leader": p.leader_id,
                                   "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes),
                                   "log_start_offset": _known(start[(t.name, p.partition_index)]),
                                   "log_end_offset": _known(end[(t.name, p.partition_index)])}
                                  for p in sorted(t.partitions, key=lambda p: p.partition_index)],
        })
    if args.json:
        emit(args, out, [])
        return 0
    for t in out:
        cfg = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
        print(f"Topic: {t['topic']}\tTopicId: {t['topic_id']}\tPartitionCount: {t['partitions']}\t"
              f"Internal: {str(t['internal']).lower()}\tConfigs: {cfg}")
        emit(args, t["partition_details"], ["partition", "leader", "replicas", "isr", "log_start_offset",
                                            "log_end_offset"])
        print()
    return 0


def _known(offset: int) -> int | None:
    """None (shown as -) for an offset the partition's leader did not give (see list_offsets)."""
    return offset if offset >= 0 else None


def create(admin: AdminClient, args: argparse.Namespace) -> int:
    configs = []
    for item in args.config:
        if "=" not in item:
            raise AdminError(f"--config {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        configs.append({"name": k, "value": v})
    r = admin.conn().call(ApiKey.CREATE_TOPICS, {
        "topics": [{"name": args.topic, "num_partitions": args.partitions,
                    "replication_factor": args.replication_factor, "assignments": [], "configs": configs}],
        "timeout": 30000, "validate_only": False})
    t = r.topics[0]
    if t.error_code:
        raise AdminError(f"cannot create {args.topic!r}: {ErrorCode(t.error_code).name.upper()}"
                         + (f": {t.error_message}" if t.error_message else ""))
    emit(args, [{"topic": args.topic, "result": "created"}], ["topic", "result"])
    return 0


def delete(admin: AdminClient, args: argparse.Namespace) -> int:
    r = admin.conn().call(ApiKey.DELETE_TOPICS, {"topic_names": [args.topic], "topics": [{"name": args.topic}],
                                                 "timeout": 30000})
    res = r.responses[0]
    if res.error_code:
        raise AdminError(f"cannot delete {args.topic!r}: {ErrorCode(res.error_code).name.upper()}"
                         + (f": {res.error_message}" if getattr(res, "error_message", None) else ""))
    emit(args, [{"topic": args.topic, "result": "deleted"}], ["topic", "result"])
    return 0
