"""Which kind of group serves a request, and the conversions between classic and consumer-protocol
groups (KIP-848's migration; Kafka: GroupMetadataManager's getOrMaybeCreateClassicGroup,
maybeDeleteEmptyConsumerGroup, convertToConsumerGroup, convertToClassicGroup).

A group id names one group, of one kind: a classic group (``ctx.groups``) or a consumer-protocol
group (``ctx.consumer_groups``), never both. The classic APIs (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) reach a consumer-protocol group through here:

- an **empty** consumer group is replaced by a classic group when a classic member joins, whatever
  ``group.consumer.migration.policy`` says (Kafka: conversions of empty groups are always
  allowed); its committed offsets stay;
- a consumer group **with members** serves classic members itself (``classic_members``).
"""

from __future__ import annotations

import logging

from gregor.coordinator.group.consumer_group_manager import ConsumerGroupManager
from gregor.coordinator.group.context import ShardContext
from gregor.coordinator.runtime.result import Record

log = logging.getLogger("gregor.coordinator")


def empty_consumer_group_tombstones(ctx: ShardContext, consumer: ConsumerGroupManager, group_id: str) -> list[Record]:
    """An empty consumer group makes way for a classic one: its records are tombstoned (committed
    offsets stay) and it is dropped from memory now, since the classic JoinGroup that replaces it
    applies its own state in memory (its result is not replayed; Kafka: removeGroup)."""
    group = ctx.consumer_groups.get(group_id)
    if group is None or group.members:
        return []
    records = consumer.delete_group(group_id)
    consumer.forget(group_id)
    log.info("[GroupId %s] Converting the empty consumer group to a classic group", group_id)
    return records
