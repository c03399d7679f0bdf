"""Drive a group coordinator shard without network or event loop (Kafka:
GroupMetadataManagerTestContext, MockCoordinatorTimer): a helper for the tests in this folder,
not a test module.

``GroupShardHarness`` does what the runtime does with an operation's result, synchronously:
records go through the real encoders into ``log`` and, unless the result says their state is
already applied, back through the decoders into ``replay``; then the completions the operation
deferred run. ``sleep(ms)`` advances the manual clock and runs the timers that are due as
operations. ``reload()`` builds a fresh shard from ``log`` with the runtime's own loader
reduction (newest value per key), so every test also checks the ``__consumer_offsets`` formats and
that loading gives back what was written.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gregor.coordinator.group.api import (
    CommitPartition,
    CommitRequest,
    HeartbeatRequest,
    JoinRequest,
    LeaveRequest,
    LeavingMember,
    SyncRequest,
)
from gregor.coordinator.group.context import GroupConfig
from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard, ShardCollaborators
from gregor.coordinator.runtime import loader
from gregor.coordinator.runtime.result import CoordinatorResult, Deferred
from gregor.coordinator.runtime.timer import ManualClock, ManualTimer
from gregor.protocol.consumer_offsets import decode_key, decode_value, encode_key, encode_value

DEFAULT = GroupConfig(initial_rebalance_delay_ms=0)


class TimedHarness:
    """What both shard harnesses share: a manual clock and timer, and ``run`` for a result."""

    clock: ManualClock
    timer: ManualTimer

    def run(self, result: CoordinatorResult[Any]) -> Any:
        raise NotImplementedError

    def sleep(self, ms: int) -> list[Any]:
        """Advance the clock, fire due timers as operations; returns the records they wrote."""
        self.clock.now_ms += ms
        records: list[Any] = []
        while True:
            due = self.timer.pop_due()
            if not due:
                return records
            for _key, op in due:
                result = op()
                if isinstance(result, CoordinatorResult):
                    self.run(result)
                    records += result.records


class GroupShardHarness(TimedHarness):
    def __init__(self, config: GroupConfig = DEFAULT, topics: dict[str, int] | None = None) -> None:
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.topics = topics
        self.config = config
        self.shard = self._new_shard(self.timer)
        self.shard.on_loaded()
        self.log: list[tuple[bytes, bytes | None]] = []  # every record written, encoded
        self.last_records: list[Any] = []

    def _collaborators(self) -> ShardCollaborators:
        if self.topics is None:
            return ShardCollaborators()
        topics = self.topics
        return ShardCollaborators(topic_exists=lambda t, p: t in topics and 0 <= p < topics[t])

    def _new_shard(self, timer: ManualTimer) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(0, self.config, self.clock, timer, self._collaborators())

    # -- running operations ------------------------------------------------------------------
    def run(self, result: CoordinatorResult[Any]) -> Any:
        written = []
        for key, value in result.records:
            kb, vb = encode_key(key), encode_value(value)
            self.log.append((kb, vb))
            written.append((kb, vb))
        if result.replay_records:
            for kb, vb in written:
                k = decode_key(kb)
                self.shard.replay(k, decode_value(k, vb))
        for fn in self.shard.take_completions():
            fn(None)
        self.last_records = result.records
        return result.response

    def load_fresh(self, timer: ManualTimer | None = None) -> GroupCoordinatorShard:
        """A new shard loaded from everything written so far, as the runtime's loader loads a
        partition (newest value per key, in log order), then told it is loaded."""
        shard = self._new_shard(timer if timer is not None else ManualTimer(self.clock))
        latest: dict[bytes, bytes | None] = {}
        loader.keep_newest(latest, self.log)
        loader.replay_newest(shard, RECORD_SERDE, latest, "__consumer_offsets-0")
        shard.on_loaded()
        return shard

    def reload(self) -> GroupCoordinatorShard:
        """Continue on a shard freshly loaded from the log (a restart)."""
        self.timer = ManualTimer(self.clock)
        self.shard = self.load_fresh(self.timer)
        return self.shard

    # -- request helpers ---------------------------------------------------------------------
    def join(self, group: str = "g", member_id: str = "", protocols: list[tuple[str, bytes]] | None = None,
             instance: str | None = None, session: int = 10_000, rebalance: int = 30_000,
             require_known: bool = True, protocol_type: str = "consumer", client_id: str = "client") -> Any:
        req = JoinRequest(group, member_id, instance, session, rebalance, protocol_type,
                          protocols if protocols is not None else [("range", b"meta")], client_id, "/127.0.0.1",
                          require_known)
        return _deferred(self.run(self.shard.join_group(req)))

    def join_new(self, group: str = "g", **kw: Any) -> tuple[str, Deferred[Any]]:
        """Join as a new dynamic member (MEMBER_ID_REQUIRED round trip); returns (id, pending join)."""
        first = self.join(group, **kw).result()
        assert first.error == 79, first  # MEMBER_ID_REQUIRED
        second = self.join(group, member_id=first.member_id, **kw)
        return first.member_id, second

    def sync(self, group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None,
             instance: str | None = None, protocol_type: str | None = None, protocol_name: str | None = None) -> Any:
        return _deferred(self.run(self.shard.sync_group(SyncRequest(group, generation, member_id, instance,
                                                                    protocol_type, protocol_name, assignments or {}))))

    def heartbeat(self, group: str, generation: int, member_id: str, instance: str | None = None) -> Any:
        return self.run(self.shard.heartbeat(HeartbeatRequest(group, generation, member_id, instance)))

    def leave(self, group: str, *members: tuple[str, str | None]) -> Any:
        return self.run(self.shard.leave_group(LeaveRequest(group, [LeavingMember(m, i) for m, i in members])))

    def commit(self, group: str, offsets: dict[tuple[str, int], int], generation: int = -1, member_id: str = "",
               metadata: str = "", instance: str | None = None, retention_ms: int = -1) -> Any:
        parts = [CommitPartition(t, p, o, -1, metadata) for (t, p), o in offsets.items()]
        return self.run(self.shard.commit_offsets(CommitRequest(group, generation, member_id, instance, parts,
                                                                retention_ms)))

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        return {tp: v.offset for tp, v in self.shard.fetch_offsets(group, None) if v is not None}

    def state(self, group: str = "g") -> str:
        return self.shard.describe_group(group).state

    def with_config(self, **kw: Any) -> GroupShardHarness:
        return GroupShardHarness(replace(self.config, **kw), self.topics)


def stable_group(h: GroupShardHarness, n: int = 2, group: str = "g") -> tuple[list[str], int]:
    """n members join in one generation and sync: returns (member ids, generation).
    Every member first gets its id (MEMBER_ID_REQUIRED); the rebalance completes when the last
    pending member has joined."""
    ids = [h.join(group).member_id for _ in range(n)]
    pending = [h.join(group, member_id=m) for m in ids]
    results = [d.result() for d in pending]
    gen = results[0].generation_id
    assert all(r.generation_id == gen and r.error == 0 for r in results), results
    leader = results[0].leader
    syncs = {mid: h.sync(group, gen, mid, {m: m.encode() for m in ids} if mid == leader else None) for mid in ids}
    assert h.state(group) == "Stable"
    assert all(s.result().assignment == mid.encode() for mid, s in syncs.items())
    return ids, gen


class _Immediate(Deferred[Any]):
    """An answer given at once, shaped like a deferred one; attribute access reads the answer."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result(), name)


def _deferred(response: Any) -> Any:
    if isinstance(response, Deferred):
        return response
    d = _Immediate()
    d.complete(response)
    return d
