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

The consumer group protocol (KIP-848), in process: one __consumer_offsets shard run as the broker
runs it (ShardRuntime over a PartitionLog: records encoded, appended, replayed; timers on the event
loop), driven by simulated members; no network, no request decoding or response encoding. A group
of n members has one topic of 10 x n partitions (--cg-partitions-per-member).

- heartbeats: steady-state ConsumerGroupHeartbeats of a Stable group (100 and 1,000 members):
  heartbeats per second of coordinator time and p50/p99 per heartbeat, in wall time and in the
  thread's CPU time (which leaves out preemption by other processes), with the owned partitions
  sent every time, omitted (as clients do while nothing changes), and the handler alone;
- stabilize: n - 1 Stable members (n = 10, 100, 1,000), one joins, later leaves. Each member
  heartbeats once per interval at a random phase; the coordinator serves one heartbeat at a time,
  each taking the time it really took. Printed: decision (the heartbeat that computed the new
  target) to Stable, in simulated time; heartbeat rounds (regular heartbeats per member); the
  coordinator's CPU time until Stable. Twice: members acknowledging a change of partitions at once
  (--cg-ack-delay-ms after the response; the Java and librdkafka clients do), and only at their
  next interval.

Through sockets (only when asked for): heartbeats-wire starts a broker with the consumer protocol
on, and n - 1 members (one connection each, from this process) heartbeat once per interval
(latency), then back to back (throughput), then members join one at a time (join response to
Stable, members acknowledging at once). Client and broker share the machine.

    python bench/coordinator.py [--members 10,100,1000] [--seconds 5] [--load-records 1000000]
    python bench/coordinator.py --only assign [--assign-members 1000] [--assign-runs 7]
    python bench/coordinator.py --only heartbeats,stabilize [--cg-runs 5] [--cg-interval-ms 5000]
    python bench/coordinator.py --only heartbeats-wire [--cg-wire-members 1000] [--cg-wire-partitions 10000]
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
    from gregor.coordinator.runtime.partition_writer import LogWriter
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
            rt = ShardRuntime(0, plog, lambda p, t: GroupCoordinatorShard(p, GroupConfig(), now_ms, t), RECORD_SERDE,
                              LogWriter(plog))
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


# -- the consumer group protocol (KIP-848), in process --------------------------------------------

CG_GROUP, CG_TOPIC = "cg-bench", "events"
CG_SESSION_TIMEOUT_MS = 600_000  # so that no session expires while the bench runs slower than its clients would
CG_REBALANCE_TIMEOUT_MS = 300_000


class CgMember:
    """A consumer-protocol member: joins with epoch 0, then heartbeats with its epoch; takes what a
    response assigns it and gives up at once what it no longer assigns; sends its owned partitions
    when they changed since it last sent them, as the Java and librdkafka clients do (or every
    time, with ``always_owned``)."""

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.epoch = 0
        self.owned: dict[Any, frozenset[int]] = {}
        self.dirty = False

    def request(self, always_owned: bool = False) -> Any:
        from gregor.coordinator.group.api import ConsumerHeartbeatRequest

        if self.epoch == 0:
            return ConsumerHeartbeatRequest(CG_GROUP, self.member_id, 0, "bench", "/127.0.0.1",
                                            rebalance_timeout_ms=CG_REBALANCE_TIMEOUT_MS,
                                            subscribed_topic_names=[CG_TOPIC], owned={})
        owned = dict(self.owned) if always_owned or self.dirty else None
        self.dirty = False
        return ConsumerHeartbeatRequest(CG_GROUP, self.member_id, self.epoch, "bench", "/127.0.0.1", owned=owned)

    def answer(self, r: Any) -> bool:
        """Takes a response; True if the member's partitions changed."""
        if r.error:
            raise RuntimeError(f"member {self.member_id}: heartbeat answered {r.error!r}: {r.error_message}")
        self.member_id, self.epoch = r.member_id, r.member_epoch
        if r.assignment is None:
            return False
        new = {t: frozenset(ps) for t, ps in r.assignment.items() if ps}
        if new == self.owned:
            return False
        self.owned, self.dirty = new, True
        return True


class CgBeat:
    __slots__ = ("changed", "seconds", "cpu", "handler", "records")

    def __init__(self, changed: bool, seconds: float, cpu: float, handler: float, records: int) -> None:
        self.changed, self.seconds, self.cpu, self.handler, self.records = changed, seconds, cpu, handler, records


class CgCoordinator:
    """A group coordinator shard with one topic of ``partitions`` partitions; build and use it in a
    running event loop (its timers are the loop's)."""

    def __init__(self, directory: str, partitions: int, heartbeat_interval_ms: int) -> None:
        import pathlib
        import uuid

        from gregor.config import BrokerConfig
        from gregor.coordinator.group.context import GroupConfig
        from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard, ShardCollaborators
        from gregor.coordinator.runtime.partition_writer import LogWriter
        from gregor.coordinator.runtime.shard_runtime import ShardRuntime
        from gregor.log.partition_log import PartitionLog, now_ms

        cfg = BrokerConfig.from_mapping({}).topic_defaults()
        cfg.update({"cleanup.policy": "compact", "segment.bytes": 1 << 30})
        self.plog = PartitionLog(pathlib.Path(directory) / "__consumer_offsets-0", "__consumer_offsets", 0, cfg)
        self.plog.open(clean_shutdown=False, recovery_point=0)
        catalogue = {CG_TOPIC: (uuid.UUID(int=848), partitions)}
        config = GroupConfig(consumer_heartbeat_interval_ms=heartbeat_interval_ms,
                             consumer_session_timeout_ms=CG_SESSION_TIMEOUT_MS)
        self.rt: Any = ShardRuntime(
            0, self.plog, lambda p, t: GroupCoordinatorShard(p, config, now_ms, t,
                                                             ShardCollaborators(topic_metadata=catalogue.get)),
            RECORD_SERDE, LogWriter(self.plog), label="offsets and group metadata")

    async def start(self) -> None:
        self.rt.start_loading()
        await self.rt.wait_loaded()

    def close(self) -> None:
        self.rt.unload()
        self.plog.close()

    def group(self) -> Any:
        return self.rt.shard.consumer_groups[CG_GROUP]

    def stable(self) -> bool:
        from gregor.coordinator.group.consumer_group import GroupState

        group = self.rt.shard.consumer_groups.get(CG_GROUP)
        return group is not None and group.state is GroupState.STABLE

    def execute(self, req: Any) -> tuple[Any, CgBeat]:
        """One ConsumerGroupHeartbeat through ``ShardRuntime.execute``, as the group coordinator
        service runs it: (response, timings; ``changed`` left False)."""
        from gregor.coordinator.runtime.result import Deferred

        handler = 0.0
        records = 0

        def op(shard: Any) -> Any:
            nonlocal handler, records
            t = time.perf_counter()
            result = shard.consumer_group_heartbeat(req)
            handler = time.perf_counter() - t
            records = len(result.records)
            return result

        c0 = time.thread_time()
        t0 = time.perf_counter()
        response = self.rt.execute(op)
        seconds = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        assert not isinstance(response, Deferred), "one node: a write is committed by its own append"
        return response, CgBeat(False, seconds, cpu, handler, records)

    def beat(self, m: CgMember, always_owned: bool = False) -> CgBeat:
        response, b = self.execute(m.request(always_owned))
        b.changed = m.answer(response)
        return b

    def handler_only(self, m: CgMember, always_owned: bool = False) -> tuple[float, float]:
        """The handler alone, no runtime around it (seconds, CPU seconds); only for heartbeats that
        write nothing."""
        req = m.request(always_owned)
        c0 = time.thread_time()
        t0 = time.perf_counter()
        result = self.rt.shard.consumer_group_heartbeat(req)
        seconds = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        assert not result.records, "handler_only is for steady heartbeats"
        m.answer(result.response)
        return seconds, cpu

    async def build(self, n: int, prefix: str = "member") -> list[CgMember]:
        """``n`` members join one after the other, then heartbeat in rounds until the group is Stable
        and nobody's partitions change."""
        members = [CgMember(f"{prefix}-{i:05d}") for i in range(n)]
        for m in members:
            self.beat(m)
            await asyncio.sleep(0)
        await self.converge(members)
        return members

    async def converge(self, members: list[CgMember], max_rounds: int = 50) -> int:
        for r in range(max_rounds):
            moved = False
            for m in members:
                b = self.beat(m)
                moved |= b.changed or b.records > 0
                await asyncio.sleep(0)  # the loop runs between requests (and drops cancelled timers)
            if not moved and self.stable():
                return r + 1
        raise RuntimeError(f"the group did not become Stable in {max_rounds} rounds")


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


async def _cg_steady(sizes: list[int], per_member: int, rounds: int, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory() as d:
            coord = CgCoordinator(d, n * per_member, 5000)
            await coord.start()
            t0 = time.perf_counter()
            members = await coord.build(n)
            print(f"heartbeats  group of {n} members x {n * per_member} partitions Stable "
                  f"(built in {time.perf_counter() - t0:.1f} s)", flush=True)
            modes = (("runtime, owned sent", "runtime_owned", True, False),
                     ("runtime, owned omitted", "runtime_null", False, False),
                     ("handler only, owned sent", "handler_owned", True, True))
            for label, key, always, bare in modes:
                per_run: list[tuple[float, ...]] = []
                for _ in range(runs):
                    lat: list[float] = []
                    cpu: list[float] = []
                    for _ in range(rounds):
                        for m in members:
                            if bare:
                                seconds, used = coord.handler_only(m, always)
                            else:
                                b = coord.beat(m, always)
                                if b.records or b.changed:
                                    raise RuntimeError("a steady-state heartbeat wrote records or moved partitions")
                                seconds, used = b.seconds, b.cpu
                            lat.append(seconds)
                            cpu.append(used)
                            await asyncio.sleep(0)  # the loop runs between requests (and drops cancelled timers)
                    per_run.append((len(lat) / sum(lat), _pct(lat, 50) * 1000, _pct(lat, 99) * 1000,
                                    len(cpu) / sum(cpu), _pct(cpu, 99) * 1000))
                rate, p50, p99, cpu_rate, cpu99 = (statistics.median(x[i] for x in per_run) for i in range(5))
                out[f"{key}_{n}"] = {"per_s": rate, "p50_ms": p50, "p99_ms": p99, "per_cpu_s": cpu_rate,
                                     "cpu_p99_ms": cpu99}
                print(f"heartbeats  {n:5d} members, {label:25s}: {rate:7.0f}/s  p50 {p50:6.3f} ms  p99 {p99:6.3f} ms"
                      f"  | CPU: {cpu_rate:7.0f}/s, p99 {cpu99:6.3f} ms   (median of {runs} runs x {rounds * n})",
                      flush=True)
            offered = n / 5.0
            busy = offered / out[f"runtime_null_{n}"]["per_s"]
            print(f"heartbeats  {n:5d} members at heartbeat.interval.ms=5000 offer {offered:.0f}/s: "
                  f"{busy * 100:.1f}% of one core", flush=True)
            coord.close()
    return out


def cg_heartbeats(sizes: list[int], per_member: int, rounds: int, runs: int) -> dict[str, Any]:
    """Steady-state ConsumerGroupHeartbeats of a Stable group: per size, heartbeats per second of
    coordinator time and p50/p99 per heartbeat, with owned partitions sent every time, omitted (as
    clients do while nothing changes), and the handler alone."""
    return asyncio.run(_cg_steady(sizes, per_member, rounds, runs))


async def _cg_episode(coord: CgCoordinator, members: list[CgMember], start: CgMember, interval_ms: int,
                      expedite: bool, rng: Any, leave: bool = False, ack_delay_ms: float = 0.0) -> dict[str, Any]:
    """From ``start``'s join (or leave) until the group is Stable again. The coordinator serves one
    heartbeat at a time, each taking the time it really took here; every member heartbeats once per
    interval at a random phase (a joining member an interval after its join); with ``expedite`` a
    member whose partitions changed heartbeats again as soon as it has the response (the
    acknowledgment the Java and librdkafka clients send once they have revoked or taken the
    partitions; ``ack_delay_ms`` after the response: the client's time to revoke, commit, run its
    callbacks), else at its next interval; a heartbeat restarts the member's interval. The network
    takes no time.
    Times in ms from the start heartbeat's arrival; the decision is the end of the heartbeat that
    computed the new target assignment (the join itself; after a leave, the next heartbeat)."""
    import heapq

    from gregor.coordinator.group.api import ConsumerHeartbeatRequest

    h = float(interval_ms)
    acks = 0
    if leave:
        r, b = coord.execute(ConsumerHeartbeatRequest(CG_GROUP, start.member_id, -1, "bench", "/127.0.0.1"))
        if r.error:
            raise RuntimeError(f"leave answered {r.error!r}")
    else:
        b = coord.beat(start)
        members = [*members, start]
    first, cpu, handler, writing_cpu = b.seconds, b.cpu, b.handler, b.cpu
    beats = writing = 1
    busy = first * 1000
    group = coord.group()
    decision = busy if group.assignment_epoch == group.group_epoch else None
    queue: list[tuple[float, int, int]] = []
    for i, m in enumerate(members):
        heapq.heappush(queue, (h if m is start else rng.uniform(0, h), i, 0))
    regular: dict[int, int] = {}  # member -> regular heartbeats sent since the start
    stable_at = None
    while queue:
        at, i, kind = heapq.heappop(queue)
        if at > 20 * h:
            break
        b = coord.beat(members[i])
        await asyncio.sleep(0)  # the loop runs between requests (and drops cancelled timers)
        busy = max(at, busy) + b.seconds * 1000
        cpu += b.cpu
        handler += b.handler
        beats += 1
        if b.records:
            writing += 1
            writing_cpu += b.cpu
        if kind == 0:
            regular[i] = regular.get(i, 0) + 1
        else:
            acks += 1
        if decision is None and group.assignment_epoch == group.group_epoch:
            decision = busy
        if coord.stable():
            stable_at = busy
            break
        if expedite and b.changed:
            heapq.heappush(queue, (busy + ack_delay_ms, i, 1))  # acknowledges
        else:
            heapq.heappush(queue, (at + h if kind == 0 else busy + h, i, 0))
    if stable_at is None or decision is None:
        raise RuntimeError("the group did not become Stable within 20 heartbeat intervals")
    return {"start_to_decision_ms": decision, "decision_to_stable_ms": stable_at - decision,
            "rounds": max(regular.values()), "acks": acks, "cpu_ms": cpu * 1000, "handler_ms": handler * 1000,
            "writing_cpu_ms": writing_cpu * 1000, "beats": beats, "writing": writing, "members": members,
            "first_ms": first * 1000}


async def _cg_stabilize(sizes: list[int], per_member: int, interval_ms: int, runs: int, ack_delay_ms: float,
                        seed: int) -> dict[str, Any]:
    import random

    rng = random.Random(seed)
    out: dict[str, Any] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory() as d:
            coord = CgCoordinator(d, n * per_member, interval_ms)
            await coord.start()
            members = await coord.build(n - 1)
            for expedite in (True, False):
                mode = f"acks after {ack_delay_ms:g} ms" if expedite else "interval only"
                got: dict[str, list[dict[str, Any]]] = {"join": [], "leave": []}
                for run in range(runs):
                    joiner = CgMember(f"joiner-{int(expedite)}-{run}")
                    res = await _cg_episode(coord, members, joiner, interval_ms, expedite, rng, False, ack_delay_ms)
                    res["joiner_partitions"] = sum(len(ps) for ps in joiner.owned.values())
                    got["join"].append(res)
                    await coord.converge(res.pop("members"))
                    res = await _cg_episode(coord, members, joiner, interval_ms, expedite, rng, True, ack_delay_ms)
                    res.pop("members")
                    got["leave"].append(res)
                    await coord.converge(members)
                for what, rs in got.items():
                    out[f"{what}_{n}_{'ack' if expedite else 'interval'}"] = rs

                    def med(k: str, rs: list[dict[str, Any]] = rs) -> float:
                        return float(statistics.median(r[k] for r in rs))

                    worst = max(r["decision_to_stable_ms"] for r in rs)
                    extra = (f"; the joiner got {med('joiner_partitions'):.0f} partitions" if what == "join"
                             else f"; leave to decision {med('start_to_decision_ms'):.0f} ms")
                    print(f"stabilize {n:5d} members, {what:5s} ({mode}): decision to Stable "
                          f"{med('decision_to_stable_ms'):7.1f} ms (max {worst:7.1f}) = interval "
                          f"{med('decision_to_stable_ms') - interval_ms:+7.1f} ms; rounds {med('rounds'):.0f}, "
                          f"acks {med('acks'):.0f}; coordinator CPU {med('cpu_ms'):6.1f} ms in "
                          f"{med('beats'):.0f} heartbeats ({med('writing'):.0f} wrote records: "
                          f"{med('writing_cpu_ms'):.1f} ms); the {what} heartbeat {med('first_ms'):.2f} ms{extra}",
                          flush=True)
            coord.close()
    return out


def cg_stabilize(sizes: list[int], per_member: int, interval_ms: int, runs: int, ack_delay_ms: float = 0.0,
                 seed: int = 848) -> dict[str, Any]:
    """For each size n: n - 1 members Stable over one topic of n * per_member partitions, then one
    joins (and later leaves again): the time from the coordinator's decision to the group Stable,
    heartbeat rounds, and the coordinator's CPU time until then; medians of ``runs``."""
    return asyncio.run(_cg_stabilize(sizes, per_member, interval_ms, runs, ack_delay_ms, seed))


# -- the consumer group protocol through sockets ----------------------------------------------------
CG_HEARTBEAT, CG_DESCRIBE = 68, 69


class CgWireMember(CgMember):
    """A CgMember with its own connection, speaking ConsumerGroupHeartbeat v1 (the member id is
    the client's, as Kafka 4 clients do)."""

    def __init__(self, conn: kclient.Connection, member_id: str) -> None:
        super().__init__(member_id)
        self.conn = conn

    async def beat(self, always_owned: bool = False) -> tuple[bool, float]:
        """(partitions changed, seconds from request written to response read)."""
        import types

        req = self.request(always_owned)
        body = {"group_id": req.group_id, "member_id": req.member_id, "member_epoch": req.member_epoch,
                "instance_id": None, "rack_id": None, "rebalance_timeout": req.rebalance_timeout_ms,
                "subscribed_topic_names": req.subscribed_topic_names, "subscribed_topic_regex": None,
                "server_assignor": None,
                "topic_partitions": None if req.owned is None else [
                    {"topic_id": t, "partitions": sorted(ps)} for t, ps in req.owned.items()]}
        t0 = time.perf_counter()
        r = await self.conn.call(CG_HEARTBEAT, 1, body)
        took = time.perf_counter() - t0
        assignment = None if r.assignment is None else {
            tp.topic_id: frozenset(tp.partitions) for tp in r.assignment.topic_partitions}
        return self.answer(types.SimpleNamespace(error=r.error_code, error_message=r.error_message,
                                                 member_id=r.member_id, member_epoch=r.member_epoch,
                                                 assignment=assignment)), took


async def _cg_describe(conn: kclient.Connection) -> Any:
    r = await conn.call(CG_DESCRIBE, 0, {"group_ids": [CG_GROUP], "include_authorized_operations": False})
    return r.groups[0]


async def _cg_wire_join(admin: kclient.Connection, members: list[CgWireMember], joiner: CgWireMember, want: int,
                        h: float, rng: Any) -> float:
    """Members heartbeat once per interval ``h`` (seconds) at random phases and acknowledge a change
    of their partitions at once; an interval in, ``joiner`` joins. Milliseconds from the join's
    response to the response after which every member is at the join's epoch and the joiner holds
    ``want`` partitions, confirmed Stable by ConsumerGroupDescribe."""
    everyone = [*members, joiner]
    done = asyncio.Event()
    describing = asyncio.Lock()  # one request at a time on the admin connection
    stable_at: list[float] = []
    joined: list[float] = []

    async def check() -> None:
        if (joined and not done.is_set() and all(m.epoch == joiner.epoch for m in everyone)
                and sum(len(ps) for ps in joiner.owned.values()) >= want):
            at = time.perf_counter()
            async with describing:
                if done.is_set():
                    return
                g = await _cg_describe(admin)
            if g.group_state == "Stable" and g.group_epoch == joiner.epoch and not done.is_set():
                stable_at.append(at)
                done.set()

    async def pause(seconds: float) -> None:
        try:
            await asyncio.wait_for(done.wait(), max(0.0, seconds))
        except TimeoutError:
            pass

    async def member(m: CgWireMember, first: float) -> None:
        # never cancelled in a call: a connection has one request in flight, its answer must be read
        await pause(first)
        while not done.is_set():
            sent = time.perf_counter()
            changed, _took = await m.beat()
            await check()
            while changed and not done.is_set():  # acknowledge at once
                changed, _took = await m.beat()
                await check()
            await pause(sent + h - time.perf_counter())

    async def join() -> None:
        await asyncio.sleep(h)  # everyone is in its cadence
        await joiner.beat()
        joined.append(time.perf_counter())
        await member(joiner, h - (time.perf_counter() - joined[0]))

    tasks = [asyncio.ensure_future(member(m, rng.uniform(0, h))) for m in members]
    tasks.append(asyncio.ensure_future(join()))
    try:
        await asyncio.wait_for(asyncio.shield(done.wait()), 20 * h + 10)
    finally:
        done.set()
        await asyncio.gather(*tasks)
    if not stable_at:
        raise RuntimeError("the group did not become Stable within 20 heartbeat intervals")
    return (stable_at[0] - joined[0]) * 1000


async def _cg_wire_run(bs: str, n: int, partitions: int, interval_ms: int, seconds: float, runs: int,
                       seed: int) -> dict[str, Any]:
    import random
    import uuid

    rng = random.Random(seed)
    out: dict[str, Any] = {}
    c = await kclient.Connection.open(bs)
    r = await c.call(CREATE_TOPICS, 7, {"topics": [{"name": CG_TOPIC, "num_partitions": partitions,
                                                    "replication_factor": 1, "assignments": [], "configs": []}],
                                        "timeout": 120000, "validate_only": False})
    if r.topics[0].error_code:
        raise RuntimeError(f"CreateTopics: {r.topics[0].error_code!r} {r.topics[0].error_message}")
    admin = c
    conns: list[kclient.Connection] = []
    for start in range(0, n + runs, 100):
        conns += await asyncio.gather(*(kclient.Connection.open(bs, f"cg{i}")
                                        for i in range(start, min(n + runs, start + 100))))
    members = [CgWireMember(conns[i], str(uuid.uuid4())) for i in range(n - 1)]
    t0 = time.perf_counter()
    for start in range(0, len(members), 50):
        await asyncio.gather(*(m.beat() for m in members[start:start + 50]))

    async def converge(ms: list[CgWireMember]) -> None:
        for _ in range(50):
            changed = await asyncio.gather(*(m.beat() for m in ms))
            if not any(ch for ch, _ in changed) and not any(m.dirty for m in ms):
                g = await _cg_describe(admin)
                if g.group_state == "Stable":
                    return
        raise RuntimeError("the group did not become Stable")

    await converge(members)
    print(f"heartbeats-wire  group of {n - 1} members x {partitions} partitions Stable over sockets "
          f"(built in {time.perf_counter() - t0:.1f} s)", flush=True)
    h = interval_ms / 1000

    # 1. paced: every member once per interval, at its phase, owned partitions only when changed
    duration = max(seconds, 2 * h)
    lat: list[float] = []

    async def paced(m: CgWireMember, stop: float) -> None:
        await asyncio.sleep(rng.uniform(0, h))
        while True:
            sent = time.perf_counter()
            if sent >= stop:
                return
            changed, took = await m.beat()
            lat.append(took)
            if changed:
                raise RuntimeError("a steady-state heartbeat moved partitions")
            await asyncio.sleep(max(0.0, sent + h - time.perf_counter()))

    begin = time.perf_counter()
    await asyncio.gather(*(paced(m, begin + duration) for m in members))
    rate = (n - 1) / h
    out["paced"] = {"per_s": rate, "p50_ms": _pct(lat, 50) * 1000, "p99_ms": _pct(lat, 99) * 1000,
                    "max_ms": max(lat) * 1000}
    paced_ms = out["paced"]
    print(f"heartbeats-wire  {n - 1} members paced (each once per {interval_ms} ms): {rate:6.0f}/s offered  p50 "
          f"{paced_ms['p50_ms']:6.2f} ms  p99 {paced_ms['p99_ms']:6.2f} ms  max {paced_ms['max_ms']:6.2f} ms "
          f"({len(lat)} heartbeats; client and broker share the machine)", flush=True)

    # 2. saturated: every member sends its next heartbeat as soon as it has the answer to the last
    lat = []
    stop = time.perf_counter() + seconds

    async def flat_out(m: CgWireMember) -> None:
        while time.perf_counter() < stop:
            _changed, took = await m.beat()
            lat.append(took)

    begin = time.perf_counter()
    await asyncio.gather(*(flat_out(m) for m in members))
    rate = len(lat) / (time.perf_counter() - begin)
    out["saturated"] = {"per_s": rate, "p50_ms": _pct(lat, 50) * 1000, "p99_ms": _pct(lat, 99) * 1000}
    print(f"heartbeats-wire  {n - 1} members saturating: {rate:6.0f}/s  p50 {out['saturated']['p50_ms']:7.1f} ms  "
          f"p99 {out['saturated']['p99_ms']:7.1f} ms ({n - 1} heartbeats in flight: latency is queueing)", flush=True)

    # 3. a member joins the paced group; members acknowledge a change of partitions at once
    out["join"] = []
    for run in range(runs):
        joiner = CgWireMember(conns[n - 1 + run], str(uuid.uuid4()))
        took_ms = await _cg_wire_join(admin, members, joiner, partitions // n, h, rng)
        out["join"].append(took_ms)
        print(f"heartbeats-wire  join {run + 1}: from the join's response to Stable {took_ms:7.1f} ms = interval "
              f"{took_ms - interval_ms:+6.1f} ms", flush=True)
        # back to n - 1 members: the joiner leaves, everyone settles
        await joiner.conn.call(CG_HEARTBEAT, 1, {"group_id": CG_GROUP, "member_id": joiner.member_id,
                                                 "member_epoch": -1, "instance_id": None, "rack_id": None,
                                                 "rebalance_timeout": -1, "subscribed_topic_names": None,
                                                 "subscribed_topic_regex": None, "server_assignor": None,
                                                 "topic_partitions": None})
        await converge(members)
    if out["join"]:
        med = statistics.median(out["join"])
        print(f"heartbeats-wire  join to Stable: median {med:.1f} ms = interval {med - interval_ms:+.1f} ms "
              f"(max {max(out['join']):.1f} ms) over {runs} joins", flush=True)
    for conn in [*conns, admin]:
        await conn.close()
    return out


def cg_wire(members: int, partitions: int, interval_ms: int, seconds: float, runs: int) -> dict[str, Any] | None:
    """A broker with the consumer protocol on; ``members`` - 1 consumer-protocol members over
    sockets (one connection each, driven by this process): paced heartbeats, saturating heartbeats,
    and ``runs`` times a member joining to the group Stable."""
    min_interval = min(interval_ms, 5000)
    with peers.gregor("group.coordinator.rebalance.protocols=classic,consumer",
                      f"group.consumer.min.heartbeat.interval.ms={min_interval}",
                      f"group.consumer.heartbeat.interval.ms={interval_ms}",
                      f"group.consumer.max.heartbeat.interval.ms={max(interval_ms, 15000)}",
                      "group.initial.rebalance.delay.ms=0") as bs:
        return asyncio.run(_cg_wire_run(bs, members, partitions, interval_ms, seconds, runs, 848))


PARTS = ("gregor", "tansu", "assign", "heartbeats", "stabilize", "heartbeats-wire")
DEFAULT_PARTS = ("gregor", "tansu", "assign", "heartbeats", "stabilize")  # heartbeats-wire: when asked for


def _parts(values: list[str] | None) -> set[str]:
    if not values:
        return set(DEFAULT_PARTS)
    parts = {p.strip() for v in values for p in v.split(",") if p.strip()}
    unknown = parts - set(PARTS)
    if unknown:
        raise SystemExit(f"--only: unknown part(s) {', '.join(sorted(unknown))}; parts: {', '.join(PARTS)}")
    return parts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", default="10,100,1000")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--heartbeat-members", type=int, default=50)
    ap.add_argument("--load-records", type=int, default=1_000_000)
    ap.add_argument("--only", action="append", metavar="PART[,PART...]", help=f"parts: {', '.join(PARTS)}")
    ap.add_argument("--assign-members", type=int, default=1000)
    ap.add_argument("--assign-topics", type=int, default=10)
    ap.add_argument("--assign-partitions", type=int, default=1000, help="per topic")
    ap.add_argument("--assign-large-partitions", type=int, default=5000, help="per topic, the larger run")
    ap.add_argument("--assign-runs", type=int, default=7)
    ap.add_argument("--cg-heartbeat-members", default="100,1000", help="heartbeats: group sizes")
    ap.add_argument("--cg-stabilize-members", default="10,100,1000", help="stabilize: group sizes")
    ap.add_argument("--cg-partitions-per-member", type=int, default=10)
    ap.add_argument("--cg-rounds", type=int, default=5, help="heartbeats: rounds of every member per run")
    ap.add_argument("--cg-runs", type=int, default=5)
    ap.add_argument("--cg-interval-ms", type=int, default=5000, help="stabilize: heartbeat interval")
    ap.add_argument("--cg-ack-delay-ms", type=float, default=0.0,
                    help="stabilize: a client's time from a response that moved its partitions to its acknowledgment")
    ap.add_argument("--cg-wire-members", type=int, default=1000)
    ap.add_argument("--cg-wire-partitions", type=int, default=1000)
    ap.add_argument("--cg-wire-interval-ms", type=int, default=5000)
    ap.add_argument("--cg-wire-joins", type=int, default=3)
    args = ap.parse_args()
    parts = _parts(args.only)
    sizes = [int(x) for x in args.members.split(",")]
    results: dict[str, dict[str, float | None]] = {}
    targets = [("gregor", lambda: peers.gregor("group.initial.rebalance.delay.ms=0")), ("tansu", peers.tansu)]
    for name, ctx in targets:
        if name not in parts:
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
    if "assign" in parts:
        assign_bench(args.assign_members, args.assign_topics, args.assign_partitions, args.assign_large_partitions,
                     args.assign_runs)
    if "heartbeats" in parts:
        cg_heartbeats([int(x) for x in args.cg_heartbeat_members.split(",")], args.cg_partitions_per_member,
                      args.cg_rounds, args.cg_runs)
    if "stabilize" in parts:
        cg_stabilize([int(x) for x in args.cg_stabilize_members.split(",")], args.cg_partitions_per_member,
                     args.cg_interval_ms, args.cg_runs, args.cg_ack_delay_ms)
    if "heartbeats-wire" in parts:
        cg_wire(args.cg_wire_members, args.cg_wire_partitions, args.cg_wire_interval_ms, args.seconds,
                args.cg_wire_joins)
    if "gregor" in parts:
        seconds, size = load(args.load_records)
        print(f"gregor  load {args.load_records} commit records ({size:.0f} MB): {seconds:.2f} s, "
              f"{args.load_records / seconds:,.0f} records/s")
    if "gregor" in results and "tansu" in results:
        g, tr = results["gregor"], results["tansu"]
        print("gregor/tansu:")
        for k in g:
            gk, tk = g[k], tr.get(k)
            if gk and tk:
                better = "lower is better" if k.startswith("rebalance") or k.endswith("_ms") else "higher is better"
                print(f"  {k:22s} {gk / tk:8.2f}x  ({better})")
            else:
                print(f"  {k:22s}      n/a  (tansu: {tk})")


if __name__ == "__main__":
    main()
