"""``gregor groups``: list, describe (members, assignment, committed offsets, lag), reset-offsets,
delete, delete-offsets, coordinator. Shaped like kafka-consumer-groups.sh; tables by default,
``--json`` for scripts."""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from gregor.admin import share_groups_cli, steering_cli
from gregor.admin.client import AdminClient, AdminError
from gregor.admin.offset_targets import reset_targets
from gregor.admin.output import add_action, add_common_options, admin_client, emit
from gregor.assignment import steering
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, java_string_hashcode, kafka_abs
from gregor.protocol.consumer_protocol import decode_assignment
from gregor.protocol.errors import ErrorCode


def add_parser(sub: Any) -> None:
    p = sub.add_parser("groups", help="consumer groups (like kafka-consumer-groups.sh)")
    add_common_options(p)
    gs = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_action(gs, "list", "every group with its state")
    d = add_action(gs, "describe", "members, assignment, committed offsets and lag")
    d.add_argument("group")
    r = add_action(gs, "reset-offsets", "move committed offsets (group must be inactive)")
    r.add_argument("group")
    r.add_argument("--topic", required=True, action="append", help="topic or topic:0,1,2")
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:MM:SS[.mmm][+HH:MM]")
    how.add_argument("--to-offset", type=int)
    how.add_argument("--shift-by", type=int)
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    dl = add_action(gs, "delete", "delete an inactive group and its offsets")
    dl.add_argument("group")
    do = add_action(gs, "delete-offsets", "delete a group's offsets for a topic")
    do.add_argument("group")
    do.add_argument("--topic", required=True, action="append", help="topic or topic:0,1,2")
    c = add_action(gs, "coordinator", "where a group lives and whether it is served")
    c.add_argument("group")
    steering_cli.add_parser(gs)


def run(args: argparse.Namespace) -> int:
    admin = admin_client(args)
    try:
        return {"list": list_groups, "describe": describe, "reset-offsets": reset_offsets, "delete": delete,
                "delete-offsets": delete_offsets, "coordinator": coordinator,
                "assign": steering_cli.assign}[args.action](admin, args)
    finally:
        admin.close()


def list_groups(admin: AdminClient, args: argparse.Namespace) -> int:
    """Every broker lists the groups it coordinates. A broker that does not answer (in a cluster,
    one that just died is still listed until its registration expires) is named on stderr, the
    others' groups are listed, and the exit code is 1: the list is incomplete."""
    rows = []
    silent = []
    for node in admin.nodes().values():
        try:
            r = admin.conn(node).call(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
        except AdminError as e:
            silent.append(f"broker {node.node_id} ({node.host}:{node.port}): {e}")
            continue
        for g in r.groups:
            rows.append({"group": g.group_id, "type": getattr(g, "group_type", "classic") or "classic",
                         "state": getattr(g, "group_state", ""), "protocol_type": g.protocol_type,
                         "coordinator": node.node_id})
    rows.sort(key=lambda r: r["group"])
    emit(args, rows, ["group", "type", "state", "protocol_type", "coordinator"])
    for why in silent:
        print(f"gregor groups: the groups of {why} are not listed", file=sys.stderr)
    return 1 if silent else 0


def _describe_group(admin: AdminClient, group: str) -> Any:
    r = admin.coordinator_conn(group).call(ApiKey.DESCRIBE_GROUPS, {"groups": [group],
                                                                    "include_authorized_operations": False})
    g = r.groups[0]
    if g.error_code:
        raise AdminError(f"DescribeGroups {group}: {ErrorCode(g.error_code).name.upper()}")
    return g


def _describe_consumer_group(admin: AdminClient, group: str) -> Any | None:
    """The group as ConsumerGroupDescribe (KIP-848) shows it; None if it is not a consumer-protocol
    group (or the broker does not serve that protocol)."""
    conn = admin.coordinator_conn(group)
    try:
        conn.version_for(ApiKey.CONSUMER_GROUP_DESCRIBE)
    except AdminError:
        return None
    g = conn.call(ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": [group],
                                                   "include_authorized_operations": False}).groups[0]
    if g.error_code == ErrorCode.group_id_not_found:
        return None
    if g.error_code:
        raise AdminError(f"ConsumerGroupDescribe {group}: {ErrorCode(g.error_code).name.upper()}"
                         + (f" ({g.error_message})" if g.error_message else ""))
    return g


def _partitions(assignment: Any) -> list[tuple[str, int]]:
    return [(t.topic_name, p) for t in assignment.topic_partitions for p in sorted(t.partitions)]


def committed_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    r = admin.coordinator_conn(group).call(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None,
                                                                 "require_stable": False})
    if getattr(r, "error_code", 0):
        raise AdminError(f"OffsetFetch {group}: {ErrorCode(r.error_code).name.upper()}")
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata or "")
            for t in r.topics for p in t.partitions if p.committed_offset >= 0}


def coordinator_status_of(admin: AdminClient, group: str) -> dict[str, str]:
    """Gregor's read-only group status entries (phase, who holds the group up), from DescribeConfigs
    on the group's coordinator; empty from a broker that does not give them."""
    try:
        r = admin.coordinator_conn(group).call(ApiKey.DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": 32, "resource_name": group,
                           "configuration_keys": ["gregor.status.phase", "gregor.status.holding"]}],
            "include_synonyms": False, "include_documentation": False})
    except AdminError:
        return {}
    res = r.results[0]
    return {} if res.error_code else {c.name: c.value or "" for c in res.configs}


def offset_rows(admin: AdminClient, group: str, owners: dict[tuple[str, int], Any]) -> list[dict[str, Any]]:
    """Per partition committed or owned: committed offset, log end, lag, and the member owning it."""
    committed = committed_offsets(admin, group)
    tps = sorted(set(committed) | set(owners))
    ends = admin.list_offsets(tps, -1) if tps else {}
    rows = []
    for tp in tps:
        off = committed.get(tp, (-1, ""))[0]
        end = ends.get(tp, -1)
        owner = owners.get(tp)
        rows.append({"group": group, "topic": tp[0], "partition": tp[1],
                     "current_offset": off if off >= 0 else None, "log_end_offset": end if end >= 0 else None,
                     "lag": end - off if off >= 0 and end >= 0 else None,
                     "consumer_id": owner.member_id if owner else None, "host": owner.client_host if owner else None,
                     "client_id": owner.client_id if owner else None})
    return rows


def describe_consumer_group(admin: AdminClient, args: argparse.Namespace, g: Any) -> int:
    """A consumer-protocol group: members with their epochs, current and target assignments, and
    what is still to be revoked (the member holds it, its target does not) or assigned."""
    owners: dict[tuple[str, int], Any] = {}
    members = []
    for m in g.members:
        current, target = _partitions(m.assignment), _partitions(m.target_assignment)
        for tp in current:
            owners[tp] = m
        members.append({"member_id": m.member_id, "group_instance_id": m.instance_id, "member_epoch": m.member_epoch,
                         "client_id": m.client_id, "host": m.client_host,
                         "assignment": [f"{t}-{p}" for t, p in current],
                         "target": [f"{t}-{p}" for t, p in target],
                         "to_revoke": [f"{t}-{p}" for t, p in current if (t, p) not in set(target)],
                         "to_assign": [f"{t}-{p}" for t, p in target if (t, p) not in set(current)],
                         "subscribed_topics": list(m.subscribed_topic_names),
                         "protocol": "classic" if getattr(m, "member_type", 1) == 0 else "consumer"})
    closing = [f"{m['member_id']} ({m['client_id']}) must revoke {','.join(m['to_revoke'])}"
               for m in members if m["to_revoke"]]
    starting = [f"{m['member_id']} ({m['client_id']}) is to get {','.join(m['to_assign'])}"
                for m in members if m["to_assign"]]
    phase = "Closing" if closing else "Starting" if starting else g.group_state
    status = coordinator_status_of(admin, args.group)  # the coordinator knows who still holds what
    if status.get("gregor.status.phase"):
        phase = status["gregor.status.phase"]
        closing, starting = [h for h in status.get("gregor.status.holding", "").split("; ") if h], []
    rows = offset_rows(admin, args.group, owners)
    steered = steering_of(admin, args.group, g)
    for m in members:
        m["pinned"] = steered["pinned"].get(m["member_id"], [])
        m["steering"] = steered["roles"].get(m["member_id"])
    if args.json:
        emit(args, {"group": args.group, "type": "consumer", "state": g.group_state, "phase": phase,
                    "holding_up": closing or starting, "group_epoch": g.group_epoch,
                    "assignment_epoch": g.assignment_epoch, "assignor": g.assignor_name,
                    "steering": steered["summary"], "members": members, "offsets": rows}, [])
        return 0
    print(f"Group {args.group} is {g.group_state} (consumer protocol, {len(g.members)} members, group epoch "
          f"{g.group_epoch}, assignment epoch {g.assignment_epoch}, assignor {g.assignor_name})")
    print(f"Phase: {phase}" + "".join(f"\n  {line}" for line in closing or starting))
    print(steering_line(steered["summary"]) + "\n")
    emit(args, rows, ["group", "topic", "partition", "current_offset", "log_end_offset", "lag", "consumer_id",
                      "host", "client_id"])
    if members:
        print()
        emit(args, [{**m, **{k: ",".join(m[k]) or "-" for k in ("assignment", "target", "to_revoke", "to_assign",
                                                                 "pinned")}, "steering": m["steering"] or "-"}
                    for m in members],
             ["member_id", "group_instance_id", "member_epoch", "protocol", "client_id", "host", "assignment",
              "to_revoke", "to_assign", "pinned", "steering"])
    return 0


def steering_of(admin: AdminClient, group: str, g: Any) -> dict[str, Any]:
    """The operator steering of a consumer-protocol group as its coordinator applies it: the
    group's pins, isolated members and freeze (gregor.assignment.*), each pin with whom it
    holds, waits for or fell back from, and each member's pinned partitions and role."""
    values = steering_cli.current_steering(admin, group)
    wanted = steering.Steering.from_config(values)
    summary: dict[str, Any] = {"pins": [], "isolated": [str(s) for s in wanted.isolated], "frozen": wanted.frozen,
                               "notes": []}
    out: dict[str, Any] = {"summary": summary, "pinned": {}, "roles": {}}
    if not (wanted.pins or wanted.isolated or wanted.frozen):
        return out
    _, steered, names = steering_cli.target_of(admin, g, values)
    by_partition = {(names.get(t, str(t)), p): (who, "pinned") for (t, p), who in steered.pinned.items()}
    by_partition.update({(names.get(t, str(t)), p): (why, "waiting") for (t, p), why in steered.waiting.items()})
    by_partition.update({(names.get(t, str(t)), p): (who, "fell back")
                         for (t, p), who in steered.fell_back.items()})
    for pin in wanted.pins:
        held = by_partition.get((pin.topic, pin.partition))
        summary["pins"].append({"pin": str(pin), "partition": f"{pin.topic}-{pin.partition}",
                                "member": held[0] if held and held[1] == "pinned" else None,
                                "state": held[1] if held else "ignored",
                                "reason": held[0] if held and held[1] != "pinned" else None})
    for (t, p), who in sorted(steered.pinned.items(), key=lambda i: (names.get(i[0][0], ""), i[0][1])):
        out["pinned"].setdefault(who, []).append(f"{names.get(t, t)}-{p}")
    for mid in steered.isolated:
        out["roles"][mid] = "isolated"
    for mid in steered.held_back:
        out["roles"][mid] = "held back (frozen)"
    summary["notes"] = list(steered.notes)
    return out


def steering_line(summary: dict[str, Any]) -> str:
    """One line (and a line per pin) of a group's steering, for the describe table."""
    if not (summary["pins"] or summary["isolated"] or summary["frozen"]):
        return "Steering: none"
    head = (f"Steering: {len(summary['pins'])} pin(s), {len(summary['isolated'])} isolated, "
            f"{'frozen' if summary['frozen'] else 'not frozen'}")
    pins = [f"\n  pin {p['partition']} -> {p['member'] or '-'} ({p['state']}"
            + (f": {p['reason']}" if p["reason"] else "") + ")" for p in summary["pins"]]
    isolated = [f"\n  isolated {s}" for s in summary["isolated"]]
    return head + "".join(pins) + "".join(isolated)


def describe(admin: AdminClient, args: argparse.Namespace) -> int:
    share_group = share_groups_cli.describe_share_group(admin, args.group)
    if share_group is not None:
        return share_groups_cli.describe(admin, args, share_group)
    consumer_group = _describe_consumer_group(admin, args.group)
    if consumer_group is not None:
        return describe_consumer_group(admin, args, consumer_group)
    g = _describe_group(admin, args.group)
    owners: dict[tuple[str, int], Any] = {}
    members = []
    for m in g.members:
        assigned = decode_assignment(m.member_assignment) if g.protocol_type == "consumer" else []
        for topic, parts in assigned:
            for p in parts:
                owners[(topic, p)] = m
        members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id, "host": m.client_host,
                        "assignment": [f"{t}-{p}" for t, parts in assigned for p in parts]})
    rows = offset_rows(admin, args.group, owners)
    if args.json:
        emit(args, {"group": args.group, "state": g.group_state, "protocol_type": g.protocol_type,
                    "protocol": g.protocol_data, "members": members, "offsets": rows}, [])
    else:
        print(f"Group {args.group} is {g.group_state} ({len(g.members)} members, protocol "
              f"{g.protocol_type or '-'}/{g.protocol_data or '-'})\n")
        emit(args, rows, ["group", "topic", "partition", "current_offset", "log_end_offset", "lag", "consumer_id",
                          "host", "client_id"])
        if members:
            print()
            emit(args, members, ["member_id", "group_instance_id", "client_id", "host", "assignment"])
    return 0


def _parse_topics(specs: list[str], admin: AdminClient) -> list[tuple[str, int]]:
    out = []
    md = None
    for spec in specs:
        topic, _, parts = spec.partition(":")
        if parts:
            out += [(topic, int(p)) for p in parts.split(",")]
            continue
        md = md or admin.metadata()
        found = [t for t in md.topics if t.name == topic]
        if not found or found[0].error_code:
            raise AdminError(f"topic {topic!r} does not exist")
        out += [(topic, p.partition_index) for p in found[0].partitions]
    return sorted(set(out))


def _parse_datetime(value: str) -> int:
    try:
        dt = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise AdminError(f"--to-datetime {value!r}: expected ISO 8601, e.g. 2026-11-22T10:00:00+00:00") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return int(dt.timestamp() * 1000)


def reset_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    share = share_groups_cli.describe_share_group(admin, args.group)
    if share is not None:
        tps = _parse_topics(args.topic, admin)
        at = admin.list_offsets(tps, _parse_datetime(args.to_datetime)) if args.to_datetime else {}
        return share_groups_cli.reset_offsets(admin, args, share, tps, admin.list_offsets(tps, -2),
                                              admin.list_offsets(tps, -1), at)
    g = _describe_group(admin, args.group)
    if g.group_state not in ("Empty", "Dead") and args.execute:
        raise AdminError(f"Assignments can only be reset if the group '{args.group}' is inactive, but the current "
                         f"state is {g.group_state}.")
    tps = _parse_topics(args.topic, admin)
    earliest = admin.list_offsets(tps, -2)
    latest = admin.list_offsets(tps, -1)
    unknown = [f"{t}-{p}" for t, p in tps if earliest[(t, p)] < 0 or latest[(t, p)] < 0]
    if unknown:
        raise AdminError(f"the log offsets of {', '.join(unknown)} are unknown (no leader answered): "
                         "nothing is reset")
    committed = committed_offsets(admin, args.group)
    at = admin.list_offsets(tps, _parse_datetime(args.to_datetime)) if args.to_datetime else {}
    target = reset_targets(args, tps, earliest, latest, at, {tp: off for tp, (off, _meta) in committed.items()})
    rows = [{"group": args.group, "topic": t, "partition": p,
             "previous_offset": committed.get((t, p), (None, ""))[0], "new_offset": target[(t, p)]}
            for t, p in tps]
    if args.execute:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), off in target.items():
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                             "committed_leader_epoch": -1,
                                             "committed_metadata": committed.get((t, p), (0, ""))[1]})
        r = admin.coordinator_conn(args.group).call(ApiKey.OFFSET_COMMIT, {
            "group_id": args.group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        errors = [(t.name, p.partition_index, ErrorCode(p.error_code).name.upper())
                  for t in r.topics for p in t.partitions if p.error_code]
        if errors:
            raise AdminError(f"OffsetCommit failed: {errors}")
    elif not args.json:
        print("Dry run: nothing committed (add --execute to apply)\n")
    emit(args, rows, ["group", "topic", "partition", "previous_offset", "new_offset"])
    return 0


def delete(admin: AdminClient, args: argparse.Namespace) -> int:
    r = admin.coordinator_conn(args.group).call(ApiKey.DELETE_GROUPS, {"groups_names": [args.group]})
    code = ErrorCode(r.results[0].error_code)
    if code:
        hint = " (the group still has members)" if code == ErrorCode.non_empty_group else ""
        raise AdminError(f"cannot delete group {args.group!r}: {code.name.upper()}{hint}")
    emit(args, [{"group": args.group, "result": "deleted"}], ["group", "result"])
    return 0


def delete_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    if share_groups_cli.describe_share_group(admin, args.group) is not None:
        return share_groups_cli.delete_offsets(admin, args, sorted({spec.split(":")[0] for spec in args.topic}))
    tps = _parse_topics(args.topic, admin)
    topics: dict[str, list[dict[str, Any]]] = {}
    for t, p in tps:
        topics.setdefault(t, []).append({"partition_index": p})
    r = admin.coordinator_conn(args.group).call(ApiKey.OFFSET_DELETE, {
        "group_id": args.group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    if r.error_code:
        raise AdminError(f"OffsetDelete {args.group}: {ErrorCode(r.error_code).name.upper()}")
    rows = [{"topic": t.name, "partition": p.partition_index,
             "result": ErrorCode(p.error_code).name.upper() if p.error_code else "deleted"}
            for t in r.topics for p in t.partitions]
    emit(args, rows, ["topic", "partition", "result"])
    return 0 if all(r["result"] == "deleted" for r in rows) else 1


def coordinator(admin: AdminClient, args: argparse.Namespace) -> int:
    """The diagnosis that takes teams hours: hash, partition, its leader, replicas and ISR with
    which brokers are alive, whether the coordinator has loaded the group (or how far its load has
    got), and in plain words why the group is or is not served. Exit 0 only when it is served."""
    h = java_string_hashcode(args.group)
    md = admin.metadata([OFFSETS_TOPIC])
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
    topic = next((t for t in md.topics if t.name == OFFSETS_TOPIC and not t.error_code), None)
    info: dict[str, Any] = {"group": args.group, "java_hashcode": h, "abs_hashcode": kafka_abs(h),
                            "offsets_topic_partitions": None, "partition": None, "partition_leader": None}
    if topic is not None and topic.partitions:
        n = len(topic.partitions)
        partition = kafka_abs(h) % n
        p = next(p for p in topic.partitions if p.partition_index == partition)
        info.update(offsets_topic_partitions=n, partition=partition, partition_leader=p.leader_id,
                    partition_leader_address=brokers.get(p.leader_id),
                    replicas=_with_liveness(p.replica_nodes, brokers),
                    isr=_with_liveness(p.isr_nodes, brokers), live_brokers=sorted(brokers))
    node, code, message = admin.find_coordinator(args.group)
    info["coordinator"] = node.node_id if node else None
    name = f"{OFFSETS_TOPIC}-{info['partition']}"
    if code:
        info.update(status="unavailable", reason=f"{code.name.upper()}: {message}" if message else code.name.upper())
    else:
        assert node is not None
        try:
            r = admin.conn(node).call(ApiKey.DESCRIBE_GROUPS, {"groups": [args.group],
                                                              "include_authorized_operations": False})
        except AdminError as e:  # a cluster without DescribeGroups: the coordinator is known, no more
            r = None
            info.update(status="coordinator found", reason=str(e))
        gcode = ErrorCode(r.groups[0].error_code) if r is not None else ErrorCode.none
        if r is None:
            pass
        elif gcode == ErrorCode.coordinator_load_in_progress:
            info.update(status="loading", reason=message or f"{name} is being loaded by broker {node.node_id}")
        elif gcode:
            info.update(status="unavailable", reason=f"{gcode.name.upper()} from broker {node.node_id}"
                        + (" (it was just elected or deposed: ask again)" if gcode == ErrorCode.not_coordinator
                           else ""))
        else:
            state = r.groups[0].group_state
            info.update(status="loaded", group_state=state,
                        reason=f"served by broker {node.node_id}, the leader of {name}; the group is {state}")
        if topic is None:
            info["note"] = f"this cluster does not show {OFFSETS_TOPIC} in its metadata"
    if args.json:
        emit(args, info, [])
    else:
        for k, v in info.items():
            shown = ", ".join(map(str, v)) if isinstance(v, list) else v
            print(f"{k:26s} {'-' if v is None else shown}")
    return 0 if info["status"] in ("loaded", "coordinator found") else 1


def _with_liveness(ids: list[int], live: dict[int, str]) -> list[str]:
    return [f"{b} (alive)" if b in live else f"{b} (offline)" for b in ids]
