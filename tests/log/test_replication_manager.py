"""The log manager's side of replication: ``replication-offset-checkpoint`` (Kafka's
OffsetCheckpointFile format) written for replicated logs and applied by ``make_replicated``, and
the partitions of a cluster broker created and deleted one at a time."""

import shutil

import pytest

from gregor.config import BrokerConfig
from gregor.log.log_manager import REPLICATION_CHECKPOINT, LogManager
from gregor.log.topic_registry import TopicRegistry
from gregor.protocol.records import build_batch


def batch(n=1):
    return build_batch([(b"k", b"v")] * n, timestamp=1_700_000_000_000)


@pytest.fixture
def manager(tmp_path):
    made = []

    def make(hosts_all_partitions=True):
        cfg = BrokerConfig.from_mapping({})
        lm = LogManager(tmp_path / "data", cfg.topic_defaults(), TopicRegistry(tmp_path / "data"),
                        hosts_all_partitions=hosts_all_partitions)
        lm.startup()
        made.append(lm)
        return lm

    yield make
    for lm in made:
        if lm._lock_fd is not None:
            lm.shutdown()


def test_replication_offset_checkpoint(manager):
    lm = manager(hosts_all_partitions=False)
    topic = lm.registry.add("orders", 3, {})
    lm.registry.save()
    p0 = lm.create_partition_log(topic, 0)
    p2 = lm.create_partition_log(topic, 2)
    assert lm.create_partition_log(topic, 0) is p0
    assert sorted(lm.logs) == [("orders", 0), ("orders", 2)]
    assert not (lm.data_dir / "orders-1").exists()
    for p in (p0, p2):
        for _ in range(5):
            p.append(batch(2))
    assert lm.write_hwm_checkpoint()
    assert not (lm.data_dir / REPLICATION_CHECKPOINT).exists()  # nothing replicated yet
    lm.make_replicated(p0)
    lm.make_replicated(p2)
    p0.update_high_watermark(7)
    p2.update_high_watermark(10)
    assert lm.write_hwm_checkpoint()
    assert (lm.data_dir / REPLICATION_CHECKPOINT).read_text() == "0\n2\norders 0 7\norders 2 10\n"
    lm.shutdown()

    again = manager(hosts_all_partitions=False)
    assert again.hwm_checkpoint == {("orders", 0): 7, ("orders", 2): 10}
    assert sorted(again.logs) == [("orders", 0), ("orders", 2)]  # only the hosted partitions
    assert not (again.data_dir / "orders-1").exists()
    q0 = again.get("orders", 0)
    assert q0.high_watermark == 10  # not replicated yet: the log end
    # a checkpoint written before the replica manager reached a log keeps its value
    again.make_replicated(q0)
    assert again.write_hwm_checkpoint()
    assert again.hwm_checkpoint == {("orders", 2): 10}
    assert (again.data_dir / REPLICATION_CHECKPOINT).read_text() == "0\n2\norders 0 7\norders 2 10\n"
    assert q0.replicated and q0.high_watermark == 7
    again.make_replicated(q0)  # idempotent
    assert q0.high_watermark == 7


def test_a_corrupt_replication_checkpoint_is_ignored(manager, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / REPLICATION_CHECKPOINT).write_text("7\nnonsense\n")
    lm = manager()
    assert lm.hwm_checkpoint == {}


def test_delete_partition_log_keeps_the_topic(manager):
    lm = manager(hosts_all_partitions=False)
    topic = lm.registry.add("orders", 2, {})
    lm.registry.save()
    p0 = lm.create_partition_log(topic, 0)
    lm.create_partition_log(topic, 1)
    lm.make_replicated(p0)
    p0.append(batch())
    lm.delete_partition_log("orders", 0)
    assert lm.get("orders", 0) is None and lm.get("orders", 1) is not None
    assert not (lm.data_dir / "orders-0").exists()
    assert not [c for c in lm.data_dir.iterdir() if c.name.endswith("-delete")]
    lm.delete_partition_log("orders", 0)  # nothing left: no error
    lm.shutdown()
    again = manager(hosts_all_partitions=False)
    assert again.registry.get("orders") is not None
    assert sorted(again.logs) == [("orders", 1)]
    # created again later: a new, empty log
    assert again.create_partition_log(again.registry.get("orders"), 0).log_end_offset == 0


def test_a_leftover_partition_deletion_is_removed_at_start_up(manager):
    lm = manager(hosts_all_partitions=False)
    topic = lm.registry.add("orders", 1, {})
    lm.registry.save()
    lm.create_partition_log(topic, 0).append(batch())
    lm.logs.pop(("orders", 0)).close_files()
    [tomb] = lm._rename_for_deletion([lm.data_dir / "orders-0"], "abc")  # a crash before the removal
    lm.shutdown()
    again = manager(hosts_all_partitions=False)
    assert not tomb.exists()
    assert again.registry.get("orders") is not None


def test_single_node_start_up_still_creates_every_partition(manager):
    lm = manager()
    lm.create_logs(lm.registry.add("orders", 2, {}))
    lm.registry.save()
    lm.shutdown()
    shutil.rmtree(lm.data_dir / "orders-1")
    again = manager()
    assert sorted(again.logs) == [("orders", 0), ("orders", 1)]
