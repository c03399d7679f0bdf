"""Which consumer group a fetch belongs to, from the coordinator's own state.

A Fetch request names no group. The coordinator, though, knows every member of every consumer
group: its client id, its host and the partitions it was assigned (the leader's assignment,
written to ``__consumer_offsets`` and so also known right after a restart). A fetch from client
id C on host H for partition P is attributed to the group whose member (C, H) owns P. No side
table fed by client connections is involved, so nothing another broker or a disconnect does can
erase the label.

Fetches that match no member (assign-mode consumers, tools) are labelled ``NO_GROUP``.

Several groups can have a member with the same client id on the same host owning the same
partition (librdkafka's default client id is ``rdkafka`` for every consumer). Such a fetch is
resolved, in order, by: the group earlier fetches of this partition on the same connection were
attributed to (a connection belongs to one client instance, in one group); the group whose
previous fetch ended at this fetch's offset (consumers fetch sequentially); the group whose
committed offset is this fetch's offset (a consumer's first fetch after joining); a group with no
fetch position yet; the first by name. Only the first fetch of several consumers starting at the
same offset at the same moment can remain ambiguous; give consumers distinct client ids to rule
that out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from gregor.coordinator.group.api import MemberView
from gregor.protocol.consumer_protocol import decode_assignment

NO_GROUP = "__no_group__"
Key = tuple[str, str, str, int]  # client id, host, topic, partition
Position = tuple[str, str, int]  # group, topic, partition


class MembersView(Protocol):
    """What attribution reads of the coordinator (GroupCoordinatorService provides it)."""

    def membership_version(self) -> int: ...
    def consumer_members(self) -> Iterable[MemberView]: ...
    def committed_offset(self, group_id: str, topic: str, partition: int) -> int | None: ...


class GroupAttribution:
    def __init__(self, groups: MembersView) -> None:
        self._groups = groups
        self._built_for = -1
        self._index: dict[Key, tuple[str, ...]] = {}  # candidates, sorted by name
        self._live: set[str] = set()  # groups with members when the index was built
        self._next: dict[Position, int] = {}  # where each group's last fetch of a partition ended

    def group_of(self, client_id: str, host: str, topic: str, partition: int, offset: int = -1,
                 connection: dict[Any, Any] | None = None) -> str:
        v = self._groups.membership_version()
        if v != self._built_for:
            self._index = self._build()
            self._built_for = v
        candidates = self._index.get((client_id, host, topic, partition))
        if not candidates:
            return NO_GROUP
        if len(candidates) == 1:
            group = candidates[0]
        else:
            group = self._pick(candidates, topic, partition, offset,
                               connection.get((topic, partition)) if connection is not None else None)
        if connection is not None:
            connection[(topic, partition)] = group
        return group

    def fetched_up_to(self, group: str, topic: str, partition: int, next_offset: int) -> None:
        if group != NO_GROUP:
            self._next[(group, topic, partition)] = next_offset

    def _pick(self, candidates: tuple[str, ...], topic: str, partition: int, offset: int, bound: str | None) -> str:
        if bound in candidates:
            assert bound is not None
            return bound
        for g in candidates:
            if self._next.get((g, topic, partition)) == offset:
                return g
        for g in candidates:
            if self._groups.committed_offset(g, topic, partition) == offset:
                return g
        fresh = [g for g in candidates if (g, topic, partition) not in self._next]
        return (fresh or list(candidates))[0]

    def _build(self) -> dict[Key, tuple[str, ...]]:
        index: dict[Key, set[str]] = {}
        owned: set[Position] = set()
        live_members: set[tuple[str, str, str]] = set()  # group, client id, host
        self._live = set()
        for m in self._groups.consumer_members():
            self._live.add(m.group_id)
            live_members.add((m.group_id, m.client_id, m.client_host))
            for topic, partitions in decode_assignment(m.assignment):
                for p in partitions:
                    index.setdefault((m.client_id, m.client_host, topic, p), set()).add(m.group_id)
                    owned.add((m.group_id, topic, p))
        # During a rebalance assignments are cleared until the leader's new one arrives; a member
        # that is still in its group keeps the partitions it was last seen owning.
        for key, groups in self._index.items():
            for group_id in groups:
                if (group_id, key[2], key[3]) not in owned and (group_id, key[0], key[1]) in live_members:
                    index.setdefault(key, set()).add(group_id)
        self._next = {pos: o for pos, o in self._next.items() if pos[0] in self._live}
        return {key: tuple(sorted(groups)) for key, groups in index.items()}
