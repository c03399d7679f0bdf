"""Loading reduces the log to the newest value per key before replaying; for any history this
must equal replaying every record in order."""

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.config import BrokerConfig
from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard
from gregor.coordinator.runtime.partition_writer import LogWriter
from gregor.coordinator.runtime.shard_runtime import ShardRuntime
from gregor.coordinator.runtime.timer import ManualClock, ManualTimer
from gregor.log.partition_log import PartitionLog, now_ms
from gregor.protocol.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_value,
)
from gregor.protocol.records import build_batch
from tests.coordinator.harness import DEFAULT

groups = st.sampled_from(["a", "b", "c"])
record = st.one_of(
    st.builds(lambda g, p, o: (OffsetCommitKey(g, "t", p), OffsetCommitValue(o, "", 1)),
              groups, st.integers(0, 3), st.integers(0, 1000)),
    st.builds(lambda g, p: (OffsetCommitKey(g, "t", p), None), groups, st.integers(0, 3)),
    st.builds(lambda g, gen: (GroupMetadataKey(g), GroupMetadataValue("consumer", gen, None, None, 1, [])),
              groups, st.integers(0, 9)),
    st.builds(lambda g: (GroupMetadataKey(g), None), groups),
)


def state(shard):
    """Offsets, and the groups that hold something. (A group that only ever had offsets, all of
    them deleted, lingers in memory until the next expiry run after a sequential replay; like
    Kafka's loader, loading does not recreate it.)"""
    offsets = {g: dict(o) for g, o in shard.offsets_mgr.offsets.items() if o}
    groups = {g: (grp.generation_id, grp.state.value) for g, grp in shard.groups.items()
              if g in offsets or grp.generation_id or grp.protocol_type}
    return offsets, groups


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(record, min_size=1, max_size=5), min_size=1, max_size=12))
def test_reduced_replay_equals_sequential_replay(tmp_path_factory, batches):
    d = tmp_path_factory.mktemp("p")
    cfg = BrokerConfig.from_mapping({}).topic_defaults()
    plog = PartitionLog(d / "__consumer_offsets-0", "__consumer_offsets", 0, cfg)
    plog.open(clean_shutdown=False, recovery_point=0)
    sequential = GroupCoordinatorShard(0, DEFAULT, ManualClock(), ManualTimer(ManualClock()))
    for batch in batches:
        plog.append_batch_unchecked(build_batch([(encode_key(k), encode_value(v)) for k, v in batch], timestamp=1))
        for k, v in batch:
            sequential.replay(k, v)

    sequential.on_loaded()

    async def load():
        rt = ShardRuntime(0, plog, lambda p, t: GroupCoordinatorShard(p, DEFAULT, now_ms, t), RECORD_SERDE,
                          LogWriter(plog))
        rt.start_loading()
        await rt.wait_loaded()
        s = state(rt.shard)
        rt.unload()
        return s

    assert asyncio.run(load()) == state(sequential)
