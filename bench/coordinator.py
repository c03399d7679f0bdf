"""Group coordinator figures, driving the Kafka protocol directly (no client library in the
loop), against Gregor and, in the same run, Tansu:

- rebalance: time from the last JoinGroup sent to the last SyncGroup answered, for groups of
  10, 100 and 1,000 members (group.initial.rebalance.delay.ms=0);
- commits: partition-offsets committed per second, 1-partition and 100-partition requests;
- heartbeats: sustained heartbeats per second and p99 latency, from a stable group;
- load (Gregor only, in process): seconds to replay a __consumer_offsets partition of 1,000,000
  commit records;
- assign (in process, no broker): the server-side assignors of the consumer group protocol
  (KIP-848): a fresh uniform assignment of 1,000 members over 10 topics x 1,000 partitions, the
  incremental one after a member joins or leaves, the same over 50,000 partitions beside the figure
  of Kafka's Java assignor, a heterogeneous group, and range; medians of several runs.

    python bench/coordinator.py [--members 10,100,1000] [--seconds 5] [--load-records 1000000]
    python bench/coordinator.py --only assign [--assign-members 1000] [--assign-runs 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import kclient  # noqa: E402
import peers  # noqa: E402

JOIN, SYNC, HEARTBEAT, COMMIT, CREATE_TOPICS, METADATA = 11, 14, 12, 8, 19, 3
MEMBER_ID_REQUIRED = 79
CONNS = 8


async def create_topic(bs: str, name: str, partitions: int) -> None:
    c = await kclient.Connection.open(bs)
    await c.call(CREATE_TOPICS, 5, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                                "assignments": [], "configs": []}],
                                    "timeout": 30000, "validate_only": False})
    await c.close()


def join_body(group: str, member_id: str) -> dict[str, Any]:
    return {"group_id": group, "session_timeout": 60000, "rebalance_timeout": 120000, "member_id": member_id,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"}]}


async def rebalance(bs: str, n: int, group: str) -> float | None:
    """Seconds from the last JoinGroup sent to the last SyncGroup answered."""
    conns = [await kclient.Connection.open(bs, f"m{i}") for i in range(n)]
    try:
        # 1. member ids (KIP-394 round trip where the broker asks for it)
        ids: list[str] = []
        firsts = await asyncio.gather(*(c.call(JOIN, 5, join_body(group, "")) for c in conns))
        joined_already = False
        for r in firsts:
            ids.append(r.member_id)
            joined_already |= r.error_code != MEMBER_ID_REQUIRED
        # 2. everyone joins with its id; the last join completes the rebalance
        last_sent = 0.0

        async def join(c: kclient.Connection, mid: str) -> Any:
            nonlocal last_sent
            task = c.call(JOIN, 5, join_body(group, mid))
            last_sent = time.perf_counter()
            return await task

        results = await asyncio.wait_for(asyncio.gather(*(join(c, m) for c, m in zip(conns, ids, strict=True))), 120)
        start = last_sent
        gen = results[0].generation_id
        leader = results[0].leader
        if any(r.error_code for r in results) or any(r.generation_id != gen for r in results):
            return None
        assignments = [{"member_id": m, "assignment": b""} for m in ids]

        async def sync(c: kclient.Connection, r: Any) -> Any:
            body = {"group_id": group, "generation_id": gen, "member_id": r.member_id, "group_instance_id": None,
                    "protocol_type": "consumer", "protocol_name": r.protocol_name,
                    "assignments": assignments if r.member_id == leader else []}
            return await c.call(SYNC, 5, body)

        syncs = await asyncio.wait_for(asyncio.gather(*(sync(c, r) for c, r in zip(conns, results, strict=True))), 120)
        end = time.perf_counter()
        if any(s.error_code for s in syncs):
            return None
        del joined_already
        return end - start
    except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        return None
    finally:
        for c in conns:
            await c.close()


async def commits(bs: str, per_request: int, seconds: float, topic: str) -> float:
    conns = [await kclient.Connection.open(bs, f"c{i}") for i in range(CONNS)]
    stop = time.perf_counter() + seconds
    counts = [0] * CONNS

    async def loop(i: int, c: kclient.Connection) -> None:
        offset = 0
        while time.perf_counter() < stop:
            offset += 1
            body = {"group_id": f"commit-bench-{i}", "generation_id_or_member_epoch": -1, "member_id": "",
                    "group_instance_id": None,
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
                         "committed_metadata": ""} for p in range(per_request)]}]}
            r = await c.call(COMMIT, 8, body)
            if r.topics[0].partitions[0].error_code:
                raise RuntimeError(f"commit failed: {r.topics[0].partitions[0].error_code}")
            counts[i] += per_request

    start = time.perf_counter()
    await asyncio.gather(*(loop(i, c) for i, c in enumerate(conns)))
    elapsed = time.perf_counter() - start
    for c in conns:
        await c.close()
    return sum(counts) / elapsed


async def heartbeats(bs: str, members: int, seconds: float, group: str) -> tuple[float, float] | None:
    conns = [await kclient.Connection.open(bs, f"h{i}") for i in range(members)]
    firsts = await asyncio.gather(*(c.call(JOIN, 5, join_body(group, "")) for c in conns))
    ids = [r.member_id for r in firsts]
    results = await asyncio.gather(*(c.call(JOIN, 5, join_body(group, m)) for c, m in zip(conns, ids, strict=True)))
    gen, leader = results[0].generation_id, results[0].leader
    assignments = [{"member_id": m, "assignment": b""} for m in ids]
    await asyncio.gather(*(c.call(SYNC, 5, {"group_id": group, "generation_id": gen, "member_id": m,
                                            "group_instance_id": None, "protocol_type": "consumer",
                                            "protocol_name": "range",
                                            "assignments": assignments if m == leader else []})
                           for c, m in zip(conns, ids, strict=True)))
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def loop(c: kclient.Connection, mid: str) -> None:
        nonlocal errors
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            r = await c.call(HEARTBEAT, 4, {"group_id": group, "generation_id": gen, "member_id": mid,
                                            "group_instance_id": None})
            latencies.append(time.perf_counter() - t0)
            errors += r.error_code != 0

    start = time.perf_counter()
    await asyncio.gather(*(loop(c, m) for c, m in zip(conns, ids, strict=True)))
    elapsed = time.perf_counter() - start
    for c in conns:
        await c.close()
    if errors:
        print(f"  ({errors} heartbeats answered with an error)")
    return len(latencies) / elapsed, statistics.quantiles(latencies, n=100)[98] * 1000


def load(records: int) -> tuple[float, float]:
    """Seconds to replay a __consumer_offsets partition holding ``records`` commit records, and the
    file size in MB. Written with the broker's own encoders, 1,000 records a batch."""
    from gregor.config import BrokerConfig
    from gregor.coordinator.group.context import GroupConfig
    from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard
    from gregor.coordinator.runtime.shard_runtime import ShardRuntime
    from gregor.log.partition_log import PartitionLog, now_ms
    from gregor.protocol.consumer_offsets import OffsetCommitKey, OffsetCommitValue, encode_key, encode_value
    from gregor.protocol.records import build_batch

    cfg = BrokerConfig.from_mapping({}).topic_defaults()
    cfg.update({"cleanup.policy": "compact", "segment.bytes": 100 << 20})
    with tempfile.TemporaryDirectory() as d:
        plog = PartitionLog(__import__("pathlib").Path(d) / "__consumer_offsets-0", "__consumer_offsets", 0, cfg)
        plog.open(clean_shutdown=False, recovery_point=0)
        ts = now_ms()
        for base in range(0, records, 1000):
            pairs = [(encode_key(OffsetCommitKey(f"group-{(base + i) % 1000}", "orders", (base + i) % 64)),
                      encode_value(OffsetCommitValue(base + i, "", ts))) for i in range(min(1000, records - base))]
            plog.append_batch_unchecked(build_batch(pairs, timestamp=ts))
        size_mb = plog.size_bytes / 1e6

        async def run() -> float:
            rt = ShardRuntime(0, plog, lambda p, t: GroupCoordinatorShard(p, GroupConfig(), now_ms, t), RECORD_SERDE)
            start = time.perf_counter()
            rt.start_loading()
            await rt.wait_loaded()
            took = time.perf_counter() - start
            assert rt.load_stats[0] == records, rt.load_stats
            rt.unload()
            return took

        seconds = asyncio.run(run())
        plog.close()
        return seconds, size_mb


# Kafka's Java UniformAssignor for 1,000 members and 50,000 partitions: the figure quoted when this part
# was asked for (not measured here).
KAFKA_UNIFORM_1000x50000_MS = "15-20"


def assign_bench(members: int, topics: int, per_topic: int, large_per_topic: int, runs: int) -> dict[str, Any]:
    """Milliseconds (median of ``runs``) of the assignors on in-memory groups, and the partitions each
    incremental assignment moved."""
    import uuid

    from gregor.coordinator.group.assignors import Assignment, GroupSpec, MemberSpec, assignor

    topic_ids = [uuid.UUID(int=i + 1) for i in range(topics)]

    def spec(n: int, per: int, current: dict[str, Assignment] | None = None, subs: Any = None) -> GroupSpec:
        current = current or {}
        everything = frozenset(topic_ids)
        ms = {f"member-{i:05d}": MemberSpec(f"member-{i:05d}", None, None,
                                              subs(i) if subs else everything, current.get(f"member-{i:05d}", {}))
              for i in range(n)}
        return GroupSpec(ms, {t: per for t in topic_ids})

    def timed(name: str, s: GroupSpec) -> tuple[float, dict[str, Assignment]]:
        a = assignor(name)
        times = []
        result: dict[str, Assignment] = {}
        for _ in range(runs):
            t0 = time.perf_counter()
            result = a.assign(s)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000, result

    def moved(before: dict[str, Assignment], after: dict[str, Assignment]) -> int:
        return sum(len(ps - before.get(m, {}).get(t, frozenset())) for m, a in after.items() for t, ps in a.items())

    out: dict[str, Any] = {}

    def line(key: str, label: str, n: int, per: int, ms: float, extra: str = "") -> None:
        out[key] = ms
        print(f"assign  {label:22s} {n:5d} members x {per * topics:6d} partitions: {ms:8.2f} ms{extra}", flush=True)

    for per, tag in ((per_topic, ""), (large_per_topic, "_large")):
        ms, fresh = timed("uniform", spec(members, per))
        line(f"uniform_fresh{tag}", "uniform fresh", members, per, ms,
             f"   (Kafka (Java) uniform, 1000 members x 50000 partitions: {KAFKA_UNIFORM_1000x50000_MS} ms)"
             if tag else "")
        ms, joined = timed("uniform", spec(members + 1, per, fresh))
        out[f"uniform_join{tag}_moved"] = mv = moved(fresh, joined)
        line(f"uniform_join{tag}", "uniform +1 member", members + 1, per, ms, f"   moved {mv} partitions")
        ms, left = timed("uniform", spec(members - 1, per, fresh))
        out[f"uniform_leave{tag}_moved"] = mv = moved(fresh, left)
        line(f"uniform_leave{tag}", "uniform -1 member", members - 1, per, ms, f"   moved {mv} partitions")
    half = frozenset(topic_ids[: max(1, topics // 2)])
    every = frozenset(topic_ids)
    ms, _ = timed("uniform", spec(members, per_topic, subs=lambda i: every if i % 2 else half))
    line("uniform_heterogeneous", "uniform heterogeneous", members, per_topic, ms,
         f"   (half the members subscribe to {len(half)} of the {topics} topics)")
    ms, _ = timed("range", spec(members, per_topic))
    line("range_fresh", "range fresh", members, per_topic, ms)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", default="10,100,1000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--heartbeat-members", type=int, default=50)
    ap.add_argument("--load-records", type=int, default=1_000_000)
    ap.add_argument("--only", choices=["gregor", "tansu", "assign"], action="append")
    ap.add_argument("--assign-members", type=int, default=1000)
    ap.add_argument("--assign-topics", type=int, default=10)
    ap.add_argument("--assign-partitions", type=int, default=1000, help="per topic")
    ap.add_argument("--assign-large-partitions", type=int, default=5000, help="per topic, the larger run")
    ap.add_argument("--assign-runs", type=int, default=7)
    args = ap.parse_args()
    sizes = [int(x) for x in args.members.split(",")]
    results: dict[str, dict[str, float | None]] = {}
    targets = [("gregor", lambda: peers.gregor("group.initial.rebalance.delay.ms=0")), ("tansu", peers.tansu)]
    for name, ctx in targets:
        if args.only and name not in args.only:
            continue
        with ctx() as bs:
            if bs is None:
                print(f"{name}: not available, skipped")
                continue
            r: dict[str, float | None] = {}
            asyncio.run(create_topic(bs, "commit-bench", 100))
            for n in sizes:
                r[f"rebalance_{n}"] = t = asyncio.run(rebalance(bs, n, f"rb-{n}"))
                print(f"{name:7s} rebalance {n:5d} members: " + (f"{t * 1000:9.1f} ms" if t else "did not complete"),
                      flush=True)
            for per in (1, 100):
                r[f"commit_{per}"] = v = asyncio.run(commits(bs, per, args.seconds, "commit-bench"))
                print(f"{name:7s} commits, {per:3d} partitions/request: {v:10.0f} partition-offsets/s", flush=True)
            hb = asyncio.run(heartbeats(bs, args.heartbeat_members, args.seconds, "hb"))
            if hb:
                r["heartbeats"], r["heartbeat_p99_ms"] = hb
                print(f"{name:7s} heartbeats ({args.heartbeat_members} members): {hb[0]:9.0f}/s, p99 {hb[1]:.2f} ms",
                      flush=True)
            results[name] = r
    if not args.only or "assign" in args.only:
        assign_bench(args.assign_members, args.assign_topics, args.assign_partitions, args.assign_large_partitions,
                     args.assign_runs)
    if not args.only or "gregor" in args.only:
        seconds, size = load(args.load_records)
        print(f"gregor  load {args.load_records} commit records ({size:.0f} MB): {seconds:.2f} s, "
              f"{args.load_records / seconds:,.0f} records/s")
    if "gregor" in results and "tansu" in results:
        g, t = results["gregor"], results["tansu"]
        print("gregor/tansu:")
        for k in g:
            if g[k] and t.get(k):
                ratio = g[k] / t[k]  # type: ignore[operator]
                better = "lower is better" if k.startswith("rebalance") or k.endswith("_ms") else "higher is better"
                print(f"  {k:22s} {ratio:8.2f}x  ({better})")
            else:
                print(f"  {k:22s}      n/a  (tansu: {t.get(k)})")


if __name__ == "__main__":
    main()
