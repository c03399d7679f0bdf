"""Consumer groups under load, for the cluster tests of group failover
(tests/cluster/test_group_failover.py): confluent-kafka consumers each on a thread of its own that
record what they observe, and the checks over those records.

A ``GroupConsumer`` subscribes (or assigns partitions itself, assign mode), consumes, and commits
the offsets it has consumed about once a second, synchronously (subscribed) or asynchronously
(assign mode). Everything is recorded with ``time.monotonic()`` on the consumer's own thread:

- ``events``: every assignment, revocation and loss the rebalance callbacks report (eager:
  the whole assignment; cooperative: the partitions added or taken away);
- ``commits``: every commit with when it was sent and answered, its offsets and its error;
- ``consumed``: every offset read per partition.

A member commits only partitions it owns, and commits its revoked partitions in ``on_revoke``
(the usual pattern), so the group's committed offsets only go forward if the coordinator keeps
what it acknowledged. ``jumps`` records every offset read other than the one after the last read
of its partition (a skip or a rewind).

``GROUP_LOAD_DEBUG=<directory>`` writes each consumer's librdkafka debug log (consumer, cgrp,
fetch, topic, metadata) to a file there, to find out afterwards what a client did.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from gregor.cluster.zk import znodes as zn
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for
from tests.support.cluster import BrokerCluster
from tests.support.waiting import wait_for

COMMIT_INTERVAL_S = 1.0


@dataclass(frozen=True)
class Ownership:
    """One member's ownership of one partition, from its on_assign to its on_revoke or on_lost
    (or to the end of its close(), ``how_ended`` "close", if no callback ended it)."""

    member: str
    partition: int
    start: float
    end: float
    how_ended: str


@dataclass(frozen=True)
class Commit:
    started: float  # when it was sent (async: when commit() was called)
    ended: float  # when the answer came (async: when on_commit heard it)
    offsets: dict[int, int]
    error: str | None  # the request's or any partition's error


@dataclass
class GroupConsumer:
    """One confluent-kafka consumer of ``topic`` in ``group`` on a thread of its own.

    ``strategy``: partition.assignment.strategy (``range``, ``cooperative-sticky``) of the classic
    protocol; ``protocol``: group.protocol (``classic``, or ``consumer``: KIP-848, the broker assigns);
    ``instance_id``: group.instance.id (a static member); ``assign``: the partitions of assign
    mode (no subscription; commits are then asynchronous)."""

    name: str
    bootstrap: str
    group: str
    topic: str
    strategy: str = "range"
    instance_id: str | None = None
    assign: list[int] | None = None
    protocol: str = "classic"
    events: list[tuple[float, str, list[int]]] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    consumed: dict[int, set[int]] = field(default_factory=dict)
    consume_errors: list[str] = field(default_factory=list)
    jumps: list[tuple[float, int, int, int]] = field(default_factory=list)  # (when, partition, after, read)
    failure: BaseException | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._owned: set[int] = set()
        self._positions: dict[int, int] = {}  # owned partition -> next offset to read
        self._last_read: dict[int, int] = {}
        self._async_sent: list[tuple[float, dict[int, int]]] = []
        self._thread = threading.Thread(target=self._run, name=f"consumer-{self.name}", daemon=True)
        self.closed_at: float | None = None

    # -- the consumer's thread ---------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100, "on_commit": self._on_commit}
        if self.protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf["partition.assignment.strategy"] = self.strategy
        if self.instance_id is not None:
            conf["group.instance.id"] = self.instance_id
        if debug_dir := os.environ.get("GROUP_LOAD_DEBUG"):  # librdkafka's debug log, one file per consumer
            logger = logging.getLogger(f"group_load.{self.name}")
            logger.propagate = False
            logger.setLevel(logging.DEBUG)
            handler = logging.FileHandler(Path(debug_dir) / f"{self.name}-{os.getpid()}-{id(self)}.log")
            handler.setFormatter(logging.Formatter("%(created).3f %(message)s"))
            logger.addHandler(handler)
            conf.update({"debug": "consumer,cgrp,fetch,topic,metadata", "logger": logger})
        return conf

    def _event(self, kind: str, partitions: list[TopicPartition]) -> None:
        parts = sorted(tp.partition for tp in partitions)
        with self._lock:
            self.events.append((time.monotonic(), kind, parts))
            if kind == "assign":
                self._owned.update(parts)
            else:
                self._owned.difference_update(parts)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._event("assign", partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # commit what was read of the partitions going away, then give them up
        revoked = {tp.partition for tp in partitions}
        with self._lock:
            final = {p: o for p, o in self._positions.items() if p in revoked}
        if final:
            self._commit_sync(consumer, final)
        with self._lock:
            for p in revoked:
                self._positions.pop(p, None)
        self._event("revoke", partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._positions.pop(tp.partition, None)
        self._event("lost", partitions)

    def _on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        if self.assign is None:
            return  # synchronous commits are recorded by _commit_sync
        now = time.monotonic()
        offsets = {tp.partition: tp.offset for tp in partitions}
        errors = [f"{tp.partition}: {tp.error}" for tp in partitions if tp.error is not None]
        error = str(err) if err is not None else ("; ".join(errors) if errors else None)
        with self._lock:
            sent = self._async_sent.pop(0)[0] if self._async_sent else now
            self.commits.append(Commit(sent, now, offsets, error))

    def _commit_sync(self, consumer: Consumer, offsets: dict[int, int]) -> None:
        started = time.monotonic()
        error: str | None = None
        try:
            done = consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                                   asynchronous=False)
            failed = [f"{tp.partition}: {tp.error}" for tp in done or [] if tp.error is not None]
            error = "; ".join(failed) if failed else None
        except KafkaException as e:
            error = str(e)
        with self._lock:
            self.commits.append(Commit(started, time.monotonic(), dict(offsets), error))

    def _commit(self, consumer: Consumer) -> None:
        with self._lock:
            offsets = {p: o for p, o in self._positions.items() if p in self._owned}
        if not offsets:
            return
        if self.assign is None:
            self._commit_sync(consumer, offsets)
            return
        with self._lock:
            self._async_sent.append((time.monotonic(), offsets))
        try:
            consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                            asynchronous=True)
        except KafkaException as e:  # refused before it is sent
            with self._lock:
                t, _ = self._async_sent.pop()
                self.commits.append(Commit(t, time.monotonic(), offsets, str(e)))

    def _run(self) -> None:
        consumer = Consumer(self._config())
        try:
            if self.assign is None:
                consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                   on_lost=self._on_lost)
            else:
                tps = [TopicPartition(self.topic, p) for p in self.assign]
                self._event("assign", tps)
                consumer.assign(tps)  # from the committed offsets (earliest where none)
            last_commit = time.monotonic()
            while not self._stop.is_set():
                for m in consumer.consume(500, 0.2):
                    if m.error() is not None:
                        self.consume_errors.append(str(m.error()))
                        continue
                    p, o = m.partition(), m.offset()
                    with self._lock:
                        if (last := self._last_read.get(p)) is not None and o != last + 1:
                            self.jumps.append((time.monotonic(), p, last, o))  # forward: a skip; back: a rewind
                        self._last_read[p] = o
                        self.consumed.setdefault(p, set()).add(o)
                        if p in self._owned:
                            self._positions[p] = o + 1
                if time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
                    last_commit = time.monotonic()
                    self._commit(consumer)
            if self.assign is not None:
                consumer.poll(1.0)  # the answers of the last asynchronous commits
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.failure = e
        finally:
            consumer.close()  # eager and cooperative members hear on_revoke here
            with self._lock:
                self.closed_at = time.monotonic()

    # -- the test's side ---------------------------------------------------------------------
    def start(self) -> GroupConsumer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60) -> None:
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} did not close within {timeout} s"
        assert self.failure is None, f"{self.name}: {self.failure!r}"

    def stop_after_failure(self, timeout: float = 20) -> None:
        """Stop without raising: for a test that is already failing, whose own error must not be
        hidden by a consumer whose close waits on a coordinator the test left unavailable."""
        self._stop.set()
        self._thread.join(timeout)

    def owned(self) -> set[int]:
        with self._lock:
            return set(self._owned)

    def successes_after(self, t: float) -> list[Commit]:
        """Commits sent after ``t`` and answered without error."""
        with self._lock:
            return [c for c in self.commits if c.error is None and c.started > t]

    def answered_ok_after(self, t: float) -> list[Commit]:
        """Commits answered without error after ``t`` (sent before or after)."""
        with self._lock:
            return [c for c in self.commits if c.error is None and c.ended > t]

    def acknowledged_before(self, t: float) -> dict[int, int]:
        """The highest offset per partition of the commits answered without error before ``t``."""
        out: dict[int, int] = {}
        with self._lock:
            for c in self.commits:
                if c.error is None and c.ended < t:
                    for p, o in c.offsets.items():
                        out[p] = max(out.get(p, -1), o)
        return out

    def highest_acknowledged(self) -> dict[int, int]:
        return self.acknowledged_before(float("inf"))

    def read(self) -> dict[int, set[int]]:
        with self._lock:
            return {p: set(s) for p, s in self.consumed.items()}

    def assignments_after_first(self) -> int:
        """on_assign calls after the first (each one a rebalance that gave this member partitions)."""
        with self._lock:
            return max(0, sum(1 for _t, kind, _p in self.events if kind == "assign") - 1)

    def ownerships(self) -> list[Ownership]:
        """Every interval during which this member owned a partition (closed at close() if the
        callbacks did not close it)."""
        out: list[Ownership] = []
        since: dict[int, float] = {}
        with self._lock:
            events = list(self.events)
            end_of_life = self.closed_at if self.closed_at is not None else float("inf")
        for t, kind, parts in events:
            for p in parts:
                if kind == "assign":
                    since.setdefault(p, t)
                elif p in since:
                    out.append(Ownership(self.name, p, since.pop(p), t, kind))
        out += [Ownership(self.name, p, t, end_of_life, "close") for p, t in since.items()]
        return out


# -- checks over the records -------------------------------------------------------------------
def overlapping_ownerships(members: list[GroupConsumer]) -> list[tuple[Ownership, Ownership]]:
    """Pairs of intervals in which two different members owned the same partition at once."""
    by_partition: dict[int, list[Ownership]] = {}
    for m in members:
        for o in m.ownerships():
            by_partition.setdefault(o.partition, []).append(o)
    bad = []
    for owns in by_partition.values():
        owns.sort(key=lambda o: o.start)
        for i, a in enumerate(owns):
            for b in owns[i + 1:]:
                if b.start >= a.end:
                    break
                if b.member != a.member:
                    bad.append((a, b))
    return bad


def read_by_group(members: list[GroupConsumer]) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for m in members:
        for p, offsets in m.read().items():
            out.setdefault(p, set()).update(offsets)
    return out


Gaps = dict[int, list[int]]  # partition -> offsets nobody read


def gaps(read: dict[int, set[int]], ends: dict[int, int]) -> Gaps:
    """Per partition, the first offsets below its end that nobody read (empty: none missing)."""
    out = {}
    for p, end in ends.items():
        missing = sorted(set(range(end)) - read.get(p, set()))
        if missing:
            out[p] = missing[:10]
    return out


def acknowledged_before(members: list[GroupConsumer], t: float) -> dict[int, int]:
    out: dict[int, int] = {}
    for m in members:
        for p, o in m.acknowledged_before(t).items():
            out[p] = max(out.get(p, -1), o)
    return out


# -- the cluster, seen by admin clients and ZooKeeper -----------------------------------------
def commits_going_backwards(samples: list[tuple[float, dict[int, int]]]) -> list[str]:
    """Every time a partition's committed offset, sampled over time as (when, {partition: offset}),
    was read lower than before (-1001, nothing committed, is never seen after a commit)."""
    out: list[str] = []
    highest: dict[int, int] = {}
    for t, offsets in samples:
        for p, o in offsets.items():
            if p in highest and o < highest[p]:
                out.append(f"partition {p}: committed {o} at {t:.3f} after {highest[p]}")
            highest[p] = max(highest.get(p, o), o)
    return out


def committed(bootstrap: str, group: str, topic: str, partitions: int, timeout: float = 10) -> dict[int, int]:
    """The group's committed offsets (-1001 where none), from OffsetFetch at the coordinator the
    cluster names (Gregor's admin client; AdminError on any error, NOT_COORDINATOR included).

    Not librdkafka's list_consumer_group_offsets: on a NOT_COORDINATOR answer, which a coordinator
    moving in a controlled shutdown gives, librdkafka 2.16 calls rd_kafka_cgrp_op on an admin
    client's null group handle (confluentinc/librdkafka#5040) and the process dies of SIGSEGV on a
    librdkafka thread (signals are blocked there: no faulthandler output); it killed pytest workers
    running test_group_failover's rolling restart."""
    from gregor.admin.client import AdminClient as GregorAdmin
    from gregor.admin.groups_cli import committed_offsets

    admin = GregorAdmin(bootstrap, timeout=timeout)
    try:
        got = committed_offsets(admin, group)
    finally:
        admin.close()
    return {p: got[(topic, p)][0] if (topic, p) in got else -1001 for p in range(partitions)}


def described(bootstrap: str, group: str, timeout: float = 10) -> tuple[str, int]:
    """(state name, number of members) as DescribeGroups answers (Gregor's admin client, for the
    reason ``committed`` gives; AdminError on an error)."""
    from gregor.admin.client import AdminClient as GregorAdmin
    from gregor.admin.groups_cli import _describe_group

    admin = GregorAdmin(bootstrap, timeout=timeout)
    try:
        g = _describe_group(admin, group)
    finally:
        admin.close()
    return g.group_state.upper().replace("PREPARINGREBALANCE", "PREPARING_REBALANCE").replace(
        "COMPLETINGREBALANCE", "COMPLETING_REBALANCE"), len(g.members)


def partition_state(zk: KazooClient, topic: str, partition: int) -> zn.PartitionState | None:
    path = zn.state_path(topic, partition)
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        return None
    return zn.PartitionState.decode(data, stat.version, path)


def partition_states(cluster: BrokerCluster, topic: str, partitions: int) -> dict[int, zn.PartitionState | None]:
    with cluster.zk_client() as zk:
        return {p: partition_state(zk, topic, p) for p in range(partitions)}


def leader_of(cluster: BrokerCluster, topic: str, partition: int) -> int:
    """The partition's leader as ZooKeeper says (-1: none, or no such partition)."""
    with cluster.zk_client() as zk:
        st = partition_state(zk, topic, partition)
    return -1 if st is None else st.leader


def wait_full_isr(cluster: BrokerCluster, topic: str, partitions: int, replicas: int = 3,
                  timeout: float = 60) -> dict[int, zn.PartitionState]:
    """Until every partition of ``topic`` has a leader and ``replicas`` replicas in its ISR."""
    def check() -> dict[int, zn.PartitionState] | None:
        sts = partition_states(cluster, topic, partitions)
        if all(st is not None and st.leader >= 0 and len(st.isr) == replicas for st in sts.values()):
            return sts  # type: ignore[return-value]
        return None
    return wait_for(check, timeout, f"every partition of {topic} led, with {replicas} replicas in its ISR")


def offsets_topic_ready(cluster: BrokerCluster, partitions: int, replicas: int,
                        timeout: float = 60) -> dict[int, zn.PartitionState]:
    """Create ``__consumer_offsets`` (a FindCoordinator creates it) and wait until every partition
    is led with ``replicas`` replicas in its ISR; the partitions' states."""
    from gregor.admin.client import AdminClient as GregorAdmin

    admin = GregorAdmin(cluster.broker(cluster.alive_ids()[0]).bootstrap)
    try:
        admin.find_coordinator("any-group")
    finally:
        admin.close()
    return wait_full_isr(cluster, OFFSETS_TOPIC, partitions, replicas, timeout)


def groups_on(partitions: set[int], offsets_partitions: int, prefix: str, count: int) -> list[str]:
    """``count`` group ids ``<prefix>-<i>`` whose __consumer_offsets partition is in ``partitions``."""
    found: list[str] = []
    for i in range(100000):
        g = f"{prefix}-{i}"
        if partition_for(g, offsets_partitions) in partitions:
            found.append(g)
            if len(found) == count:
                break
    return found
