"""A consumer-protocol group (KIP-848) lives through its coordinator moving to another broker.

Three real brokers over a real ZooKeeper with ``group.coordinator.rebalance.protocols=classic,consumer``;
``__consumer_offsets`` and the data topic have three replicas. The coordinator writes every change
of a consumer group as ConsumerGroup* records and the broker that takes the group's
``__consumer_offsets`` partition over replays them, so its members should go on where they were:
same member ids, same member epochs, no new group epoch, nobody giving partitions up.

A group of three librdkafka members (``group.protocol=consumer``, one static with
``group.instance.id``) reads a 12-partition topic a producer keeps writing to, committing every
second (tests/support/group_load.py records what each member observes). A watch samples the group
as ConsumerGroupDescribe shows it, and its committed offsets, every half second.

- The coordinator is SIGKILLed: every member commits again at the new coordinator, the group is
  Stable there with the same members at epochs no lower than before and the same group epoch, no
  member saw a revocation, a loss or a new assignment, no partition had two owners, no committed
  offset went backwards, every message is read.
- A rolling restart (controlled shutdowns, the coordinator first): the same, at every step.
- The coordinator is SIGKILLed in the middle of a rebalance (a fourth member joined, the others are
  still revoking what it is to get): the new coordinator carries on from the replayed pending
  revocations; the newcomer gets its partitions only once they are given up; one group epoch for
  the join, none for the move.

Times from the kill to each member's first successful commit are printed (pytest -s); they are
observations, not assertions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gregor.admin.client import AdminClient as GregorAdmin
from gregor.admin.groups_cli import committed_offsets
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for
from tests.support.cluster import BrokerCluster
from tests.support.group_checks import (
    FAILOVER_OFFSETS_PARTITIONS,
    LeaderWatch,
    Snapshot,
    bootstrap_of,
    check_nothing_skipped,
    controller_of,
    coordinator,
    snapshot,
    start_cluster,
    wait_for,
)
from tests.support.group_load import (
    Gaps,
    GroupConsumer,
    acknowledged_before,
    commits_going_backwards,
    gaps,
    groups_on,
    offsets_topic_ready,
    overlapping_ownerships,
    read_by_group,
    wait_full_isr,
)
from tests.support.replication import ContinuousProducer, create_topic, high_watermarks, last_acked

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 12
RECOVERY_S = 60
# the consumer protocol on, with quick sessions (tests/integration/test_consumer_protocol.py)
CONSUMER_PROTOCOL = {
    "group.coordinator.rebalance.protocols": "classic,consumer",
    "group.consumer.min.heartbeat.interval.ms": "250", "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "6000",
}


def settled(bootstrap: str, group: str, n: int) -> Snapshot | None:
    s = snapshot(bootstrap, group)
    return s if s is not None and s.settled(n) else None


def committed_now(bootstrap: str, group: str, topic: str) -> dict[int, int] | None:
    """The group's committed offsets (OffsetFetch at its coordinator); None when it cannot be asked."""
    admin = GregorAdmin(bootstrap, timeout=5)
    try:
        got = committed_offsets(admin, group)
    except Exception:  # noqa: BLE001
        return None
    finally:
        admin.close()
    return {p: o for (t, p), (o, _meta) in got.items() if t == topic}


class GroupWatch:
    """Every half second, on a thread of its own: the group as ConsumerGroupDescribe shows it and
    its committed offsets (a sample that cannot be taken is skipped)."""

    def __init__(self, cluster: BrokerCluster, group: str, topic: str) -> None:
        self.cluster = cluster
        self.group = group
        self.topic = topic
        self.snapshots: list[Snapshot] = []
        self.commits: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="group-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            alive = self.cluster.alive_ids()
            if alive:
                bootstrap = bootstrap_of(self.cluster, alive)
                if (s := snapshot(bootstrap, self.group)) is not None:
                    self.snapshots.append(s)
                if (c := committed_now(bootstrap, self.group, self.topic)) is not None:
                    self.commits.append((time.monotonic(), c))
            self._stop.wait(0.5)

    def __enter__(self) -> GroupWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def backwards(self) -> list[str]:
        """Every time a partition's committed offset was read lower than before."""
        return commits_going_backwards(self.commits)

    def regressions(self, since: float) -> list[str]:
        """From ``since`` on: a member whose epoch was seen lower than before (it started again),
        a member id that appeared or disappeared, a group epoch that went down."""
        out: list[str] = []
        seen = [s for s in self.snapshots if s.at >= since]
        for a, b in zip(seen, seen[1:], strict=False):
            if set(a.members) != set(b.members):
                out.append(f"members changed at {b.at:.3f}: {a.brief()} -> {b.brief()}")
            for mid, m in b.members.items():
                if mid in a.members and m.epoch < a.members[mid].epoch:
                    out.append(f"{m.client_id} epoch {a.members[mid].epoch} -> {m.epoch} at {b.at:.3f}")
            if b.group_epoch < a.group_epoch:
                out.append(f"group epoch {a.group_epoch} -> {b.group_epoch} at {b.at:.3f}")
        return out

    def coordinators(self) -> list[int]:
        out: list[int] = []
        for s in self.snapshots:
            if not out or out[-1] != s.coordinator:
                out.append(s.coordinator)
        return out


def cli_describe(bootstrap: str, group: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "gregor", "groups", "describe", group, "--json",
                          "--bootstrap-server", bootstrap], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# -- the load ---------------------------------------------------------------------------------------
def start_members(bootstrap: str, group: str, topic: str, prefix: str) -> list[GroupConsumer]:
    members = [GroupConsumer(f"{prefix}-static", bootstrap, group, topic, protocol="consumer", instance_id="static-1"),
               GroupConsumer(f"{prefix}-dynamic-1", bootstrap, group, topic, protocol="consumer"),
               GroupConsumer(f"{prefix}-dynamic-2", bootstrap, group, topic, protocol="consumer")]
    for m in members:
        m.start()
    return members


def wait_settled(cluster: BrokerCluster, group: str, members: list[GroupConsumer], what: str,
                 since: float = 0) -> Snapshot:
    """The group Stable with every member at its target, each member owning what the coordinator
    says it holds, and each with a commit acknowledged after ``since``."""
    by_client = {m.name: m for m in members}

    def check() -> Snapshot | None:
        s = settled(bootstrap_of(cluster, cluster.alive_ids()), group, len(members))
        if s is None or {m.client_id for m in s.members.values()} != set(by_client):
            return None
        if any(by_client[m.client_id].owned() != m.assignment for m in s.members.values()):
            return None
        if not all(m.successes_after(since) for m in members):
            return None
        return s

    def explain() -> str:
        s = snapshot(bootstrap_of(cluster, cluster.alive_ids()), group)
        return (f"{s.brief() if s else 'not described'}; owned {[(m.name, sorted(m.owned())) for m in members]}; "
                f"last commit errors {[(m.name, [c.error for c in m.commits][-2:]) for m in members]}")

    return wait_for(check, RECOVERY_S, what, explain)


def drain(members: list[GroupConsumer], prod: ContinuousProducer, topic: str, bootstrap: str,
          acked_before: dict[int, int], group: str) -> tuple[dict[int, int], Gaps]:
    """Stop producing; the group reads every partition up to its end and commits the ends, which are
    no lower than ``acked_before``. The ends and the offsets nobody read."""
    prod.stop()
    assert not prod.failed, prod.failed[:5]
    ends = high_watermarks(bootstrap, topic, PARTITIONS, timeout=60)
    assert ends == last_acked(prod), f"log ends {ends}, acknowledged {last_acked(prod)}"

    def at_the_end() -> bool:
        read = read_by_group(members)
        return all(end == 0 or max(read.get(p, {-1})) >= end - 1 for p, end in ends.items())

    wait_for(at_the_end, RECOVERY_S, f"every partition read up to its end {ends}")
    wait_for(lambda: committed_now(bootstrap, group, topic) == ends, RECOVERY_S, f"the ends {ends} committed",
             lambda: f"committed {committed_now(bootstrap, group, topic)}")
    lower = {p: (ends[p], o) for p, o in acked_before.items() if ends[p] < o}
    assert not lower, f"committed offsets below commits acknowledged before: {lower}"
    return ends, gaps(read_by_group(members), ends)


def cluster_with_topic(cluster_factory: Callable[..., BrokerCluster], topic: str) -> BrokerCluster:
    cluster = start_cluster(cluster_factory, **CONSUMER_PROTOCOL)
    create_topic(cluster.bootstrap, topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_full_isr(cluster, topic, PARTITIONS)
    return cluster


def events_after(members: list[GroupConsumer], t: float, until: float = float("inf")) -> dict[str, list[Any]]:
    return {m.name: [(round(e - t, 2), kind, ps) for e, kind, ps in m.events if t < e < until] for m in members}


def longest_commit_gap(m: GroupConsumer, start: float, end: float) -> float:
    """The longest time between ``start``, the answers of ``m``'s successful commits and ``end``."""
    times = [start] + sorted(c.ended for c in m.commits if c.error is None and start < c.ended < end) + [end]
    return max(b - a for a, b in zip(times, times[1:], strict=False))


class BrokerLogs:
    """The coordinator's log lines about one group that brokers write from now on (each broker's
    log file read from its size at creation)."""

    # what a coordinator logs when a member joins or is replaced, is fenced or removed, or the group
    # epoch goes up (consumer_group_manager.py); the refusals of heartbeats it logs at INFO
    CHANGES = ("joins the consumer group", "rejoins as", "fenced from the group", "left the consumer group",
               "Bumped group epoch", "ConsumerGroupHeartbeat of member")

    def __init__(self, cluster: BrokerCluster, group: str) -> None:
        self.cluster = cluster
        self.tag = f"[GroupId {group}]"
        self.start = {b: (p.stat().st_size if (p := cluster.broker(b).log_path).exists() else 0) for b in cluster.ids}

    def lines(self) -> dict[int, list[str]]:
        out = {}
        for b, offset in self.start.items():
            path = self.cluster.broker(b).log_path
            with open(path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            out[b] = [line for line in text.splitlines() if self.tag in line]
        return out

    def changes(self) -> dict[int, list[str]]:
        return {b: found for b, lines in self.lines().items()
                if (found := [line for line in lines if any(c in line for c in self.CHANGES)])}


@dataclass
class SlowRevoker(GroupConsumer):
    """A GroupConsumer whose on_revoke of some partitions takes ``revoke_delay`` seconds (its work on
    them not yet done) before it commits them and gives them up; ``revoking_since``: when it began."""

    revoke_delay: float = 0.0
    revoking_since: float | None = None

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        if partitions and self.revoke_delay > 0:
            self.revoking_since = time.monotonic()
            time.sleep(self.revoke_delay)
        super()._on_revoke(consumer, partitions)


def group_on_a_broker_to_kill(cluster: BrokerCluster, prefix: str) -> tuple[str, int, list[int]]:
    """A group coordinated by a broker other than the controller (the one leading the most
    ``__consumer_offsets`` partitions), that broker, and the others."""
    offsets_leaders = {p: st.leader for p, st in offsets_topic_ready(cluster, FAILOVER_OFFSETS_PARTITIONS, 3).items()}
    controller = controller_of(cluster)
    victim = max((b for b in cluster.ids if b != controller),
                 key=lambda b: sum(1 for leader in offsets_leaders.values() if leader == b))
    led = {p for p, leader in offsets_leaders.items() if leader == victim}
    assert led, f"broker {victim} leads no {OFFSETS_TOPIC} partition: {offsets_leaders}"
    group = groups_on(led, FAILOVER_OFFSETS_PARTITIONS, prefix, 1)[0]
    assert wait_for(lambda: coordinator(cluster, group) >= 0 and coordinator(cluster, group), 30,
                    f"a coordinator for {group}") == victim
    return group, victim, [b for b in cluster.ids if b != victim]


# -- 1. the coordinator SIGKILLed -------------------------------------------------------------------
def test_consumer_group_resumes_at_its_epochs_after_the_sigkill_of_its_coordinator(cluster_factory):
    """The broker coordinating a busy consumer-protocol group (not the controller) is SIGKILLed.
    Every member commits again; the new coordinator describes the group Stable with the same member
    ids at epochs no lower than before and the group epoch unchanged; no member gave up or received
    a partition after the kill; no partition had two owners; committed offsets never went back, and
    none acknowledged before the kill is lost; every message is read."""
    topic = "cp-busy"
    cluster = cluster_with_topic(cluster_factory, topic)
    group, victim, survivors = group_on_a_broker_to_kill(cluster, "cp-kill")
    after = bootstrap_of(cluster, survivors)

    prod = ContinuousProducer(cluster.bootstrap, topic, PARTITIONS, pause_s=0.01).start()
    members = start_members(cluster.bootstrap, group, topic, "kill")
    try:
        with GroupWatch(cluster, group, topic) as watch:
            before = wait_settled(cluster, group, members, "the group Stable, each member with its share and a commit")
            prod.wait_acked(200, 60, "200 acknowledgements before the kill")
            before = wait_settled(cluster, group, members, "the group still Stable just before the kill")
            assert before.coordinator == victim

            logs = BrokerLogs(cluster, group)
            killed_at = time.monotonic()
            cluster.kill(victim)
            dead_at = time.monotonic()
            acked_before = acknowledged_before(members, killed_at)

            def last_errors() -> str:
                return str({m.name: [c.error for c in m.commits if c.ended > dead_at][-3:] for m in members})

            wait_for(lambda: all(m.successes_after(dead_at) for m in members), RECOVERY_S,
                     "a successful commit from every member after the kill", last_errors)
            first = {m.name: round(min(c.ended for c in m.successes_after(dead_at)) - killed_at, 2) for m in members}
            refused = {m.name: [c.error for c in m.commits if c.ended > dead_at and c.error] for m in members}
            moved = wait_for(lambda: (s := snapshot(after, group)) is not None and s.coordinator in survivors and s,
                             RECOVERY_S, "the group described by a surviving broker")
            print(f"\n{group}: SIGKILL of its coordinator {victim}; first successful commit "
                  f"{min(first.values()):.2f} s after the kill, each member's {first}; described by broker "
                  f"{moved.coordinator} {moved.at - killed_at:.2f} s after the kill; commits refused meanwhile "
                  f"{ {n: (len(e), sorted(set(e))[:2]) for n, e in refused.items()} }")
            resumed = wait_settled(cluster, group, members, "the group Stable again at the new coordinator",
                                   since=dead_at)
            prod.wait_acked(300, 60, "300 acknowledgements after the kill")
            end_of_failover = time.monotonic()
            ends, missing = drain(members, prod, topic, after, acked_before, group)
            final = wait_settled(cluster, group, members, "the group Stable after the drain")
            shown = cli_describe(after, group)
            drained = time.monotonic()
            changes = logs.changes()  # before the members leave
    finally:
        for m in members:
            m.stop()

    print(f"before the kill: {before.brief()}\nafter the kill:  {resumed.brief()}\nat the end:      {final.brief()}")
    print(f"coordinators seen by the watch {watch.coordinators()}; events after the kill "
          f"{events_after(members, killed_at, drained)}; longest time without a successful commit "
          f"{ {m.name: round(longest_commit_gap(m, killed_at - 5, end_of_failover), 2) for m in members} }; "
          f"ends {ends}")
    overlaps = overlapping_ownerships(members)
    assert not overlaps, f"partitions owned by two members at once: {overlaps[:3]}"
    assert not watch.backwards(), watch.backwards()[:5]
    assert resumed.coordinator in survivors
    # the members go on where they were: same ids, same epochs, no new group epoch, nobody rejoined
    assert set(resumed.members) == set(before.members), f"{before.brief()} -> {resumed.brief()}"
    assert {mid: m.instance_id for mid, m in resumed.members.items()} == \
        {mid: m.instance_id for mid, m in before.members.items()}
    lower = {m.client_id: (before.members[mid].epoch, m.epoch) for mid, m in resumed.members.items()
             if m.epoch < before.members[mid].epoch}
    assert not lower, f"member epochs lower after the move (before, after): {lower}"
    assert resumed.group_epoch == before.group_epoch, f"{before.brief()} -> {resumed.brief()}"
    assert not watch.regressions(before.at), watch.regressions(before.at)[:5]
    assert (set(final.members), final.group_epoch) == (set(before.members), before.group_epoch), final.brief()
    moved_partitions = {n: e for n, e in events_after(members, killed_at, drained).items() if e}
    assert not moved_partitions, f"members gave up or received partitions after the kill: {moved_partitions}"
    assert {m["member_id"] for m in shown["members"]} == set(before.members)
    assert (shown["state"], shown["group_epoch"]) == ("Stable", before.group_epoch), shown
    assert not changes, f"the coordinators logged membership changes after the kill: {changes}"
    check_nothing_skipped({group: missing}, {group: members})


# -- 2. a rolling restart -----------------------------------------------------------------------------
def test_consumer_group_keeps_its_members_through_a_rolling_restart(cluster_factory):
    """The three brokers are restarted one at a time with a controlled shutdown, the group's
    coordinator first, each waited for until it is back in every ISR, while the group consumes and
    commits. After each step and at the end the group is Stable with the same member ids at epochs
    no lower than before; no partition had two owners; committed offsets never went back; every
    message is read."""
    topic = "cp-rolling"
    cluster = cluster_with_topic(cluster_factory, topic)
    offsets_topic_ready(cluster, FAILOVER_OFFSETS_PARTITIONS, 3)
    group = "cp-rolling-group"
    coordinators = LeaderWatch(cluster, OFFSETS_TOPIC, partition_for(group, FAILOVER_OFFSETS_PARTITIONS))
    prod = ContinuousProducer(cluster.bootstrap, topic, PARTITIONS, pause_s=0.01).start()
    members = start_members(cluster.bootstrap, group, topic, "rolling")
    steps: list[str] = []
    try:
        with GroupWatch(cluster, group, topic) as watch:
            before = wait_settled(cluster, group, members, "the group Stable, each member with its share and a commit")
            logs = BrokerLogs(cluster, group)
            started = time.monotonic()
            order: list[int] = []
            previous = before
            while len(order) < len(cluster.ids):
                now = coordinator(cluster, group)
                b = now if now > 0 and now not in order else next(i for i in cluster.ids if i not in order)
                order.append(b)
                t0 = time.monotonic()
                assert cluster.stop(b) == 0, f"broker {b}'s controlled shutdown"
                stopped = time.monotonic()
                cluster.start_broker(b)
                wait_full_isr(cluster, topic, PARTITIONS)
                wait_full_isr(cluster, OFFSETS_TOPIC, FAILOVER_OFFSETS_PARTITIONS)
                restarted = time.monotonic()
                prod.wait_acked(100, 60, f"100 acknowledgements after broker {b} restarted")
                s = wait_settled(cluster, group, members, f"the group Stable after broker {b} restarted",
                                 since=restarted)
                steps.append(f"broker {b} (coordinator before: {now}) stopped in {stopped - t0:.1f} s, back in every "
                             f"ISR {restarted - stopped:.1f} s later, the group settled {s.at - restarted:.1f} s "
                             f"after that: {s.brief()}; longest time without a successful commit "
                             f"{ {m.name: round(longest_commit_gap(m, t0, s.at), 2) for m in members} }")
                assert set(s.members) == set(previous.members), f"{previous.brief()} -> {s.brief()}"
                previous = s
            restarts_done = time.monotonic()
            ends, missing = drain(members, prod, topic, cluster.bootstrap, acknowledged_before(members, float("inf")),
                                  group)
            final = wait_settled(cluster, group, members, "the group Stable at the end")
            drained = time.monotonic()
            changes = logs.changes()  # before the members leave
    finally:
        for m in members:
            m.stop()
        coordinators.close()
    print(f"\nrestarted in the order {order}; coordinator of {group}: leaders {coordinators.leaders}, "
          f"coordinators seen by the watch {watch.coordinators()}")
    for line in steps:
        print(line)
    print(f"before: {before.brief()}\nat the end: {final.brief()}\nevents during the restarts and the drain "
          f"{events_after(members, started, drained)}; restarts took {restarts_done - started:.1f} s")
    for m in members:
        refused = [c.error for c in m.commits if c.error]
        print(f"{m.name}: {len(m.commits)} commits, {len(refused)} refused {sorted(set(refused))[:3]}")
    overlaps = overlapping_ownerships(members)
    assert not overlaps, f"partitions owned by two members at once: {overlaps[:3]}"
    assert not watch.backwards(), watch.backwards()[:5]
    assert coordinators.moves() >= 1, f"the coordinator never moved: leaders {coordinators.leaders}"
    assert set(final.members) == set(before.members), f"{before.brief()} -> {final.brief()}"
    lower = {m.client_id: (before.members[mid].epoch, m.epoch) for mid, m in final.members.items()
             if m.epoch < before.members[mid].epoch}
    assert not lower, f"member epochs lower at the end (before, after): {lower}"
    assert final.group_epoch == before.group_epoch, f"{before.brief()} -> {final.brief()}"
    assert not watch.regressions(before.at), watch.regressions(before.at)[:5]
    moved_partitions = {n: e for n, e in events_after(members, started, drained).items() if e}
    assert not moved_partitions, f"members gave up or received partitions during the restarts: {moved_partitions}"
    assert not changes, f"the coordinators logged membership changes during the restarts: {changes}"
    check_nothing_skipped({group: missing}, {group: members})


# -- 3. the coordinator SIGKILLed in the middle of a rebalance ------------------------------------
def test_a_rebalance_under_way_when_the_coordinator_dies_completes_at_the_new_one(cluster_factory):
    """Three members are Stable; a fourth joins, and the three must each give a partition up. Their
    revocation takes them 8 s (on_revoke), and the coordinator is SIGKILLed while they are at it.
    The new coordinator, from the replayed records (targets, pending revocations), finishes the
    rebalance: the four members are Stable with their ids, the group epoch is the one the join gave,
    no partition was owned by two members at once (the newcomer started each only after its previous
    owner gave it up), committed offsets never went back, every message is read."""
    topic = "cp-mid"
    cluster = cluster_with_topic(cluster_factory, topic)
    group, victim, survivors = group_on_a_broker_to_kill(cluster, "cp-mid")
    after = bootstrap_of(cluster, survivors)
    prod = ContinuousProducer(cluster.bootstrap, topic, PARTITIONS, pause_s=0.01).start()
    members: list[GroupConsumer] = [
        SlowRevoker("mid-static", cluster.bootstrap, group, topic, protocol="consumer", instance_id="static-1"),
        SlowRevoker("mid-dynamic-1", cluster.bootstrap, group, topic, protocol="consumer"),
        SlowRevoker("mid-dynamic-2", cluster.bootstrap, group, topic, protocol="consumer")]
    slow = [m for m in members if isinstance(m, SlowRevoker)]
    for m in members:
        m.start()
    try:
        with GroupWatch(cluster, group, topic) as watch:
            before = wait_settled(cluster, group, members, "three members Stable, each with a commit")
            prod.wait_acked(100, 60, "100 acknowledgements before the join")
            for m in slow:
                m.revoke_delay = 8.0
            joiner = GroupConsumer("mid-joiner", cluster.bootstrap, group, topic, protocol="consumer").start()
            members.append(joiner)
            wait_for(lambda: any(m.revoking_since for m in slow), 30, "a member revoking a partition for the joiner",
                     lambda: (s := snapshot(cluster.bootstrap, group)) and s.brief())
            mid = snapshot(bootstrap_of(cluster, cluster.ids), group)
            logs = BrokerLogs(cluster, group)
            killed_at = time.monotonic()
            cluster.kill(victim)
            dead_at = time.monotonic()
            acked_before = acknowledged_before(members, killed_at)
            final = wait_settled(cluster, group, members, "four members Stable at the new coordinator", since=dead_at)
            for m in slow:
                m.revoke_delay = 0.0
            assert final.coordinator in survivors
            joined = min((t for t, kind, ps in joiner.events if kind == "assign" and ps), default=float("nan"))
            first = {m.name: round(min(c.ended for c in m.successes_after(dead_at)) - killed_at, 2) for m in members}
            print(f"\n{group}: SIGKILL of its coordinator {victim} "
                  f"{killed_at - min(m.revoking_since or killed_at for m in slow):.2f} s into the revocations; "
                  f"Stable with 4 members at broker {final.coordinator} {final.at - killed_at:.2f} s after the "
                  f"kill; the joiner's first partitions {joined - killed_at:.2f} s after the kill; first successful "
                  f"commit after the kill {first} (a member revoking commits when its on_revoke ends)")
            ends, missing = drain(members, prod, topic, after, acked_before, group)
            settled_again = wait_settled(cluster, group, members, "the group Stable after the drain")
            changes = logs.changes()
    finally:
        for m in slow:
            m.revoke_delay = 0.0
        for m in members:
            m.stop()
    print(f"before the join: {before.brief()}\nat the kill:     {mid.brief() if mid else 'not described'}\n"
          f"after the kill:  {final.brief()}\nevents after the kill {events_after(members, killed_at, final.at)}")
    overlaps = overlapping_ownerships(members)
    assert not overlaps, f"partitions owned by two members at once: {overlaps[:3]}"
    assert not watch.backwards(), watch.backwards()[:5]
    assert mid is not None and mid.group_epoch == before.group_epoch + 1 and not mid.settled(4), \
        f"not in the middle of the rebalance at the kill: {mid and mid.brief()}"
    assert set(before.members) < set(final.members) == set(mid.members), f"{mid.brief()} -> {final.brief()}"
    assert final.group_epoch == settled_again.group_epoch == mid.group_epoch, f"{mid.brief()} -> {final.brief()}"
    lower = {m.client_id: (mid.members[mid_id].epoch, m.epoch) for mid_id, m in final.members.items()
             if m.epoch < mid.members[mid_id].epoch}
    assert not lower, f"member epochs lower after the move (at the kill, after): {lower}"
    assert not watch.regressions(mid.at), watch.regressions(mid.at)[:5]
    assert not changes, f"the coordinators logged membership changes after the kill: {changes}"
    check_nothing_skipped({group: missing}, {group: members})
