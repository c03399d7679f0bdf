"""Share groups on three brokers: the share-partition leaders keep their state through the share
coordinator of another broker (ReadShareGroupState / WriteShareGroupState), and a SIGKILLed
share-partition leader's successor delivers exactly what was not acknowledged."""

from __future__ import annotations

import time

import confluent_kafka as ck

from gregor.protocol.share_state_records import SHARE_STATE_TOPIC
from tests.support.group_checks import bootstrap_of, start_cluster
from tests.support.group_load import leader_of, wait_full_isr
from tests.support.replication import create_topic
from tests.support.share_clients import (
    DLQ,
    consume_by_pattern,
    poll_values,
    produce,
    read_all,
    share_consumer,
    start_group_at_earliest,
)

SHARE_OVERRIDES = {"share.coordinator.state.topic.num.partitions": "3",
                   "share.coordinator.state.topic.replication.factor": "3",
                   "share.coordinator.state.topic.min.isr": "2"}


def test_a_killed_share_partition_leader_redelivers_only_what_was_not_acknowledged(cluster_factory):
    cluster = start_cluster(cluster_factory, **SHARE_OVERRIDES)
    create_topic(cluster.bootstrap, "jobs", 2, 3, {"min.insync.replicas": "2"})
    wait_full_isr(cluster, "jobs", 2)
    start_group_at_earliest(cluster, "crew")
    values = [f"j{i}" for i in range(200)]
    produce(cluster.bootstrap, "jobs", values)
    accepted: set[str] = set()
    with share_consumer(cluster.bootstrap, "crew", "jobs", explicit=True) as c:
        held: list[ck.Message] = []
        deadline = time.monotonic() + 60
        while not held and time.monotonic() < deadline:  # explicit mode: one poll, then acknowledge
            held = [m for m in c.poll(0.5) if m.error() is None]
        assert held
        for m in held[::2]:  # half accepted; the other half stays acquired, never acknowledged
            c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
            accepted.add(m.value().decode())
        c.commit_sync()  # answered once the states are replicated
        wait_full_isr(cluster, SHARE_STATE_TOPIC, 3)
        victim = leader_of(cluster, "jobs", held[0].partition())
        cluster.kill(victim)
    survivors = [b for b in cluster.ids if b != victim]
    bootstrap = ",".join(cluster.broker(b).bootstrap for b in survivors)
    with share_consumer(bootstrap, "crew", "jobs") as c:
        rest = poll_values(c, time.monotonic() + 90, want=len(values) - len(accepted))
        extra = poll_values(c, time.monotonic() + 3)
        c.commit_sync()
    again = [m.value().decode() for m in rest + extra]
    assert not accepted & set(again), "an acknowledged record was delivered again"
    assert sorted(again) == sorted(set(values) - accepted)
    cluster.restart(victim, timeout=60)


def test_dead_letters_reach_a_dead_letter_partition_led_by_another_broker(cluster_factory):
    """The share-partition leader produces each dead letter to the leader of its dead-letter
    partition (source partition % partitions), wherever that is; acks=all."""
    cluster = start_cluster(cluster_factory, **SHARE_OVERRIDES)
    create_topic(cluster.bootstrap, "jobs", 3, 3, {"min.insync.replicas": "2"})
    create_topic(cluster.bootstrap, "dlq.jobs", 2, 3, {"min.insync.replicas": "2", **DLQ})
    wait_full_isr(cluster, "jobs", 3)
    wait_full_isr(cluster, "dlq.jobs", 2)
    start_group_at_earliest(cluster, "crew", **{"errors.deadletterqueue.topic.name": "dlq.jobs",
                                                "errors.deadletterqueue.copy.record.enable": "true"})
    produce(cluster.bootstrap, "jobs", [f"j{i}" for i in range(60)])
    consume_by_pattern(cluster.bootstrap, "crew", "jobs", {0: ck.AcknowledgeType.REJECT, 1: ck.AcknowledgeType.ACCEPT},
                       60)
    letters = read_all(cluster.bootstrap, "dlq.jobs", 30, timeout=90)
    assert sorted(int(m.key()) for m in letters) == list(range(0, 60, 2))
    sources = {(m.partition(), int(dict(m.headers())["__dlq.errors.partition"])) for m in letters}
    assert all(dlq == src % 2 for dlq, src in sources)
    leaders = {p: leader_of(cluster, "jobs", p) for p in range(3)}
    dlq_leaders = {p: leader_of(cluster, "dlq.jobs", p) for p in range(2)}
    assert any(leaders[src] != dlq_leaders[dlq] for dlq, src in sources), \
        f"no dead letter crossed brokers (leaders {leaders}, {dlq_leaders}): the test proves nothing"


def test_dead_letters_waiting_when_their_leader_dies_are_written_by_the_next_leader(cluster_factory):
    """Records rejected while the dead-letter topic cannot take writes (its min.insync.replicas is 3
    and a broker is down) wait ARCHIVING on the share-partition's leader; that leader is SIGKILLed:
    the next leader loads them ARCHIVING from the share coordinator, never delivers them again, and
    writes their dead letters once the topic can take them."""
    cluster = start_cluster(cluster_factory, **SHARE_OVERRIDES)
    create_topic(cluster.bootstrap, "jobs", 1, 3, {"min.insync.replicas": "2"})
    create_topic(cluster.bootstrap, "dlq.jobs", 1, 3, {"min.insync.replicas": "3", **DLQ})
    wait_full_isr(cluster, "jobs", 1)
    wait_full_isr(cluster, "dlq.jobs", 1)
    start_group_at_earliest(cluster, "crew", **{"errors.deadletterqueue.topic.name": "dlq.jobs"})
    values = [f"j{i}" for i in range(20)]
    produce(cluster.bootstrap, "jobs", values)
    with share_consumer(cluster.bootstrap, "warm-up", "jobs") as c:  # at the log end: creates the state topic
        poll_values(c, time.monotonic() + 3)
    wait_full_isr(cluster, SHARE_STATE_TOPIC, 3)
    leader = leader_of(cluster, "jobs", 0)
    down = next(b for b in cluster.ids if b != leader)
    cluster.kill(down)
    # dlq.jobs-0 has 2 of the 3 in-sync replicas it needs: its writes are refused before they are
    # appended (NOT_ENOUGH_REPLICAS), so no dead letter of the first leader can reach it later
    wait_full_isr(cluster, "dlq.jobs", 1, replicas=2)
    up = bootstrap_of(cluster, [b for b in cluster.ids if b != down])
    rejected: set[str] = set()
    with share_consumer(up, "crew", "jobs", explicit=True) as c:
        deadline = time.monotonic() + 60
        while len(rejected) < len(values) and time.monotonic() < deadline:
            msgs = [m for m in c.poll(0.5) if m.error() is None]
            for m in msgs:
                c.acknowledge(m, ck.AcknowledgeType.REJECT)
                rejected.add(m.value().decode())
            if msgs:
                c.commit_sync()  # answered once the ARCHIVING state is replicated
        assert rejected == set(values)
        time.sleep(2)  # the leader tries to write the dead letters, and cannot
        cluster.kill(leader)
        cluster.restart(down, timeout=60)
        cluster.restart(leader, timeout=60)
        again = poll_values(c, time.monotonic() + 15)  # the next leader loads the share-partition
    assert again == [], "a rejected record was delivered again"
    letters = read_all(cluster.bootstrap, "dlq.jobs", len(values), timeout=120)
    offsets = {int(dict(m.headers())["__dlq.errors.offset"]) for m in letters}
    assert offsets == set(range(len(values))), "every rejected record has its dead letter (at least once)"
