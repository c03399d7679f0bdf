"""Which consumer group a fetch belongs to, from the coordinator's own state.

A Fetch request names no group. The coordinator, though, knows every member of every consumer
group: its client id, its host and the partitions it was assigned (the leader's assignment,
written to ``__consumer_offsets`` and so also known right after a restart). A fetch from client
id C on host H for partition P is attributed to the group whose member (C, H) owns P. No side
table fed by client connections is involved, so nothing another broker or a disconnect does can
erase the label.

Fetches that match no member (assign-mode consumers, tools) are labelled ``NO_GROUP``. If two
groups each have a member with the same client id on the same host owning the same partition,
the fetch is attributed to the first of them by name (this cannot be told apart on the wire).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gregor.coordinator.group.model import GroupState
from gregor.protocol.consumer_protocol import decode_assignment

NO_GROUP = "__no_group__"
Key = tuple[str, str, str, int]  # client id, host, topic, partition


class GroupAttribution:
    def __init__(self, shards: Callable[[], Iterable[Any]], version: Callable[[], int]) -> None:
        self._shards = shards
        self._version = version
        self._built_for = -1
        self._index: dict[Key, str] = {}

    def group_of(self, client_id: str, host: str, topic: str, partition: int) -> str:
        v = self._version()
        if v != self._built_for:
            self._index = self._build()
            self._built_for = v
        return self._index.get((client_id, host, topic, partition), NO_GROUP)

    def _build(self) -> dict[Key, str]:
        index: dict[Key, str] = {}
        live_members: set[tuple[str, str, str]] = set()  # group, client id, host
        for shard in self._shards():
            for group in sorted(shard.groups.values(), key=lambda g: g.group_id, reverse=True):
                if group.protocol_type != "consumer" or group.is_in(GroupState.DEAD, GroupState.EMPTY):
                    continue
                for m in group.members.values():
                    host = m.client_host.lstrip("/")
                    live_members.add((group.group_id, m.client_id, host))
                    for topic, partitions in decode_assignment(m.assignment):
                        for p in partitions:
                            index[(m.client_id, host, topic, p)] = group.group_id
        # During a rebalance assignments are cleared until the leader's new one arrives; a member
        # that is still in its group keeps the partitions it was last seen owning.
        for key, group_id in self._index.items():
            if key not in index and (group_id, key[0], key[1]) in live_members:
                index[key] = group_id
        return index
