"""Storage for the cluster-level parts: a topic registry, the partition logs and the topic
operations over a data directory, opened (and reopened, as after a restart) like the broker does."""

from __future__ import annotations

import pytest

from gregor.cluster.topic_admin import TopicAdmin
from gregor.config import BrokerConfig
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import TopicRegistry


class Storage:
    def __init__(self, data_dir) -> None:
        self.data_dir = data_dir
        self.open_logs: list[LogManager] = []

    def open(self, settings: dict[str, str] | None = None) -> TopicAdmin:
        """TopicAdmin over the data directory, its logs started (settings over Kafka's defaults)."""
        config = BrokerConfig.from_mapping({"log.dirs": str(self.data_dir), **(settings or {})})
        registry = TopicRegistry(config.data_dir)
        logs = LogManager(config.data_dir, config.topic_defaults(), registry)
        logs.startup()
        self.open_logs.append(logs)
        return TopicAdmin(config, registry, logs)

    def reopen(self, admin: TopicAdmin, settings: dict[str, str] | None = None) -> TopicAdmin:
        """Shut ``admin``'s logs down cleanly and open the directory again."""
        self.close(admin.logs)
        return self.open(settings)

    def close(self, logs: LogManager) -> None:
        self.open_logs.remove(logs)
        logs.shutdown()


@pytest.fixture
def storage(tmp_path):
    s = Storage(tmp_path / "data")
    yield s
    for logs in list(s.open_logs):
        s.close(logs)
