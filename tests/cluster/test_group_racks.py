"""KIP-1101 in a cluster: a consumer-protocol group's epoch follows the racks of its topics'
replicas. A replica's broker that restarts with its rack is no new group epoch (its rack is
remembered while it is away: hashing only live brokers would rebalance twice, at the death and at
the return); a broker that comes back with another rack is exactly one new group epoch."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient

from tests.support.group_checks import FAILOVER_OVERRIDES, coordinator, snapshot, wait_for
from tests.support.group_load import GroupConsumer
from tests.support.replication import create_topic, wait_full_isr

TOPIC, PARTITIONS = "racked", 6


def group_epoch(bootstrap: str, group: str) -> int | None:
    s = snapshot(bootstrap, group)
    return s.group_epoch if s is not None and s.state == "Stable" else None


def test_the_group_epoch_moves_once_for_a_rack_change_and_never_for_a_restart(cluster_factory):
    cluster = cluster_factory(3, overrides=FAILOVER_OVERRIDES, racks=["ra", "rb", "rc"])
    for b in cluster.ids:
        admin = AdminClient({"bootstrap.servers": cluster.broker(b).bootstrap})
        wait_for(lambda admin=admin: admin.list_topics(timeout=10).controller_id >= 0, 30, f"broker {b} ready")
    create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
    wait_full_isr(cluster, TOPIC, PARTITIONS)
    members = [GroupConsumer(f"r{i}", cluster.bootstrap, "g-racks", TOPIC, protocol="consumer").start()
               for i in range(2)]
    try:
        wait_for(lambda: sum(len(m.owned()) for m in members) == PARTITIONS and all(m.owned() for m in members),
                 60, "both members holding partitions")
        start = wait_for(lambda: group_epoch(cluster.bootstrap, "g-racks"), 30, "the group Stable")
        other = next(b for b in cluster.ids if b != coordinator(cluster, "g-racks"))

        cluster.kill(other)  # a replica's broker restarts, with its rack
        time.sleep(6)  # its registration expires (4 s sessions): it is away
        cluster.start_broker(other)
        wait_full_isr(cluster, TOPIC, PARTITIONS, timeout=60)
        time.sleep(12)  # beyond the hashes' 10 s lifetime, several heartbeats
        assert group_epoch(cluster.bootstrap, "g-racks") == start, "a restart with the same rack rebalanced"

        cluster.stop(other)
        cluster.broker(other).overrides["broker.rack"] = "rz"  # it comes back in another rack
        cluster.start_broker(other)
        wait_for(lambda: group_epoch(cluster.bootstrap, "g-racks") == start + 1, 40, "one new group epoch")
        time.sleep(12)
        assert group_epoch(cluster.bootstrap, "g-racks") == start + 1, "the rack change rebalanced more than once"
        assert sum(len(m.owned()) for m in members) == PARTITIONS
    finally:
        for m in members:
            m.stop()
