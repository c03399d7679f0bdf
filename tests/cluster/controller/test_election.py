"""Kafka's leader election algorithms (cluster/controller/election.py), without ZooKeeper."""

from __future__ import annotations

from gregor.cluster.controller import election
from gregor.cluster.zk.znodes import NO_LEADER, PartitionState


def st(leader: int, isr: list[int], leader_epoch: int = 5) -> PartitionState:
    return PartitionState(leader, leader_epoch, isr, controller_epoch=1, zk_version=3)


def test_offline_election_takes_the_first_live_isr_member_in_assignment_order():
    new = election.elect_offline(st(1, [3, 2, 1]), [1, 2, 3], live={2, 3}, unclean=False, controller_epoch=2)
    assert new is not None
    assert (new.leader, new.isr, new.leader_epoch, new.controller_epoch, new.zk_version) == (2, [3, 2], 6, 2, 3)


def test_offline_election_without_live_isr_member_needs_unclean():
    state = st(1, [1])
    assert election.elect_offline(state, [1, 2], live={2}, unclean=False, controller_epoch=2) is None
    new = election.elect_offline(state, [1, 2], live={2}, unclean=True, controller_epoch=2)
    assert new is not None and (new.leader, new.isr) == (2, [2])  # the ISR restarts from the new leader
    assert election.elect_offline(state, [1, 2], live=set(), unclean=True, controller_epoch=2) is None


def test_preferred_election_only_when_the_first_replica_is_alive_and_in_sync():
    assert election.elect_preferred(st(2, [2]), [1, 2], live={1, 2}, controller_epoch=2) is None
    assert election.elect_preferred(st(2, [2, 1]), [1, 2], live={2}, controller_epoch=2) is None
    new = election.elect_preferred(st(2, [2, 1]), [1, 2], live={1, 2}, controller_epoch=2)
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (1, [2, 1], 6)


def test_controlled_shutdown_election_skips_brokers_shutting_down_and_drops_them_from_the_isr():
    new = election.elect_for_controlled_shutdown(st(1, [1, 2, 3]), [1, 2, 3], live_or_shutting_down={1, 2, 3},
                                                 shutting_down={1, 2}, controller_epoch=2)
    assert new is not None and (new.leader, new.isr) == (3, [3])
    assert election.elect_for_controlled_shutdown(st(1, [1]), [1, 2], {1, 2}, {1}, 2) is None


def test_removing_a_replica_never_empties_the_isr():
    follower = election.without_replica(st(1, [1, 2]), 2, controller_epoch=2)
    assert (follower.leader, follower.isr, follower.leader_epoch) == (1, [1], 6)
    leader = election.without_replica(st(1, [1, 2]), 1, controller_epoch=2)
    assert (leader.leader, leader.isr) == (NO_LEADER, [2])
    last = election.without_replica(st(1, [1]), 1, controller_epoch=2)
    assert (last.leader, last.isr) == (NO_LEADER, [1])


def test_initial_state_is_the_live_replicas_in_assignment_order():
    first = election.initial_state([4, 1, 2], live={1, 2, 3}, controller_epoch=7)
    assert first == PartitionState(1, 0, [1, 2], 7)
    assert election.initial_state([4, 5], live={1}, controller_epoch=7) is None
