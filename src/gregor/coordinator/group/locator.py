"""Where a group is coordinated and, when it is not served, why, in words an operator can act on.

A group's coordinator is the leader of ``__consumer_offsets`` partition ``partition_for(group)``.
Every way that can fail has its own reason, given to the client where the API has an error
message (FindCoordinator v1+), to ``gregor groups coordinator`` (which asks FindCoordinator), and
to the broker log once per situation (``ReasonLog``), not once per request:

- the offsets topic does not exist yet, and fewer brokers are alive than
  ``offsets.topic.replication.factor`` (the one-broker development cluster with Kafka's default
  of 3): the reason says how many are needed and which are registered;
- the group's partition has no leader: being elected from a live ISR replica (a moment), or every
  ISR replica is offline and ``unclean.leader.election.enable=false`` keeps the other replicas out
  (the group waits, by design, for one of the named brokers to return);
- the partition is led here and its shard failed to load (the load error), or is loading
  (progress: the group is served once it ends; not an error).

The functions here are pure; ``CoordinatorLocator`` feeds them the cluster's state and the
service's shards, on one node as in a cluster (on one node every partition is led here).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gregor.cluster.metadata import ClusterMetadata
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode, KafkaError

REPEAT_S = 300.0  # a reason that persists is logged again this often
RELOAD_BACKOFF_S = 5.0  # a shard that failed to load is loaded again this often


@dataclass(frozen=True, slots=True)
class CoordinatorLocation:
    """``node_id`` -1 when the group has no coordinator now; ``reason`` says why (or, with no
    error, a note such as the load progress of the coordinator's shard)."""

    partition: int
    node_id: int
    error: ErrorCode
    reason: str | None = None


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def offsets_topic_short_of_brokers(replication_factor: int, live: Sequence[int]) -> str | None:
    """The reason ``__consumer_offsets`` cannot be created yet, or None if it can."""
    if len(live) >= replication_factor:
        return None
    return (f"offsets topic needs {replication_factor} live brokers (offsets.topic.replication.factor="
            f"{replication_factor}), {len(live)} registered: {_ids(sorted(live))}; {OFFSETS_TOPIC} is created "
            f"when {replication_factor - len(live)} more join (or set offsets.topic.replication.factor="
            f"{max(len(live), 1)})")


def leaderless_reason(partition: int, replicas: Sequence[int], isr: Sequence[int], live: Sequence[int],
                      unclean: bool) -> str:
    """Why partition ``partition`` of the offsets topic has no leader, and what brings it back."""
    name = f"{OFFSETS_TOPIC}-{partition}"
    live_set = set(live)
    live_isr = [b for b in isr if b in live_set]
    live_replicas = [b for b in replicas if b in live_set]
    where = f"replicas [{_ids(replicas)}], ISR [{_ids(isr)}], live brokers [{_ids(sorted(live))}]"
    if live_isr:
        return f"{name} has no leader yet: one is being elected from the live ISR replicas [{_ids(live_isr)}] ({where})"
    if not replicas:
        return f"{name} has no replicas assigned yet ({where})"
    if not isr:
        return f"{name} has no leader yet: its first election has not happened ({where})"
    if unclean and live_replicas:
        return (f"{name} has no leader: every ISR replica is offline; unclean.leader.election.enable=true lets "
                f"one of [{_ids(live_replicas)}] take over (committed offsets may be lost) ({where})")
    back = f"broker {isr[0]} returns" if len(isr) == 1 else f"one of brokers [{_ids(isr)}] returns"
    return (f"{name} has no leader: every ISR replica is offline and unclean.leader.election.enable=false "
            f"keeps the other replicas out; the group is served again when {back} ({where})")


def load_progress_note(name: str, done: int, total: int) -> str:
    pct = 100 if total <= 0 else min(100, done * 100 // total)
    return f"{name} is loading: {pct}% ({done} of {total} offsets replayed); the group is served once it ends"


class ReasonLog:
    """Logs why something is unavailable once while the reason stays the same (per key), again
    when it changes, and every ``repeat_s`` while it lasts: a broker answering thousands of
    lookups a second for a stuck partition says so once, not thousands of times."""

    def __init__(self, logger: logging.Logger, repeat_s: float = REPEAT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._repeat_s = repeat_s
        self._clock = clock
        self._last: dict[object, tuple[str, float]] = {}

    def note(self, key: object, message: str, level: int = logging.WARNING) -> bool:
        """Log ``message`` unless it was the last one logged for ``key`` less than ``repeat_s``
        ago; returns whether it was logged."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and last[0] == message and now - last[1] < self._repeat_s:
            return False
        self._last[key] = (message, now)
        self._log.log(level, "%s", message)
        return True

    def clear(self, key: object, resolved: str | None = None) -> None:
        """The situation of ``key`` is over (logs ``resolved`` if a reason had been logged)."""
        if self._last.pop(key, None) is not None and resolved:
            self._log.info("%s", resolved)


class CoordinatorShards(Protocol):
    """What the locator reads of the coordinator service."""

    reasons: ReasonLog

    def partition_for(self, group_id: str) -> int: ...

    def shard_status(self, partition: int) -> tuple[str, str | None, str | None]: ...

    def offsets_partitions(self) -> int: ...

    def offsets_topic_config(self, key: str) -> Any: ...

    def ensure_topic(self) -> None: ...


class CoordinatorLocator:
    """FindCoordinator's reasoning: which broker coordinates a group, or why none does.
    ``offsets_replication_factor`` is the replication factor ``__consumer_offsets`` gets here (on
    one node 1, whatever the configuration says)."""

    def __init__(self, shards: CoordinatorShards, cluster: ClusterMetadata, config: Any,
                 offsets_replication_factor: int) -> None:
        self.shards = shards
        self.cluster = cluster
        self.config = config
        self.offsets_replication_factor = offsets_replication_factor

    def locate(self, group_id: str) -> CoordinatorLocation:
        """The broker that coordinates ``group_id``, or why none does; the reasons go to the log
        once per situation."""
        reasons = self.shards.reasons
        partitions = self.shards.offsets_partitions()
        if partitions <= 0:
            return self._offsets_topic_missing()
        reasons.clear("offsets-topic", f"{OFFSETS_TOPIC} exists; groups can be coordinated")
        partition = self.shards.partition_for(group_id)
        lp = self.cluster.partition(OFFSETS_TOPIC, partition)
        if lp.leader < 0:
            live = [b.node_id for b in self.cluster.brokers()]
            unclean = self.shards.offsets_topic_config("unclean.leader.election.enable")
            if unclean is None:
                unclean = self.config["unclean.leader.election.enable"]
            reason = leaderless_reason(partition, lp.replicas, lp.isr, live, unclean in (True, "true"))
            reasons.note(("leaderless", partition), reason)
            return CoordinatorLocation(partition, -1, ErrorCode.coordinator_not_available, reason)
        reasons.clear(("leaderless", partition), f"{OFFSETS_TOPIC}-{partition} is led by broker {lp.leader} "
                      "again; its groups can be coordinated")
        if lp.leader != self.cluster.node_id:
            return CoordinatorLocation(partition, lp.leader, ErrorCode.none)
        state, name, detail = self.shards.shard_status(partition)
        if state == "failed":
            reason = f"{name} failed to load here (retried every {RELOAD_BACKOFF_S:.0f} s): {detail}"
            reasons.note(("failed", partition), reason)
            return CoordinatorLocation(partition, -1, ErrorCode.coordinator_not_available, reason)
        # loading: served once loaded (the note says how far it got); absent: elected a moment ago,
        # the shard starts loading at once
        return CoordinatorLocation(partition, lp.leader, ErrorCode.none, detail if state == "loading" else None)

    def _offsets_topic_missing(self) -> CoordinatorLocation:
        live = [b.node_id for b in self.cluster.brokers()]
        reason = offsets_topic_short_of_brokers(self.offsets_replication_factor, live)
        if reason is not None:
            self.shards.reasons.note("offsets-topic", reason)
            return CoordinatorLocation(-1, -1, ErrorCode.coordinator_not_available, reason)
        try:
            self.shards.ensure_topic()
            reason = f"{OFFSETS_TOPIC} is being created"
        except KafkaError as e:
            reason = f"{OFFSETS_TOPIC} is being created: {e.message}"
        self.shards.reasons.note("offsets-topic", reason, logging.INFO)
        return CoordinatorLocation(-1, -1, ErrorCode.coordinator_not_available, reason)
