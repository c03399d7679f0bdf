"""Classic and consumer-protocol consumers in one group (KIP-848's online migration), with real
confluent-kafka consumers against a broker process: a rolling upgrade replaces classic consumers
(cooperative-sticky, and eager range) one by one by consumer-protocol ones while messages flow, and
the reverse (a rolling downgrade, policy bidirectional). No partition is owned by two consumers at
once, every message is read, and the committed offsets end at the log ends."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import BrokerProcess
from tests.support.consumer_protocol_load import OVERRIDES, PARTITIONS, TOPIC, SteadyProducer, log_ends
from tests.support.group_load import GroupConsumer, committed, gaps, overlapping_ownerships, read_by_group
from tests.support.waiting import wait_for

GROUP = "mixed"


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "data", {**OVERRIDES, "group.consumer.migration.policy": "bidirectional"}).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(10)
    yield b
    b.kill()


def held_by_all(members: list[GroupConsumer]) -> bool:
    """Every partition owned, and every member holding some."""
    sets = [m.owned() for m in members]
    return sum(map(len, sets)) == PARTITIONS and set().union(*sets) == set(range(PARTITIONS)) \
        and all(sets)


def roll(broker: BrokerProcess, old: list[GroupConsumer], make_new: list[GroupConsumer],
         in_place: bool = False) -> None:
    """Start ``old``, then replace them one by one by ``make_new`` while a producer writes; check
    ownership, reads and commits at the end. ``in_place``: each old member stops first and its
    successor (a static member with its instance id) takes its place, within 20 s."""
    producer = SteadyProducer(broker.bootstrap).start()
    everyone = list(old)
    live = list(old)
    try:
        for m in old:
            m.start()
        wait_for(lambda: held_by_all(live), 30, "the first members share the partitions")
        for i, new in enumerate(make_new):
            if in_place:
                old[i].stop()
                live.remove(old[i])
            new.start()
            everyone.append(new)
            live.append(new)
            if in_place:
                wait_for(lambda: held_by_all(live), 20, f"{new.name} in the place of {old[i].name}")
                continue
            wait_for(lambda: held_by_all(live), 30, f"{new.name} holds partitions beside the others")
            old[i].stop()
            live.remove(old[i])
            wait_for(lambda: held_by_all(live), 30, f"the partitions of {old[i].name} taken over")
        time.sleep(1.5)  # more consumption and commits by the new members only
    finally:
        producer.stop()
    ends = log_ends(broker.bootstrap)
    wait_for(lambda: gaps(read_by_group(everyone), ends) == {}, 30, "every message read")
    wait_for(lambda: committed(broker.bootstrap, GROUP, TOPIC, PARTITIONS) == ends, 15, "commits at the log ends")
    for m in live:
        m.stop()
    assert overlapping_ownerships(everyone) == []
    assert gaps(read_by_group(everyone), ends) == {}
    # A commit sent with the epoch (generation) a member had just before its heartbeat or JoinGroup
    # moved it on is refused (STALE_MEMBER_EPOCH, ILLEGAL_GENERATION: Kafka validates commits the
    # same way, and librdkafka does not retry them); group epochs move at every step of a rolling
    # migration, so such a refusal may be seen. Any other error fails, and the next commits must
    # cover what was read: the committed offsets end at the log ends.
    racing = ("STALE_MEMBER_EPOCH", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")
    commits = [(m.name, c) for m in everyone for c in m.commits]
    failed = [(name, c) for name, c in commits if c.error]
    assert all(any(code in c.error for code in racing) for _, c in failed), failed
    # races, not a rule: a member whose commits were refused as a rule would fail far more of them
    # (a fixed bound of 3 was crossed once on 2 busy cores, with 4 such races)
    assert len(failed) <= max(3, len(commits) // 5), (len(commits), failed)
    assert committed(broker.bootstrap, GROUP, TOPIC, PARTITIONS) == ends


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_rolling_upgrade_from_classic_to_consumer_protocol(broker, strategy):
    old = [GroupConsumer(f"classic-{i}", broker.bootstrap, GROUP, TOPIC, strategy=strategy) for i in range(3)]
    new = [GroupConsumer(f"kip848-{i}", broker.bootstrap, GROUP, TOPIC, protocol="consumer") for i in range(3)]
    roll(broker, old, new)


def test_rolling_downgrade_from_consumer_protocol_to_classic(broker):
    old = [GroupConsumer(f"kip848-{i}", broker.bootstrap, GROUP, TOPIC, protocol="consumer") for i in range(3)]
    new = [GroupConsumer(f"classic-{i}", broker.bootstrap, GROUP, TOPIC, strategy="cooperative-sticky")
           for i in range(3)]
    roll(broker, old, new)


def static_members(bootstrap: str, kind: str) -> list[GroupConsumer]:
    if kind == "classic":
        return [GroupConsumer(f"classic-{i}", bootstrap, GROUP, TOPIC, strategy="cooperative-sticky",
                              instance_id=f"instance-{i}") for i in range(3)]
    return [GroupConsumer(f"kip848-{i}", bootstrap, GROUP, TOPIC, protocol="consumer",
                          instance_id=f"instance-{i}") for i in range(3)]


@pytest.mark.parametrize("direction", ["upgrade", "downgrade"])
def test_rolling_migration_of_static_members(broker, direction):
    """Static consumers (group.instance.id) are replaced one by one by consumers of the other
    protocol with the same instance ids, while messages flow. Upgrade: a static classic consumer
    sends no LeaveGroup when it closes, and its consumer-protocol successor takes its place at once
    (as Kafka: the unreleased-instance check is between two consumer-protocol members only), well
    within the 45 s session the classic member would otherwise hold its partitions for.
    Downgrade: the classic successor of the last consumer-protocol member makes the group a
    classic group (Kafka's validateOnlineDowngradeWithReplacedMemberId)."""
    classic, consumer = static_members(broker.bootstrap, "classic"), static_members(broker.bootstrap, "consumer")
    old, new = (classic, consumer) if direction == "upgrade" else (consumer, classic)
    roll(broker, old, new, in_place=True)
