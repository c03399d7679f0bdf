import pytest

from gregor.config import BrokerConfig
from gregor.log.partition_log import PartitionLog


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def make_log(tmp_path, clock):
    def make(clean=False, recovery_point=0, **overrides):
        cfg = BrokerConfig.from_mapping({}).topic_defaults()
        cfg.update(overrides)
        plog = PartitionLog(tmp_path / "t-0", "t", 0, cfg, clock)
        plog.open(clean_shutdown=clean, recovery_point=recovery_point)
        return plog

    return make
