"""The broker's services as the handlers see them: one typed, narrow object each, wired by the
composition root (``broker.py``). A handler reaches a service through its request context
(``ctx.logs``, ``ctx.topics``, ``ctx.groups``, ...), never through the broker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.cluster.acl_store import AclStore
    from gregor.cluster.credentials import CredentialStore
    from gregor.cluster.dynamic_configs import DynamicConfigs
    from gregor.cluster.metadata import ClusterMetadata
    from gregor.cluster.producer_ids import ProducerIdManager
    from gregor.cluster.topic_admin import TopicAdmin
    from gregor.config import BrokerConfig
    from gregor.coordinator.group.service import GroupCoordinatorService
    from gregor.coordinator.share.service import ShareService
    from gregor.coordinator.share.state_service import ShareStateService
    from gregor.coordinator.transaction.service import TransactionCoordinatorService
    from gregor.log.log_manager import LogManager
    from gregor.metrics.registry import BrokerMetrics
    from gregor.replication.replica_manager import ReplicaManager


class ControllerService(Protocol):
    """The controller as ControlledShutdown sees it (in a cluster, this broker's Controller; on
    one node ``NoController``: there is no one to move leadership to)."""

    @property
    def is_active(self) -> bool: ...

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int
                                  ) -> tuple[ErrorCode, list[tuple[str, int]]]: ...


class NoController:
    is_active = False

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int
                                  ) -> tuple[ErrorCode, list[tuple[str, int]]]:
        return ErrorCode.not_controller, []


@dataclass(frozen=True, slots=True)
class Services:
    config: BrokerConfig  # the static configuration (read only)
    cluster: ClusterMetadata  # this broker's identity, the brokers, the controller
    logs: LogManager  # partition logs: read, append, wait for appends
    topics: TopicAdmin  # the topic registry and the topic operations (create, delete, alter)
    groups: GroupCoordinatorService  # the group coordinator, by named operation
    producer_ids: ProducerIdManager
    dynamic_configs: DynamicConfigs  # configs altered at run time (broker, group)
    credentials: CredentialStore  # SCRAM credentials (DescribeUserScramCredentials, Alter..., SASL/SCRAM)
    metrics: BrokerMetrics | None  # None when metrics are off
    replicas: ReplicaManager  # the partitions hosted here: leadership, appends, acks=all (the replication seam)
    controller: ControllerService  # ControlledShutdown (NoController on one node)
    transactions: TransactionCoordinatorService  # the transaction coordinator and its markers
    acls: AclStore | None = None  # authorizer.class.name set: the ACLs and their authorizer (security/acl.py)
    shares: ShareService | None = None  # share groups' delivery: ShareFetch, ShareAcknowledge, share sessions
    share_state: ShareStateService | None = None  # the share coordinator (__share_group_state)
