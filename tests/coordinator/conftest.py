"""Fixtures of the coordinator's tests (no network)."""

import pytest

from gregor.config import BrokerConfig
from gregor.log.partition_log import PartitionLog


@pytest.fixture
def plog(tmp_path):
    cfg = BrokerConfig.from_mapping({}).topic_defaults()
    cfg.update({"cleanup.policy": "compact", "segment.bytes": 1 << 20})
    log = PartitionLog(tmp_path / "__consumer_offsets-0", "__consumer_offsets", 0, cfg)
    log.open(clean_shutdown=False, recovery_point=0)
    return log
