"""How a share-partition leader reads and writes its state (Kafka's Persister): through the
share coordinator of the share-partition's key, this broker's own (a call) or another broker's
(ReadShareGroupState / WriteShareGroupState). One node is a cluster of one: the routing decides,
nothing else asks.

Answers that mean "ask again" (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, an unreachable broker) are retried with a backoff until
``deadline_s``; anything else is raised as the KafkaError it is."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from gregor.cluster.broker_client import BrokerClients, BrokerUnreachable
from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.share.state_service import ShareStateService
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_state_records import PersistedBatch, SharePartitionKey

log = logging.getLogger("gregor.coordinator.share")

RETRIABLE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                       ErrorCode.coordinator_not_available})
READ_VERSION = 0
WRITE_VERSION = 0
NO_STATE_EPOCH = -1  # a read's answer for a share-partition that has no state yet


@dataclass(frozen=True)
class StoredState:
    state_epoch: int
    start_offset: int
    batches: list[PersistedBatch]
    leader_epoch: int = -1  # known when the state is read here (ReadShareGroupState does not carry it)


class Persister:
    def __init__(self, service: ShareStateService, cluster: ClusterMetadata, deadline_s: float = 10.0) -> None:
        self.service = service
        self.cluster = cluster
        self.deadline_s = deadline_s
        self._clients = BrokerClients(f"gregor-{cluster.node_id}-share", 30_000)

    async def close(self) -> None:
        await self._clients.close()

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> StoredState | None:
        """The stored state (None: the share-partition has none yet)."""
        result: StoredState | None = await self._retrying(key, lambda node: self._read(node, key, leader_epoch))
        return result

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[PersistedBatch]) -> None:
        await self._retrying(key, lambda node: self._write(node, key, state_epoch, leader_epoch, start_offset,
                                                           batches))

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        """A new state: ``start_offset``, nothing in flight (an operator's reset)."""
        await self._retrying(key, lambda node: self._initialize(node, key, state_epoch, start_offset))

    async def delete(self, key: SharePartitionKey) -> None:
        await self._retrying(key, lambda node: self._delete(node, key))

    async def _retrying(self, key: SharePartitionKey, call: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deadline_s
        backoff = 0.05
        while True:
            node, code, reason = self.service.locate(key)
            try:
                if code != ErrorCode.none:
                    raise KafkaError(code, reason)
                return await call(node)
            except (KafkaError, BrokerUnreachable) as e:
                retriable = isinstance(e, BrokerUnreachable) or e.code in RETRIABLE
                if not retriable or loop.time() + backoff > deadline:
                    if isinstance(e, BrokerUnreachable):
                        raise KafkaError(ErrorCode.coordinator_not_available, str(e)) from None
                    raise
                log.debug("share state of %s: %s; retrying", key.coordinator_key(), e)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    # -- one attempt --------------------------------------------------------------------------------
    async def _read(self, node: int, key: SharePartitionKey, leader_epoch: int) -> StoredState | None:
        if node == self.cluster.node_id:
            state = await self.service.read(key)
            return None if state is None else StoredState(state.state_epoch, state.start_offset, state.batches,
                                                          state.leader_epoch)
        body = {"group_id": key.group, "topics": [{"topic_id": key.topic_id, "partitions": [
            {"partition": key.partition, "leader_epoch": leader_epoch}]}]}
        response = await self._request(node, ApiKey.READ_SHARE_GROUP_STATE, READ_VERSION, body)
        p = response.results[0].partitions[0]
        if p.error_code:
            raise KafkaError(ErrorCode(p.error_code), p.error_message)
        if p.state_epoch == NO_STATE_EPOCH:
            return None
        return StoredState(p.state_epoch, p.start_offset, [PersistedBatch(b.first_offset, b.last_offset,
                                                                          b.delivery_state, b.delivery_count)
                                                           for b in p.state_batches])

    async def _write(self, node: int, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                     start_offset: int, batches: list[PersistedBatch]) -> None:
        if node == self.cluster.node_id:
            await self.service.write(key, state_epoch, leader_epoch, start_offset, batches)
            return
        body = {"group_id": key.group, "topics": [{"topic_id": key.topic_id, "partitions": [{
            "partition": key.partition, "state_epoch": state_epoch, "leader_epoch": leader_epoch,
            "start_offset": start_offset, "state_batches": [
                {"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": b.delivery_state,
                 "delivery_count": b.delivery_count} for b in batches]}]}]}
        response = await self._request(node, ApiKey.WRITE_SHARE_GROUP_STATE, WRITE_VERSION, body)
        p = response.results[0].partitions[0]
        if p.error_code:
            raise KafkaError(ErrorCode(p.error_code), p.error_message)

    async def _initialize(self, node: int, key: SharePartitionKey, state_epoch: int, start_offset: int) -> None:
        if node == self.cluster.node_id:
            await self.service.initialize(key, state_epoch, start_offset)
            return
        body = {"group_id": key.group, "topics": [{"topic_id": key.topic_id, "partitions": [
            {"partition": key.partition, "state_epoch": state_epoch, "start_offset": start_offset}]}]}
        p = (await self._request(node, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, body)).results[0].partitions[0]
        if p.error_code:
            raise KafkaError(ErrorCode(p.error_code), p.error_message)

    async def _delete(self, node: int, key: SharePartitionKey) -> None:
        if node == self.cluster.node_id:
            await self.service.delete(key)
            return
        body = {"group_id": key.group, "topics": [{"topic_id": key.topic_id, "partitions": [
            {"partition": key.partition}]}]}
        p = (await self._request(node, ApiKey.DELETE_SHARE_GROUP_STATE, 0, body)).results[0].partitions[0]
        if p.error_code:
            raise KafkaError(ErrorCode(p.error_code), p.error_message)

    async def _request(self, node: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
        broker = self.cluster.broker(node)
        if broker is None:
            raise KafkaError(ErrorCode.coordinator_not_available, f"broker {node} is not alive")
        client = await self._clients.for_broker(broker.node_id, broker.host, broker.port)
        return await client.request(api_key, version, body)
