"""Consumer-protocol (KIP-848) members driven against a shard harness, as a client does it: join
with epoch 0, heartbeat with what it owns, give up at once what the coordinator no longer
assigns, take what it is given. A helper for the tests in this folder, not a test module."""

from __future__ import annotations

import uuid
from typing import Any

from gregor.coordinator.group.api import ConsumerHeartbeatRequest, ConsumerHeartbeatResult
from tests.coordinator.harness import GroupShardHarness

TOPICS = {"foo": (uuid.UUID(int=1), 6), "bar": (uuid.UUID(int=2), 3)}


class ConsumerHarness(GroupShardHarness):
    """The shard harness with a topic catalogue the consumer-group manager reads (name -> id,
    partitions), which a test may change (new partitions, new topics)."""

    def __init__(self, topics: dict[str, tuple[uuid.UUID, int]] | None = None, **config: Any) -> None:
        from dataclasses import replace

        from tests.coordinator.harness import DEFAULT

        self.catalogue = dict(TOPICS if topics is None else topics)
        super().__init__(replace(DEFAULT, **config))

    def _collaborators(self) -> Any:
        from dataclasses import replace

        return replace(super()._collaborators(), topic_metadata=lambda name: self.catalogue.get(name))

    def heartbeat_consumer(self, req: ConsumerHeartbeatRequest) -> ConsumerHeartbeatResult:
        result: ConsumerHeartbeatResult = self.run(self.shard.consumer_group_heartbeat(req))
        return result

    def group(self, group_id: str = "g") -> Any:
        return self.shard.consumer_groups[group_id]


class Client:
    def __init__(self, h: ConsumerHarness, topics: list[str], group: str = "g", instance: str | None = None,
                 assignor: str | None = None, rebalance_timeout_ms: int = 30_000, member_id: str = "") -> None:
        self.h, self.topics, self.group, self.instance = h, topics, group, instance
        self.assignor, self.rebalance_timeout_ms = assignor, rebalance_timeout_ms
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.last: ConsumerHeartbeatResult | None = None

    def request(self, epoch: int | None = None, full: bool = False, **changes: Any) -> ConsumerHeartbeatRequest:
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0
        req = ConsumerHeartbeatRequest(
            self.group, self.member_id, epoch, "client", "/127.0.0.1", self.instance, None,
            self.rebalance_timeout_ms if joining or full else -1, list(self.topics) if joining or full else None,
            None, self.assignor if joining or full else None, {} if joining else dict(self.owned))
        for k, v in changes.items():
            setattr(req, k, v)
        return req

    def beat(self, **kw: Any) -> ConsumerHeartbeatResult:
        r = self.h.heartbeat_consumer(self.request(**kw))
        self.last = r
        if r.error == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = {t: frozenset(ps) for t, ps in r.assignment.items() if ps}
        elif r.error in (25, 110):  # UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH: give up everything, rejoin
            self.owned, self.epoch = {}, 0
        return r

    def leave(self, static: bool = False) -> ConsumerHeartbeatResult:
        r = self.h.heartbeat_consumer(self.request(epoch=-2 if static else -1))
        self.owned, self.epoch = {}, 0
        return r

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def converge(clients: list[Client], rounds: int = 20) -> None:
    """Heartbeat every client until nobody's assignment changes; asserts no partition is owned
    by two clients after any heartbeat."""
    for _ in range(rounds):
        before = [(c.epoch, c.partitions()) for c in clients]
        for c in clients:
            c.beat()
            assert_disjoint(clients)
        if before == [(c.epoch, c.partitions()) for c in clients]:
            return
    raise AssertionError("the group did not converge")


def assert_disjoint(clients: list[Client]) -> None:
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for c in clients:
        for tp in c.partitions():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id
