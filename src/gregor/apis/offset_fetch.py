"""OffsetFetch (9): one group (v1-v7) or many (v8+); all partitions when topics is null (v2+).
Partitions without a commit answer offset -1, as Kafka does. v9 names the member asking, which a
consumer-protocol group checks (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH). ``require_stable`` (v7+,
what consumers send) waits for the writes before it to be committed, and answers
UNSTABLE_OFFSET_COMMIT for a partition a transaction holds offsets of until its marker; without
it the offsets are read at the committed offset at once (coordinator/group/service.py)."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import GROUP, TOPIC, Op, allowed, allowed_names, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


async def fetch_group(ctx: RequestContext, group_id: str, topics: Any, require_stable: bool,
                      member_id: str | None = None, member_epoch: int = -1) -> tuple[ErrorCode, list[dict[str, Any]]]:
    """Kafka's authorization: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED), DESCRIBE on
    each topic (a named topic refused: TOPIC_AUTHORIZATION_FAILED; all topics: only those)."""
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    if enabled(ctx) and not allowed(ctx, Op.DESCRIBE, GROUP, group_id):
        code = ErrorCode.group_authorization_failed
        return code, [] if wanted is None else _by_topic([(tp, None, code) for tp in wanted])
    denied: set[str] = set()
    if enabled(ctx) and wanted is not None:
        names = {t for t, _ in wanted}
        denied = names - allowed_names(ctx, Op.DESCRIBE, TOPIC, names)
    asked = wanted if not denied else [tp for tp in wanted or () if tp[0] not in denied]
    try:
        rows = await ctx.groups.fetch_offsets(group_id, asked, member_id, member_epoch, require_stable) \
            if asked or asked is None else []
    except KafkaError as e:
        if wanted is None:
            return e.code, []
        return e.code, _by_topic([(tp, None, e.code) for tp in wanted])
    if wanted is None and enabled(ctx):
        visible = allowed_names(ctx, Op.DESCRIBE, TOPIC, {tp[0] for tp, _ in rows})
        rows = [(tp, v) for tp, v in rows if tp[0] in visible]
    out = [(tp, None, v) if isinstance(v, ErrorCode) else (tp, v, ErrorCode.none) for tp, v in rows]
    out += [(tp, None, ErrorCode.topic_authorization_failed) for tp in wanted or () if tp[0] in denied]
    return ErrorCode.none, _by_topic(out)


def _by_topic(rows: list[tuple[tuple[str, int], Any, ErrorCode]]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), v, code in rows:
        topics.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": v.offset if v is not None else -1,
            "committed_leader_epoch": v.leader_epoch if v is not None else -1,
            "metadata": v.metadata if v is not None else "",
            "error_code": code,
        })
    return [{"name": t, "partitions": parts} for t, parts in topics.items()]


@handles(ApiKey.OFFSET_FETCH, 1, 9)
async def offset_fetch(ctx: RequestContext, req: Any) -> dict[str, Any]:
    stable = bool(getattr(req, "require_stable", False))  # v7+
    if ctx.version >= 8:
        groups = []
        for g in req.groups:
            member = (g.member_id, g.member_epoch) if ctx.version >= 9 else (None, -1)
            code, topics = await fetch_group(ctx, g.group_id, g.topics, stable, *member)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return {"throttle_time": 0, "groups": groups}
    code, topics = await fetch_group(ctx, req.group_id, req.topics, stable)
    if ctx.version < 2 and code:
        # v0-v1 have no top-level error: it goes on every partition
        for t in topics:
            for p in t["partitions"]:
                p["error_code"] = code
    return {"throttle_time": 0, "topics": topics, "error_code": code}
