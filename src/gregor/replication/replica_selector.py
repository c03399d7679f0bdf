"""Which replica a consumer should fetch from (KIP-392, ``replica.selector.class``).

The leader answers a consumer's Fetch (v11+) with ``preferred_read_replica`` when the selector
names another replica; the consumer then fetches from that replica until it fails or the
metadata changes. Only replicas that hold the consumer's fetch offset qualify (their log end is at
or past it, their log start at or before it), so a consumer is never sent to a replica that would
answer OFFSET_OUT_OF_RANGE.

Selectors, by Kafka's class names:

- ``org.apache.kafka.common.replica.LeaderSelector`` (and no selector at all): the leader.
- ``org.apache.kafka.common.replica.RackAwareReplicaSelector``: the leader if it is in the
  client's rack (``client.rack``, sent as the Fetch's ``rack_id``) or the client names no rack or
  no replica is in it; otherwise the most caught-up replica in the client's rack (largest log end,
  then the most recently caught up, then the lowest broker id so the answer is stable).
"""

from __future__ import annotations

from dataclasses import dataclass

from gregor.config import RACK_AWARE_SELECTOR


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the leader knows of one replica when a consumer fetches."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    log_start_offset: int
    ms_since_caught_up: int


def preferred_read_replica(selector: str | None, client_rack: str, fetch_offset: int,
                           leader: ReplicaView, followers: list[ReplicaView]) -> int | None:
    """The broker a consumer should read from instead of the leader, or None (read here)."""
    if selector != RACK_AWARE_SELECTOR or not client_rack:
        return None
    if leader.rack == client_rack:
        return None
    candidates = [f for f in followers
                  if f.rack == client_rack and f.log_start_offset <= fetch_offset <= f.log_end_offset]
    if not candidates:
        return None
    best = max(candidates, key=lambda f: (f.log_end_offset, -f.ms_since_caught_up, -f.broker_id))
    return best.broker_id
