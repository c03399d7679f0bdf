"""A broker's own writes to a partition wherever its leader is: appended through the seam when
this broker leads the partition, else produced to the leader over the inter-broker listener. The
telemetry writer (acks=1, dropped when it fails) and share groups' dead-letter copies (acks=all,
retried by their writer) use it; on one node every partition is led here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gregor.cluster.broker_client import BrokerClients, BrokerUnreachable
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from gregor.cluster.metadata import ClusterMetadata
    from gregor.replication.replica_manager import ReplicaManager

PRODUCE_VERSION = 9


class LeaderProducer:
    def __init__(self, cluster: ClusterMetadata, replicas: ReplicaManager, client_id: str,
                 timeout_ms: int = 5000) -> None:
        self.cluster = cluster
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self._clients = BrokerClients(client_id, timeout_ms)

    async def produce(self, topic: str, partition: int, batch: bytes, acks: int) -> tuple[ErrorCode, str | None]:
        """Write ``batch``; (NONE, None) once ``acks`` say it is written, else the error and why
        (NOT_LEADER_OR_FOLLOWER when the partition has no live leader, NETWORK_EXCEPTION when the
        leader does not answer)."""
        if self.replicas.leads(topic, partition):
            try:
                _result, replicated = self.replicas.append_records(topic, partition, batch, acks,
                                                                   self.timeout_ms / 1000)
                code = await replicated if replicated is not None else ErrorCode.none
            except KafkaError as e:
                return e.code, e.message
            return code, None if code == ErrorCode.none else f"the write to {topic}-{partition} answered {code.name}"
        leader = self.cluster.partition(topic, partition).leader
        endpoint = self.cluster.broker(leader) if leader >= 0 and leader != self.cluster.node_id else None
        if endpoint is None:
            return ErrorCode.not_leader_or_follower, f"{topic}-{partition} has no live leader"
        try:
            client = await self._clients.for_broker(leader, endpoint.host, endpoint.port)
            resp = await client.request(ApiKey.PRODUCE, PRODUCE_VERSION, {
                "transactional_id": None, "acks": acks, "timeout": self.timeout_ms,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
        except BrokerUnreachable as e:
            return ErrorCode.network_exception, str(e)
        answer = resp.responses[0].partition_responses[0]
        code = ErrorCode(answer.error_code)
        if code == ErrorCode.none:
            return code, None
        return code, answer.error_message or f"broker {leader} answered {code.name.upper()}"

    async def close(self) -> None:
        await self._clients.close()
