"""``gregor groups assign GROUP``: steer a consumer-protocol group's assignment (pins, isolation,
freeze) through Kafka's group-config channel (IncrementalAlterConfigs on the GROUP resource, keys
gregor.assignment.*, see gregor.assignment.steering), sent to the group's coordinator, which
refuses a change that does not fit the group and reassigns the members otherwise.

``--dry-run`` asks the coordinator to validate the change only, and computes the target
assignment it would produce here with the same pure code the coordinator runs
(gregor.assignment), from what ConsumerGroupDescribe shows; ``--show`` prints the steering and
the group's target assignment, marking pinned, waiting and isolated partitions and members.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from gregor.admin import share_groups_cli
from gregor.admin.client import AdminClient, AdminError
from gregor.admin.output import add_action, emit
from gregor.assignment import assignors, steering
from gregor.assignment.share import ShareAssignor
from gregor.assignment.steering import APPEND, SET, SUBTRACT
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

GROUP_RESOURCE = 32


def add_parser(gs: Any) -> None:
    a = add_action(gs, "assign", "steer a consumer-protocol group's assignment: pin, isolate, freeze")
    a.add_argument("group")
    a.add_argument("--pin", action="append", default=[], metavar="TOPIC:PARTITION=MEMBER",
                   help="give the partition to MEMBER: a group.instance.id, a member id, or host:HOST")
    a.add_argument("--unpin", action="append", default=[], metavar="TOPIC:PARTITION")
    a.add_argument("--fallback", action="store_true",
                   help="the partitions pinned here go to other members while their member is away "
                        "(default: they wait, unassigned)")
    a.add_argument("--isolate", action="append", default=[], metavar="MEMBER",
                   help="keep MEMBER in the group with nothing assigned (quarantine)")
    a.add_argument("--release", action="append", default=[], metavar="MEMBER", help="undo --isolate")
    how = a.add_mutually_exclusive_group()
    how.add_argument("--freeze", action="store_true", help="change the assignment only for members that leave")
    how.add_argument("--unfreeze", action="store_true")
    a.add_argument("--show", action="store_true", help="print the steering and the target assignment")
    a.add_argument("--dry-run", action="store_true", help="validate and print the target it would produce")


def _entries(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []

    def add(key: str, op: int, items: list[str]) -> None:
        for item in items:
            if "," in item:
                raise AdminError(f"{item!r}: a member or pin must not contain a comma")
        if items:
            out.append({"name": key, "config_operation": op, "value": ",".join(items)})

    try:
        pins = [str(steering.Pin.parse(p + (steering.FALLBACK if args.fallback else ""))) for p in args.pin]
        for u in args.unpin:
            steering.Pin.parse(u + "=x")
        isolate = [str(steering.Selector.parse(m)) for m in args.isolate]
        release = [str(steering.Selector.parse(m)) for m in args.release]
    except steering.SteeringError as e:
        raise AdminError(str(e)) from None
    add(steering.PINS, APPEND, pins)
    add(steering.PINS, SUBTRACT, args.unpin)
    add(steering.ISOLATED, APPEND, isolate)
    add(steering.ISOLATED, SUBTRACT, release)
    if args.freeze or args.unfreeze:
        out.append({"name": steering.FROZEN, "config_operation": SET, "value": "true" if args.freeze else "false"})
    return out


def _alter(admin: AdminClient, group: str, entries: list[dict[str, Any]], validate_only: bool) -> None:
    r = admin.coordinator_conn(group).call(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
        "resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": entries}],
        "validate_only": validate_only})
    res = r.responses[0]
    if res.error_code:
        raise AdminError(f"{ErrorCode(res.error_code).name.upper()}: {res.error_message or ''}".rstrip(": "))


def current_steering(admin: AdminClient, group: str) -> dict[str, str]:
    r = admin.coordinator_conn(group).call(ApiKey.DESCRIBE_CONFIGS, {
        "resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    res = r.results[0]
    if res.error_code:
        raise AdminError(f"DescribeConfigs {group}: {ErrorCode(res.error_code).name.upper()}")
    return {c.name: c.value or "" for c in res.configs if c.name in steering.KEYS}


def _apply_locally(values: dict[str, str], entries: list[dict[str, Any]]) -> dict[str, str]:
    """The steering after ``entries``, as the broker applies them (for --dry-run)."""
    new = dict(values)
    for e in entries:
        new[e["name"]] = steering.apply_operation(new.get(e["name"], ""), e["name"], e["config_operation"], e["value"])
    return new


class _ShareMember:
    """A share group's member as the steering report reads a consumer group's: no instance id,
    and its target is what it holds (a share member takes its target at once)."""

    def __init__(self, m: Any) -> None:
        self.member_id, self.rack_id, self.client_host = m.member_id, m.rack_id, m.client_host
        self.subscribed_topic_names = m.subscribed_topic_names
        self.instance_id = None
        self.target_assignment = m.assignment


class _ShareGroup:
    def __init__(self, g: Any) -> None:
        self.members = [_ShareMember(m) for m in g.members]
        self.assignor_name = "simple"
        self.group_state = g.group_state


def _describe(admin: AdminClient, group: str) -> Any:
    share = share_groups_cli.describe_share_group(admin, group)
    if share is not None:
        return _ShareGroup(share)
    conn = admin.coordinator_conn(group)
    try:
        conn.version_for(ApiKey.CONSUMER_GROUP_DESCRIBE)
    except AdminError:
        raise AdminError("the broker does not serve the consumer group protocol (group.coordinator.rebalance."
                         "protocols) and only its groups can be steered") from None
    g = conn.call(ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False}
                  ).groups[0]
    if g.error_code:
        raise AdminError(f"{group} is not a consumer-protocol group: {ErrorCode(g.error_code).name.upper()}"
                         + (f" ({g.error_message})" if g.error_message else ""))
    return g


def target_of(admin: AdminClient, g: Any, values: dict[str, str]
              ) -> tuple[dict[str, list[str]], steering.Steered, dict[uuid.UUID, str]]:
    """The target assignment the coordinator computes for the group with steering ``values``:
    member id -> ["topic-partition", ...]; the steering applied; the names of the topics it
    involves (the subscribed and the pinned ones) by topic id."""
    wanted = steering.Steering.from_config(values)
    names = sorted({t for m in g.members for t in m.subscribed_topic_names}
                   | {p.topic for p in wanted.pins})
    md = admin.metadata(names)
    topics: dict[str, tuple[uuid.UUID, int]] = {t.name: (t.topic_id, len(t.partitions)) for t in md.topics
                                                if not t.error_code}
    by_id = {tid: name for name, (tid, _n) in topics.items()}
    specs, infos = {}, {}
    for m in g.members:
        subscribed = frozenset(topics[t][0] for t in m.subscribed_topic_names if t in topics)
        current = {tp.topic_id: frozenset(tp.partitions) for tp in m.target_assignment.topic_partitions}
        specs[m.member_id] = assignors.MemberSpec(m.member_id, m.instance_id, m.rack_id, subscribed, current)
        infos[m.member_id] = steering.MemberInfo(m.member_id, m.instance_id, m.client_host, specs[m.member_id])
    subscribed_topics = {n: v for n, v in topics.items() if any(n in m.subscribed_topic_names for m in g.members)}
    spec = assignors.GroupSpec(specs, {tid: n for tid, n in subscribed_topics.values()})
    steered = steering.steer(spec, infos, topics, wanted)
    assignor = ShareAssignor() if isinstance(g, _ShareGroup) else assignors.assignor(g.assignor_name or "uniform")
    result = assignor.assign(steered.spec)
    out = {mid: sorted(f"{by_id.get(t, t)}-{p}" for t, ps in a.items() for p in ps) for mid, a in result.items()}
    for m in g.members:
        out.setdefault(m.member_id, [])
    return out, steered, by_id


def _report(args: argparse.Namespace, admin: AdminClient, g: Any, values: dict[str, str], title: str) -> None:
    target, steered, md_names = target_of(admin, g, values)
    members = []
    for m in g.members:
        role = ("isolated" if m.member_id in steered.isolated else
                "held back (frozen)" if m.member_id in steered.held_back else "")
        pinned = sorted(f"{md_names.get(t, t)}-{p}" for (t, p), who in steered.pinned.items() if who == m.member_id)
        members.append({"member_id": m.member_id, "group_instance_id": m.instance_id, "host": m.client_host,
                        "target": target[m.member_id], "pinned": pinned, "steering": role or None})
    wanted = steering.Steering.from_config(values)
    data = {"group": args.group, "steering": {"pins": [str(p) for p in wanted.pins],
                                              "isolated": [str(s) for s in wanted.isolated],
                                              "frozen": wanted.frozen},
            "members": members, "notes": steered.notes}
    if args.json:
        emit(args, data, [])
        return
    print(f"{title} of group {args.group}: {len(wanted.pins)} pin(s), {len(wanted.isolated)} isolated, "
          f"{'frozen' if wanted.frozen else 'not frozen'}")
    for note in steered.notes:
        print(f"  {note}")
    print()
    emit(args, [{**m, "target": ",".join(m["target"]) or "-", "pinned": ",".join(m["pinned"]) or "-"}
                for m in members], ["member_id", "group_instance_id", "host", "target", "pinned", "steering"])


def assign(admin: AdminClient, args: argparse.Namespace) -> int:
    entries = _entries(args)
    g = _describe(admin, args.group)
    if not entries:
        _report(args, admin, g, current_steering(admin, args.group), "Steering")
        return 0
    _alter(admin, args.group, entries, validate_only=True)  # refused here if it does not fit the group
    if args.dry_run:
        proposed = _apply_locally(current_steering(admin, args.group), entries)
        _report(args, admin, g, proposed, "Dry run: the target assignment")
        return 0
    _alter(admin, args.group, entries, validate_only=False)
    if args.show or not args.json:
        _report(args, admin, g, current_steering(admin, args.group), "Steering applied; the target assignment")
    else:
        emit(args, {"group": args.group, "applied": [e["name"] for e in entries]}, [])
    print("members take the new assignment at their next heartbeat", file=sys.stderr)
    return 0
