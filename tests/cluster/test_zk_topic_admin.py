"""ZkTopicAdmin without a ZooKeeper server: what auto-creation does when ZooKeeper does not answer."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gregor.cluster.metadata import BrokerEndpoint
from gregor.cluster.zk.client import ConnectionLoss, SessionExpiredError
from gregor.cluster.zk.metadata import ZkClusterMetadata
from gregor.cluster.zk.topic_admin import ZkTopicAdmin
from gregor.protocol.errors import ErrorCode, KafkaError


class UnreachableZk:
    """A ZkClient whose every request fails as kazoo's does while ZooKeeper is out of reach."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def exists(self, path: str) -> None:
        raise self.error

    async def get(self, path: str) -> None:
        raise self.error


@pytest.mark.parametrize("error", [ConnectionLoss(), SessionExpiredError()])
def test_auto_creation_while_zookeeper_is_unreachable_is_a_warning_and_can_be_asked_again(storage, caplog, error):
    base = storage.open()
    zk = UnreachableZk(error)
    metadata = ZkClusterMetadata(zk, 1)  # type: ignore[arg-type]
    metadata.live = {b: BrokerEndpoint(b, "127.0.0.1", 9090 + b) for b in (1, 2, 3)}
    admin = ZkTopicAdmin(base.config, base.registry, base.logs, zk, metadata)  # type: ignore[arg-type]

    async def main() -> None:
        with pytest.raises(KafkaError) as e:
            admin.create_topic("__consumer_offsets", 3, {})
        assert e.value.code == ErrorCode.leader_not_available  # the client asks again
        await admin._pending["__consumer_offsets"]
        assert "__consumer_offsets" not in admin._pending  # so the next request tries again

    with caplog.at_level(logging.WARNING, logger="gregor.cluster.zk.topic_admin"):
        asyncio.run(main())
    records = [r for r in caplog.records if r.name == "gregor.cluster.zk.topic_admin"]
    # ZooKeeper being away is expected (the broker said so already): one line, no traceback
    assert [(r.levelno, r.exc_info) for r in records] == [(logging.WARNING, None)]
    assert "ZooKeeper did not answer" in records[0].getMessage()
