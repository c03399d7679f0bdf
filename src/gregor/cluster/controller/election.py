"""Who leads next: Kafka's leader election algorithms (Election.scala and
PartitionLeaderElectionAlgorithms), as pure functions from a partition's assignment, its current
state and the live brokers to its next state (or None when no replica may lead).

The replica chosen is always the first in assignment order that qualifies, so that leadership
goes back to the preferred replica (the first) whenever it can.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence

from gregor.cluster.zk.znodes import NO_LEADER, PartitionState


class Strategy(enum.Enum):
    OFFLINE = "offline"  # the leader is gone, or the partition has none: any live ISR member
    PREFERRED = "preferred"  # the first replica of the assignment, if alive and in the ISR
    CONTROLLED_SHUTDOWN = "controlled shutdown"  # an ISR member that is not shutting down


def offline_leader(assignment: Sequence[int], isr: Collection[int], live: Collection[int],
                   unclean: bool) -> int | None:
    """The first live ISR member; without one, and only if unclean election is enabled, the first
    live replica (which may lack acknowledged records)."""
    for b in assignment:
        if b in live and b in isr:
            return b
    if unclean:
        for b in assignment:
            if b in live:
                return b
    return None


def preferred_leader(assignment: Sequence[int], isr: Collection[int], live: Collection[int]) -> int | None:
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_leader(assignment: Sequence[int], isr: Collection[int], live_or_shutting_down: Collection[int],
                               shutting_down: Collection[int]) -> int | None:
    for b in assignment:
        if b in live_or_shutting_down and b in isr and b not in shutting_down:
            return b
    return None


def elect_offline(state: PartitionState, assignment: Sequence[int], live: Collection[int], unclean: bool,
                  controller_epoch: int) -> PartitionState | None:
    """New state after an offline election: the ISR keeps its live members (just the new leader
    after an unclean election)."""
    leader = offline_leader(assignment, state.isr, live, unclean)
    if leader is None:
        return None
    isr = [b for b in state.isr if b in live] if leader in state.isr else [leader]
    return state.with_leader(leader, isr, controller_epoch)


def elect_preferred(state: PartitionState, assignment: Sequence[int], live: Collection[int],
                    controller_epoch: int) -> PartitionState | None:
    leader = preferred_leader(assignment, state.isr, live)
    if leader is None:
        return None
    return state.with_leader(leader, list(state.isr), controller_epoch)


def elect_for_controlled_shutdown(state: PartitionState, assignment: Sequence[int],
                                  live_or_shutting_down: Collection[int], shutting_down: Collection[int],
                                  controller_epoch: int) -> PartitionState | None:
    """New state moving leadership off the brokers shutting down; they leave the ISR."""
    leader = controlled_shutdown_leader(assignment, state.isr, live_or_shutting_down, shutting_down)
    if leader is None:
        return None
    return state.with_leader(leader, [b for b in state.isr if b not in shutting_down], controller_epoch)


def without_replica(state: PartitionState, replica: int, controller_epoch: int) -> PartitionState:
    """``replica`` leaves the ISR (Kafka's OfflineReplica transition): if it led, the partition
    has no leader (-1) until an election; an ISR of one member keeps that member, so that the
    replica with every acknowledged record stays known."""
    leader = NO_LEADER if state.leader == replica else state.leader
    isr = list(state.isr) if len(state.isr) == 1 else [b for b in state.isr if b != replica]
    return state.with_leader(leader, isr, controller_epoch)


def initial_state(assignment: Sequence[int], live: Collection[int], controller_epoch: int) -> PartitionState | None:
    """A new partition's first state: the first live replica leads, every live replica is in the
    ISR, leader epoch 0. None while no replica is alive."""
    alive = [b for b in assignment if b in live]
    if not alive:
        return None
    return PartitionState(alive[0], 0, alive, controller_epoch)
