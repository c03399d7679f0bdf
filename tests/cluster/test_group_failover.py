"""Consumer groups are never stuck when their coordinator's broker dies or restarts (issue 13).

Three real brokers over a real ZooKeeper; the coordinator of a group is the leader of its
``__consumer_offsets`` partition (``partition_for(group, offsets.topic.num.partitions)``). Every
consumer is confluent-kafka on a thread of its own, recording what it observes with monotonic
timestamps (tests/support/group_load.py): assignments and revocations, commits with their errors,
every offset read.

- The coordinator of three busy groups (eager with a static member, cooperative-sticky, assign
  mode with asynchronous commits) is SIGKILLed: each member commits again, the groups are Stable
  again, no partition had two owners at once, no acknowledged commit is lost, nothing is skipped.
- A group's offsets partition loses every ISR replica (unclean leader election off): the group is
  unavailable and says why, the CLI says so too, and it comes back by itself when the ISR broker
  returns.
- A rolling restart (controlled shutdowns) under load loses no commit and rebalances the group
  no more often than its coordinator moves.

"Nothing is skipped" once failed now and then because of a broker bug that the last test
reproduces directly: a long-polled Fetch was answered with records of a leader epoch newer than
the one the consumer sent (Kafka fences it), and librdkafka then dropped fetched messages it had
not delivered. The broker now checks the epoch again when the wait ends.

Times from the kill to the first commit are printed (pytest -s); they are observations, not
assertions.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest

from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for
from gregor.protocol.errors import ErrorCode
from tests.support.group_checks import (
    FAILOVER_OFFSETS_PARTITIONS,
    LeaderWatch,
    bootstrap_of,
    check_nothing_skipped,
    controller_of,
    coordinator,
    find_coordinator,
    start_cluster,
    wait_for,
)
from tests.support.group_load import (
    Gaps,
    GroupConsumer,
    acknowledged_before,
    commits_going_backwards,
    committed,
    described,
    gaps,
    groups_on,
    offsets_topic_ready,
    overlapping_ownerships,
    partition_state,
    partition_states,
    read_by_group,
    wait_full_isr,
)
from tests.support.replication import ContinuousProducer, create_topic, high_watermarks, last_acked

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 6
RECOVERY_S = 90  # generous: the machine is slow and shared


# -- helpers (and those shared: tests/support/group_checks.py) -------------------------------------
def stable(bootstrap: str, group: str, members: int) -> bool:
    try:
        return described(bootstrap, group) == ("STABLE", members)
    except Exception:  # noqa: BLE001 - no coordinator yet, or a request timed out: ask again
        return False


def committed_or_none(bootstrap: str, group: str, topic: str) -> dict[int, int] | None:
    try:
        return committed(bootstrap, group, topic, PARTITIONS)
    except Exception:  # noqa: BLE001 - no coordinator yet: ask again
        return None


class CommittedWatch:
    """Reads the committed offsets of some groups every half second on a thread of its own (an
    admin client's OffsetFetch at whatever coordinator it finds); a read that fails is skipped.
    ``backwards()``: every time a partition's committed offset was seen lower than before."""

    def __init__(self, bootstrap: str, groups: list[str], topic: str) -> None:
        self.bootstrap = bootstrap
        self.groups = groups
        self.topic = topic
        self.samples: dict[str, list[tuple[float, dict[int, int]]]] = {g: [] for g in groups}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="committed-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for g in self.groups:
                got = committed_or_none(self.bootstrap, g, self.topic)
                if got is not None:
                    self.samples[g].append((time.monotonic(), got))
            self._stop.wait(0.5)

    def __enter__(self) -> CommittedWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def backwards(self) -> list[str]:
        return [f"{g} {line}" for g, samples in self.samples.items() for line in commits_going_backwards(samples)]


def drain(members_by_group: dict[str, list[GroupConsumer]], prod: ContinuousProducer, topic: str,
          bootstrap: str, acked_before: dict[str, dict[int, int]]) -> tuple[dict[int, int], dict[str, Gaps]]:
    """Stop producing; every group reads every partition up to its end and commits the end; the
    final committed offsets are no lower than ``acked_before`` (the highest commits acknowledged
    before the fault). Returns the ends and the offsets below them each group never read (checked
    last by ``check_nothing_skipped``, so that every other check of a test runs)."""
    prod.stop()
    assert not prod.failed, prod.failed[:5]
    ends = high_watermarks(bootstrap, topic, PARTITIONS, timeout=60)
    assert ends == last_acked(prod), f"log ends {ends}, acknowledged {last_acked(prod)}"
    missing = {}
    for group, members in members_by_group.items():
        def at_the_end(members: list[GroupConsumer] = members) -> bool:
            read = read_by_group(members)
            return all(end == 0 or max(read.get(p, {-1})) >= end - 1 for p, end in ends.items())

        wait_for(at_the_end, RECOVERY_S, f"{group} to read every partition up to its end {ends}")
        wait_for(lambda group=group: committed_or_none(bootstrap, group, topic) == ends, RECOVERY_S,
                 f"{group} to commit the ends {ends}")
        final = committed(bootstrap, group, topic, PARTITIONS)
        lower = {p: (final[p], o) for p, o in acked_before[group].items() if final[p] < o}
        assert not lower, f"{group}: committed offsets below commits acknowledged before the fault: {lower}"
        missing[group] = gaps(read_by_group(members), ends)
    return ends, missing


# -- the checks themselves ------------------------------------------------------------------------
def test_the_checks_see_two_owners_at_once_and_a_committed_offset_going_back():
    """The records' checks fail where they must (fabricated records, no processes): a partition
    assigned to a member before another revoked it; a committed offset read lower than before; an
    offset nobody read, or one a member skipped while reading."""
    a, b = (GroupConsumer(n, "127.0.0.1:1", "g", "t") for n in ("a", "b"))
    a.events += [(1.0, "assign", [0, 1]), (5.0, "revoke", [0, 1])]
    b.events += [(5.5, "assign", [0])]
    assert overlapping_ownerships([a, b]) == []
    b.events.insert(0, (4.9, "assign", [1]))  # before a's revocation of 1
    assert [(x.member, y.member, x.partition) for x, y in overlapping_ownerships([a, b])] == [("a", "b", 1)]
    c, d = (GroupConsumer(n, "127.0.0.1:1", "g", "t") for n in ("c", "d"))
    c.events += [(1.0, "assign", [2]), (2.0, "lost", [2])]  # a lost partition ends an ownership too
    d.events += [(2.5, "assign", [2])]
    assert overlapping_ownerships([c, d]) == []
    c.events.append((3.0, "assign", [2]))  # d never gave it up: owned by both until d closes
    assert [(x.member, y.member) for x, y in overlapping_ownerships([c, d])] == [("d", "c")]
    watch = CommittedWatch("127.0.0.1:1", ["g"], "t")
    watch.samples["g"] += [(1.0, {0: -1001}), (2.0, {0: 10}), (3.0, {0: 12})]
    assert watch.backwards() == []
    watch.samples["g"].append((4.0, {0: 11}))
    assert watch.backwards() == ["g partition 0: committed 11 at 4.000 after 12"]
    check_nothing_skipped({"g": {}}, {"g": [a]})
    with pytest.raises(AssertionError, match="messages lost to the group"):  # never read, never skipped
        check_nothing_skipped({"g": {1: [66]}}, {"g": [a]})
    a.jumps.append((9.0, 1, 65, 67))  # a read 65, then 67: it skipped 66
    with pytest.raises(AssertionError, match=r"\(9.0, 1, 65, 67\)"):
        check_nothing_skipped({"g": {1: [66]}}, {"g": [a]})


# -- 1. the coordinator of busy groups SIGKILLed -------------------------------------------------
def test_busy_groups_live_through_the_sigkill_of_their_coordinator(cluster_factory):
    """An eager (range) group with a static and two dynamic members, a cooperative-sticky group
    of two, and an assign-mode consumer committing asynchronously, all coordinated by one broker
    (not the controller), consume a topic a producer keeps writing to. That broker is SIGKILLed.
    Every consumer commits successfully again; both groups are Stable with all their members; no
    partition ever had two owners in a group; every partition's final committed offset is at
    least the highest commit acknowledged before the kill, and no committed offset read at any
    moment went backwards; every message is read by every group."""
    cluster = start_cluster(cluster_factory)
    topic = "busy"
    create_topic(cluster.bootstrap, topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_full_isr(cluster, topic, PARTITIONS)
    offsets_leaders = {p: st.leader for p, st in offsets_topic_ready(cluster, FAILOVER_OFFSETS_PARTITIONS, 3).items()}
    controller = controller_of(cluster)
    victim = max((b for b in cluster.ids if b != controller),
                 key=lambda b: sum(1 for leader in offsets_leaders.values() if leader == b))
    led = {p for p, leader in offsets_leaders.items() if leader == victim}
    assert led, f"broker {victim} leads no {OFFSETS_TOPIC} partition: {offsets_leaders}"
    eager, coop, assign = (groups_on(led, FAILOVER_OFFSETS_PARTITIONS, prefix, 1)[0]
                           for prefix in ("eager", "coop", "assign"))
    for g in (eager, coop, assign):
        assert wait_for(lambda g=g: coordinator(cluster, g) >= 0 and coordinator(cluster, g), 30,
                        f"a coordinator for {g}") == victim
    survivors = [b for b in cluster.ids if b != victim]
    after = bootstrap_of(cluster, survivors)

    prod = ContinuousProducer(cluster.bootstrap, topic, PARTITIONS, pause_s=0.01).start()
    groups: dict[str, list[GroupConsumer]] = {
        eager: [GroupConsumer("eager-static", cluster.bootstrap, eager, topic, "range", instance_id="static-1"),
                GroupConsumer("eager-dynamic-1", cluster.bootstrap, eager, topic, "range"),
                GroupConsumer("eager-dynamic-2", cluster.bootstrap, eager, topic, "range")],
        coop: [GroupConsumer("coop-1", cluster.bootstrap, coop, topic, "cooperative-sticky"),
               GroupConsumer("coop-2", cluster.bootstrap, coop, topic, "cooperative-sticky")],
        assign: [GroupConsumer("assign", cluster.bootstrap, assign, topic, assign=list(range(PARTITIONS)))],
    }
    everyone = [m for ms in groups.values() for m in ms]
    for m in everyone:
        m.start()
    try:
        with CommittedWatch(cluster.bootstrap, list(groups), topic) as watch:
            for g, n in ((eager, 3), (coop, 2)):
                wait_for(lambda g=g, n=n: stable(cluster.bootstrap, g, n), RECOVERY_S, f"{g} Stable with {n} members")
            wait_for(lambda: all(m.owned() and m.successes_after(0) for m in everyone), RECOVERY_S,
                     "every consumer owning partitions and with a commit acknowledged")
            prod.wait_acked(200, 60, "200 acknowledgements before the kill")

            killed_at = time.monotonic()
            cluster.kill(victim)
            dead_at = time.monotonic()  # the process has exited: nothing it says can arrive after this
            acked_before = {g: acknowledged_before(ms, killed_at) for g, ms in groups.items()}

            # every consumer commits again: a commit sent after the kill, answered without error (an
            # asynchronous commit's send time is the consumer's guess: its answer must come 1 s later)
            def ok_after_kill(m: GroupConsumer) -> list[float]:
                return [c.ended for c in m.successes_after(dead_at + (1 if m.assign else 0))]

            def last_errors() -> str:
                return str({m.name: [c.error for c in m.commits if c.ended > dead_at][-3:] for m in everyone})

            wait_for(lambda: all(ok_after_kill(m) for m in everyone), RECOVERY_S,
                     "a successful commit from every consumer after the kill", last_errors)
            for g, ms in groups.items():
                each = [round(min(ok_after_kill(m)) - killed_at, 2) for m in ms]
                print(f"group {g}: first successful commit {min(each):.2f} s after the SIGKILL of its coordinator "
                      f"{victim}; each member's first: {dict(zip([m.name for m in ms], each, strict=True))}")
            assert all(coordinator(cluster, g) in survivors for g in groups)
            for g, n in ((eager, 3), (coop, 2)):
                wait_for(lambda g=g, n=n: stable(after, g, n), RECOVERY_S, f"{g} Stable again with {n} members")
            assert described(after, assign)[1] == 0  # assign mode: offsets only, no members
            prod.wait_acked(300, 60, "300 acknowledgements after the kill")
            ends, missing = drain(groups, prod, topic, after, acked_before)
        backwards = watch.backwards()
        print(f"committed offsets read {sum(len(s) for s in watch.samples.values())} times during the test")
    finally:
        stopping = time.monotonic()
        for m in everyone:
            m.stop()
    for g in (eager, coop):
        overlaps = overlapping_ownerships(groups[g])
        assert not overlaps, f"{g}: partitions owned by two members at once: {overlaps[:3]}"
    assert not backwards, backwards[:5]
    for m in everyone:
        refused = [(round(c.ended - killed_at, 2), c.error) for c in m.commits if c.error]
        print(f"{m.name}: {len(m.commits)} commits, refused (s after the kill, error): {refused[:3]}; "
              f"rebalance events after the kill: {[(k, ps) for t, k, ps in m.events if killed_at < t < stopping]}")
    print(f"ends {ends}; acknowledged commits before the kill {acked_before}")
    check_nothing_skipped(missing, groups)


# -- 2. every ISR replica of the group's offsets partition gone ----------------------------------
def test_group_whose_offsets_partition_lost_every_isr_replica_waits_and_says_why(cluster_factory):
    """``__consumer_offsets`` with RF 2: the group's partition has replicas [x, y]. y dies (the ISR
    becomes [x]), then x dies: the partition has no leader; y comes back but is not in the ISR and
    unclean leader election is off, so it stays without one. FindCoordinator, asked of either live
    broker, answers COORDINATOR_NOT_AVAILABLE naming the partition, the setting and the dead ISR
    broker; ``gregor groups coordinator`` exits non-zero. When x returns, the group's running
    consumer commits again by itself, and no commit acknowledged before is lost."""
    cluster = start_cluster(cluster_factory, **{"offsets.topic.replication.factor": "2"})
    offsets_states = offsets_topic_ready(cluster, FAILOVER_OFFSETS_PARTITIONS, 2)
    controller = controller_of(cluster)
    # a partition the controller holds no replica of, if there is one: only the brokers under test move
    p = min(offsets_states, key=lambda q: (controller in offsets_states[q].isr, q))
    x = offsets_states[p].leader
    y = next(b for b in offsets_states[p].isr if b != x)
    z = next(b for b in cluster.ids if b not in (x, y))
    group = groups_on({p}, FAILOVER_OFFSETS_PARTITIONS, "orphan", 1)[0]
    # The consumed topic lives on z alone, so that none of its partitions is led by (or moves off) x
    # or y. librdkafka >= 2.10 (confluentinc/librdkafka#5476, open in 2.16) can deadlock its main
    # thread for good when it tears down the handle of a broker that left the Metadata (x, killed)
    # while handling an OffsetForLeaderEpoch for a partition that broker led (its epoch bumped when
    # y left the ISR): the member then never commits, heartbeats or closes again, whatever the broker
    # does. The offsets partition, not the data, is what this test takes away.
    topic = "orphaned"
    create_topic_on(cluster.bootstrap, topic, [[z]] * PARTITIONS)
    wait_full_isr(cluster, topic, PARTITIONS, replicas=1)
    assert wait_for(lambda: coordinator(cluster, group) >= 0 and coordinator(cluster, group), 30,
                    f"a coordinator for {group}") == x

    prod = ContinuousProducer(cluster.bootstrap, topic, PARTITIONS, pause_s=0.05).start()
    member = GroupConsumer("orphan-member", cluster.bootstrap, group, topic, "range").start()
    try:
        wait_for(lambda: member.owned() and member.successes_after(0), RECOVERY_S, "a first acknowledged commit")
        cluster.kill(y)
        with cluster.zk_client() as zk:
            wait_for(lambda: (st := partition_state(zk, OFFSETS_TOPIC, p)) is not None and st.isr == [x]
                     and st.leader == x, 30, f"{OFFSETS_TOPIC}-{p} led by {x} with ISR [{x}]")
            x_killed_at = time.monotonic()
            cluster.kill(x)
            acked = member.acknowledged_before(x_killed_at)
            wait_for(lambda: (st := partition_state(zk, OFFSETS_TOPIC, p)) is not None and st.leader == -1, 30,
                     f"{OFFSETS_TOPIC}-{p} without a leader")
        cluster.start_broker(y)
        cluster.wait_registered([y, z])

        # both live brokers say the group has no coordinator, and why
        answers = {}
        for b in (z, y):
            address = cluster.broker(b).bootstrap
            answers[b] = wait_for(lambda address=address: (a := find_coordinator(address, group))[1]
                                  == ErrorCode.coordinator_not_available and f"{OFFSETS_TOPIC}-{p}" in (a[2] or "")
                                  and a, 30, f"broker {b} to answer COORDINATOR_NOT_AVAILABLE for {group}")
            node, _code, reason = answers[b]
            message = reason or ""
            assert node == -1
            # the reason names the partition, the setting that keeps it leaderless and the broker it waits for
            assert "unclean.leader.election.enable=false" in message, message
            assert re.search(rf"broker {x}\b|ISR \[{x}\]", message), f"broker {b}'s reason does not name {x}: {message}"
        st = partition_states(cluster, OFFSETS_TOPIC, FAILOVER_OFFSETS_PARTITIONS)[p]
        assert st is not None and st.leader == -1 and st.isr == [x], f"y {y} back: {st} (unclean election?)"
        print(f"FindCoordinator for {group} ({OFFSETS_TOPIC}-{p}, replicas [{x}, {y}]) while only {y}, {z} live: "
              f"{answers[z][2]!r}")
        cli = subprocess.run([sys.executable, "-m", "gregor", "groups", "coordinator", group,
                              "--bootstrap-server", cluster.broker(z).bootstrap],
                             capture_output=True, text=True, timeout=60)
        print(f"gregor groups coordinator {group}: exit {cli.returncode}\n{cli.stdout}{cli.stderr}")
        assert cli.returncode != 0
        assert "unavailable" in cli.stdout and f"{OFFSETS_TOPIC}-{p}" in cli.stdout

        refused_meanwhile = len([c for c in member.commits if c.error and c.ended > x_killed_at])
        back_at = time.monotonic()
        cluster.start_broker(x)
        wait_for(lambda: member.successes_after(back_at), RECOVERY_S,
                 f"a successful commit after broker {x} returned",
                 lambda: f"the last commits' errors {[c.error for c in member.commits][-3:]}")
        first = min(c.ended for c in member.answered_ok_after(back_at))
        print(f"the member committed again {first - back_at:.2f} s after broker {x} was restarted "
              f"({refused_meanwhile} commits refused while {OFFSETS_TOPIC}-{p} had no leader); "
              f"its events {member.events[-4:]}")
        assert coordinator(cluster, group) == x
        final = committed(cluster.bootstrap, group, topic, PARTITIONS)
        lower = {q: (final[q], o) for q, o in acked.items() if final[q] < o}
        assert not lower, f"committed offsets below commits acknowledged before {x} died: {lower}"
        prod.stop()
    except BaseException:
        member.stop_after_failure()
        raise
    member.stop()


def create_topic_on(bootstrap: str, topic: str, assignment: list[list[int]]) -> None:
    """Create ``topic`` with the replicas of each partition given (partition i: ``assignment[i]``)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)],
                        operation_timeout=30)[topic].result(30)


# -- 3. a rolling restart -------------------------------------------------------------------------


def test_rolling_restart_under_load_loses_no_commit_and_rebalances_only_when_the_coordinator_moves(
        cluster_factory):
    """The three brokers are restarted one at a time with a controlled shutdown (SIGTERM), each
    waited for until it is back in every ISR, while a group of three consumes and commits every
    second. Nothing committed is lost, everything is read, no partition had two owners, and the
    group rebalanced at most as many times as its coordinator moved."""
    cluster = start_cluster(cluster_factory)
    topic = "rolling"
    create_topic(cluster.bootstrap, topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_full_isr(cluster, topic, PARTITIONS)
    offsets_topic_ready(cluster, FAILOVER_OFFSETS_PARTITIONS, 3)
    group = "rolling-group"
    p = partition_for(group, FAILOVER_OFFSETS_PARTITIONS)
    coordinators = LeaderWatch(cluster, OFFSETS_TOPIC, p)

    prod = ContinuousProducer(cluster.bootstrap, topic, PARTITIONS, pause_s=0.01).start()
    members = [GroupConsumer(f"rolling-{i}", cluster.bootstrap, group, topic, "range") for i in range(3)]
    for m in members:
        m.start()
    try:
        with CommittedWatch(cluster.bootstrap, [group], topic) as watch:
            wait_for(lambda: stable(cluster.bootstrap, group, 3), RECOVERY_S, "the group Stable with 3 members")
            wait_for(lambda: all(m.owned() and m.successes_after(0) for m in members), RECOVERY_S,
                     "every member owning partitions and with a commit acknowledged")
            started = time.monotonic()
            moves_before = coordinators.moves()
            order: list[int] = []
            while len(order) < len(cluster.ids):
                # the group's coordinator first whenever it has not been restarted yet: it moves each time
                now = coordinator(cluster, group)
                b = now if now > 0 and now not in order else next(i for i in cluster.ids if i not in order)
                order.append(b)
                assert cluster.stop(b) == 0, f"broker {b}'s controlled shutdown"
                cluster.start_broker(b)
                wait_full_isr(cluster, topic, PARTITIONS)
                wait_full_isr(cluster, OFFSETS_TOPIC, FAILOVER_OFFSETS_PARTITIONS)
                restarted = time.monotonic()
                prod.wait_acked(100, 60, f"100 acknowledgements after broker {b} restarted")
                wait_for(lambda restarted=restarted: all(m.successes_after(restarted) for m in members), RECOVERY_S,
                         f"every member to commit after broker {b} restarted")
            wait_for(lambda: stable(cluster.bootstrap, group, 3), RECOVERY_S,
                     "the group Stable with 3 members at the end")
            ends, missing = drain({group: members}, prod, topic, cluster.bootstrap,
                                   {group: acknowledged_before(members, float("inf"))})
            moves = coordinators.moves() - moves_before
        backwards = watch.backwards()
    finally:
        for m in members:
            m.stop()
        coordinators.close()
    rebalances = [sum(1 for t, kind, _ in m.events if kind == "assign" and t > started) for m in members]
    print(f"restarted in the order {order}; coordinator of {group} ({OFFSETS_TOPIC}-{p}): leaders "
          f"{coordinators.leaders}, {moves} moves during the restarts; on_assign calls per member after the "
          f"first assignment {rebalances}; ends {ends}")
    for m in members:
        refused = [c.error for c in m.commits if c.error]
        print(f"{m.name}: {len(m.commits)} commits, {len(refused)} refused {sorted(set(refused))[:3]}")
    overlaps = overlapping_ownerships(members)
    assert not overlaps, f"partitions owned by two members at once: {overlaps[:3]}"
    assert not backwards, backwards[:5]
    assert moves >= 1, f"the coordinator never moved: leaders {coordinators.leaders}"
    assert max(rebalances) <= moves, f"{rebalances} rebalances for {moves} coordinator moves"
    check_nothing_skipped(missing, {group: members})


# -- the broker-side cause of a skipped message seen in the tests above ---------------------------
def test_a_long_polled_fetch_is_fenced_when_the_leader_epoch_changes_during_its_wait(cluster_factory):
    """A consumer's Fetch at the log end carries the leader epoch E it knows and waits (max_wait).
    Meanwhile a follower's controlled shutdown makes the controller bump the epoch (the leader stays)
    and a record is appended at epoch E+1. As in Kafka, the waiting Fetch must not return that
    record to a client that still believes in epoch E: FENCED_LEADER_EPOCH, no records."""
    from confluent_kafka import Producer

    from gregor.admin.wire_client import WireClient, decode_response_frame
    from gregor.protocol.api_keys import ApiKey

    cluster = start_cluster(cluster_factory)
    topic = "fenced"
    create_topic(cluster.bootstrap, topic, 1, 3)
    st = wait_full_isr(cluster, topic, 1)[0]
    leader, epoch = st.leader, st.leader_epoch
    follower = next(b for b in st.isr if b != leader)

    def produce_one(acks: str) -> int:
        producer = Producer({"bootstrap.servers": cluster.broker(leader).bootstrap, "acks": acks})
        got: list[int] = []
        producer.produce(topic, b"x", partition=0, on_delivery=lambda err, m: got.append(-1 if err else m.offset()))
        producer.flush(30)
        assert got and got[0] >= 0, got
        return got[0]

    end = produce_one("all") + 1
    wire = WireClient(cluster.broker(leader).bootstrap, timeout=60)
    try:
        wire.send_raw(wire.request_bytes(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 20000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": epoch, "fetch_offset": end, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}))
        time.sleep(0.5)  # not an assertion: the broker starts the long poll (if it did not, the test passes)
        assert cluster.stop(follower) == 0
        with cluster.zk_client() as zk:
            after = wait_for(lambda: (s := partition_state(zk, topic, 0)) is not None and s.leader_epoch > epoch
                             and s, 30, f"a new leader epoch of {topic}-0")
        assert after.leader == leader
        produce_one("1")
        _corr, resp = decode_response_frame(ApiKey.FETCH, 12, wire.recv_frame())
    finally:
        wire.close()
    p = resp.responses[0].partitions[0]
    assert (ErrorCode(p.error_code), len(p.records or b"")) == (ErrorCode.fenced_leader_epoch, 0), \
        f"a Fetch at epoch {epoch} answered {ErrorCode(p.error_code).name} with {len(p.records or b'')} bytes " \
        f"of records after the epoch became {after.leader_epoch}"
