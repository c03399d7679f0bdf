"""A follower's truncation and appends on a real partition log, without a network (issue 23,
defects 3 and 4): Kafka's truncation when the leader answers with an epoch the follower does not
have, and a leader whose log start is inside the batch it sends first."""

from __future__ import annotations

from gregor.config import BrokerConfig
from gregor.log.partition_log import PartitionLog
from gregor.protocol.records import build_batch
from gregor.replication.replica_fetcher import ReplicaFetcher, truncation_target


def make_log(tmp_path, name="t-0") -> PartitionLog:
    cfg = BrokerConfig.from_mapping({}).topic_defaults()
    plog = PartitionLog(tmp_path / name, "t", 0, cfg)
    plog.open(clean_shutdown=False, recovery_point=0)
    plog.replicated = True
    return plog


def write(plog: PartitionLog, epoch: int, count: int) -> None:
    """``count`` records of leader epoch ``epoch``, as a leader appends them."""
    for _ in range(count):
        plog.append_batch_unchecked(build_batch([(None, b"v")]), leader_epoch=epoch)


def truncate_like_the_fetcher(follower: PartitionLog, leader: PartitionLog) -> int:
    """The fetcher's loop of OffsetForLeaderEpoch questions (answered by ``leader``'s cache) and
    truncations until done; the follower's log end after it."""
    for _ in range(20):
        asked = follower.epochs.latest_epoch
        epoch, end = leader.epochs.end_offset_for(asked, leader.log_end_offset)
        target, done = truncation_target(follower, epoch, end)
        if target < follower.log_end_offset or not done:
            follower.truncate_to(target)
        if done:
            return follower.log_end_offset
    raise AssertionError("truncation did not finish")


def test_truncation_goes_on_past_an_epoch_the_follower_wrote_nothing_in(tmp_path):
    """The follower led epoch 1 (records 50..99) and was then given epoch 3, at its log end, and
    wrote nothing in it; the leader has epoch 2 from offset 50 and epoch 4 from 150. Asking for
    epoch 3, the follower hears "epoch 2 ends at 150", an epoch it does not have: Kafka truncates to
    where its own epoch below 2 ends (100, which removes only the empty epoch 3) and asks again,
    with epoch 1 (answer: epoch 0 ends at 50), and keeps nothing of epoch 1."""
    follower = make_log(tmp_path, "f")
    write(follower, 0, 50)
    write(follower, 1, 50)
    follower.epochs.assign(3, follower.log_end_offset)  # led at epoch 3, wrote nothing
    leader = make_log(tmp_path, "l")
    write(leader, 0, 50)
    write(leader, 2, 100)
    write(leader, 4, 10)
    assert truncate_like_the_fetcher(follower, leader) == 50
    assert follower.epochs.latest_epoch == 0


def test_truncation_when_the_leader_knows_the_followers_epoch(tmp_path):
    follower = make_log(tmp_path, "f")
    write(follower, 0, 10)
    write(follower, 2, 10)  # a divergent tail 15..19 of epoch 2
    leader = make_log(tmp_path, "l")
    write(leader, 0, 10)
    write(leader, 2, 5)
    write(leader, 3, 5)
    assert truncate_like_the_fetcher(follower, leader) == 15


def test_a_log_start_inside_the_first_batch_starts_the_log_at_the_batch(tmp_path):
    """The follower was down while DeleteRecords moved the leader's log start to 12, inside the
    batch 10..14: it restarts at 12 with an empty log, and the leader sends the whole batch. Kafka
    starts the log over at the batch's base offset and appends it."""
    leader = make_log(tmp_path, "l")
    leader.append_batch_unchecked(build_batch([(None, b"a")] * 10), leader_epoch=0)
    leader.append_batch_unchecked(build_batch([(None, b"b")] * 5), leader_epoch=0)
    follower = make_log(tmp_path, "f")
    follower.truncate_fully_and_start_at(12)
    data = leader.read(12, 1 << 20).records
    ReplicaFetcher._append(follower, bytes(data))
    assert (follower.log_start_offset, follower.log_end_offset) == (10, 15)
