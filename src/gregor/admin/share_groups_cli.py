"""``gregor groups describe`` of a share group (KIP-932), shaped like kafka-share-groups.sh
--describe: the members with their assignments (a partition may have several members), and each
share-partition's start offset and lag (DescribeShareGroupOffsets)."""

from __future__ import annotations

import argparse
from typing import Any

from gregor.admin.client import AdminClient, AdminError
from gregor.admin.offset_targets import reset_targets
from gregor.admin.output import emit
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


def describe_share_group(admin: AdminClient, group: str) -> Any | None:
    """The group as ShareGroupDescribe shows it; None if it is not a share group (or the broker
    does not serve share groups)."""
    conn = admin.coordinator_conn(group)
    try:
        conn.version_for(ApiKey.SHARE_GROUP_DESCRIBE)
    except AdminError:
        return None
    g = conn.call(ApiKey.SHARE_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False}).groups[0]
    if g.error_code == ErrorCode.group_id_not_found:
        return None
    if g.error_code:
        raise AdminError(f"ShareGroupDescribe {group}: {ErrorCode(g.error_code).name.upper()}"
                         + (f" ({g.error_message})" if g.error_message else ""))
    return g


def share_offsets(admin: AdminClient, group: str) -> list[dict[str, Any]]:
    conn = admin.coordinator_conn(group)
    r = conn.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": group, "topics": None}]})
    g = r.groups[0]
    if g.error_code:
        raise AdminError(f"DescribeShareGroupOffsets {group}: {ErrorCode(g.error_code).name.upper()}"
                         + (f" ({g.error_message})" if g.error_message else ""))
    rows = []
    for t in g.topics:
        for p in t.partitions:
            rows.append({"group": group, "topic": t.topic_name, "partition": p.partition_index,
                         "start_offset": p.start_offset if p.start_offset >= 0 else "-",
                         "lag": getattr(p, "lag", -1) if getattr(p, "lag", -1) >= 0 else "-",
                         "error": ErrorCode(p.error_code).name.upper() if p.error_code else ""})
    return sorted(rows, key=lambda r: (r["topic"], r["partition"]))


def describe(admin: AdminClient, args: argparse.Namespace, g: Any) -> int:
    members = [{"member_id": m.member_id, "member_epoch": m.member_epoch, "client_id": m.client_id,
                "host": m.client_host, "rack": m.rack_id,
                "assignment": [f"{t.topic_name}-{p}" for t in m.assignment.topic_partitions for p in t.partitions],
                "subscribed_topics": list(m.subscribed_topic_names)} for m in g.members]
    rows = share_offsets(admin, args.group)
    if args.json:
        emit(args, {"group": args.group, "type": "share", "state": g.group_state, "group_epoch": g.group_epoch,
                    "assignment_epoch": g.assignment_epoch, "assignor": g.assignor_name, "members": members,
                    "offsets": rows}, [])
        return 0
    print(f"Group {args.group} is {g.group_state} (share group, {len(members)} members, group epoch "
          f"{g.group_epoch}, assignment epoch {g.assignment_epoch}, assignor {g.assignor_name})\n")
    emit(args, rows, ["group", "topic", "partition", "start_offset", "lag", "error"])
    if members:
        print()
        emit(args, [{**m, "assignment": ",".join(m["assignment"]) or "-", "rack": m["rack"] or "-"} for m in members],
             ["member_id", "member_epoch", "client_id", "host", "rack", "assignment"])
    return 0


def reset_offsets(admin: AdminClient, args: argparse.Namespace, g: Any, tps: list[tuple[str, int]],
                  earliest: dict[tuple[str, int], int], latest: dict[tuple[str, int], int],
                  at: dict[tuple[str, int], int]) -> int:
    """kafka-share-groups.sh --reset-offsets: the share-partitions' new start offsets
    (AlterShareGroupOffsets), the group empty; a dry run unless --execute."""
    if g.members and args.execute:
        raise AdminError(f"Share group '{args.group}' offsets can only be reset while it is empty, but it has "
                         f"{len(g.members)} members.")
    current = {(r["topic"], r["partition"]): r["start_offset"] for r in share_offsets(admin, args.group)}
    target = reset_targets(args, tps, earliest, latest, at,
                           {tp: start for tp, start in current.items() if isinstance(start, int) and start >= 0})
    rows = [{"group": args.group, "topic": t, "partition": p, "previous_start_offset": current.get((t, p), "-"),
             "new_start_offset": target[(t, p)]} for t, p in tps]
    if args.execute:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), off in target.items():
            topics.setdefault(t, []).append({"partition_index": p, "start_offset": off})
        r = admin.coordinator_conn(args.group).call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, {
            "group_id": args.group, "topics": [{"topic_name": t, "partitions": ps} for t, ps in topics.items()]})
        if r.error_code:
            raise AdminError(f"AlterShareGroupOffsets {args.group}: {ErrorCode(r.error_code).name.upper()}"
                             + (f" ({r.error_message})" if r.error_message else ""))
        errors = [(t.topic_name, p.partition_index, ErrorCode(p.error_code).name.upper())
                  for t in r.responses for p in t.partitions if p.error_code]
        if errors:
            raise AdminError(f"AlterShareGroupOffsets failed: {errors}")
    elif not args.json:
        print("Dry run: nothing changed (add --execute to apply)\n")
    emit(args, rows, ["group", "topic", "partition", "previous_start_offset", "new_start_offset"])
    return 0


def delete_offsets(admin: AdminClient, args: argparse.Namespace, topics: list[str]) -> int:
    """kafka-share-groups.sh --delete-offsets: the group forgets where it is in these topics."""
    r = admin.coordinator_conn(args.group).call(ApiKey.DELETE_SHARE_GROUP_OFFSETS, {
        "group_id": args.group, "topics": [{"topic_name": t} for t in topics]})
    if r.error_code:
        raise AdminError(f"DeleteShareGroupOffsets {args.group}: {ErrorCode(r.error_code).name.upper()}"
                         + (f" ({r.error_message})" if r.error_message else ""))
    rows = [{"topic": t.topic_name, "result": ErrorCode(t.error_code).name.upper() if t.error_code else "deleted"}
            for t in r.responses]
    emit(args, rows, ["topic", "result"])
    return 0 if all(row["result"] == "deleted" for row in rows) else 1
