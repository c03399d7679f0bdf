"""Issue 23's replication defects, each reproduced with real brokers, a real ZooKeeper, signals,
a TCP relay in front of ZooKeeper and a size-limited tmpfs; each of these failed on the main of
before the fix (run with the previous main's sources on PYTHONPATH).

- 0: a leader restarted within its old ZooKeeper session acts as leader only once it has
  registered and the controller has written its leadership again (it acknowledged records that
  the next leader did not have); a leader paused past its session loses nothing acknowledged.
- 1: while an ISR expansion is written (the write hangs: the leader's ZooKeeper connection is
  cut), the high watermark does not pass the replica being added.
- 2: a full disk when a broker becomes leader: it gives up (halts), leadership moves to a healthy
  replica, and the broker rejoins once space is freed and it is started again.
- 3: a follower that was down while DeleteRecords moved the log start into a batch rejoins.
- 4 (truncation past an epoch the follower was given and never wrote in) needs a broker that
  misses an election while it stays up; it is tested on real logs in
  tests/replication/test_replica_fetcher.py and by the randomized fault run (bench/).
- 5: a new leader epoch of the same leader does not reload the group coordinator's shard.
- 6: ListOffsets by timestamp and max timestamp answer only below the high watermark.
- 7: OffsetFetch does not show a commit the in-sync replicas do not have.
- 8: DeleteRecords sent to a follower is refused.
- 9: a broker in controlled shutdown stops fetching before it is taken back into an ISR.
- 10: a new leader answers a follower that is ahead of it UNKNOWN_LEADER_EPOCH, not
  NOT_LEADER_OR_FOLLOWER.
- 11 (found by the fault campaign): a coordinator paused past its session does not answer from
  the state it had before the pause once it resumes.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.admin.wire_client import WireClient
from gregor.cluster.zk import znodes as zn
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch
from tests.support.cluster import BrokerCluster
from tests.support.replication import (
    FAST_DEFAULT_LAG,
    ContinuousProducer,
    check_read_exactly_once,
    check_replicas_identical,
    states,
    wait_full_isr,
    wait_states,
)
from tests.support.waiting import wait_for
from tests.support.zk_relay import ZkRelay

pytestmark = pytest.mark.timeout(300)


# -- helpers --------------------------------------------------------------------------------------
def create(cluster: BrokerCluster, name: str, assignment: list[list[int]], configs: dict[str, str] | None = None
           ) -> None:
    """A topic with a manual assignment (the first replica of each partition leads)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment, config=configs or {})],
                             operation_timeout=30)
    fs[name].result(30)
    wait_states(cluster, name, len(assignment), lambda st: st.leader >= 0, 30, f"{name} to have leaders")
    # and each leader has been told (the controller's LeaderAndIsr follows the ZooKeeper state)
    for p in range(len(assignment)):
        leader_id = state_of(cluster, name, p).leader
        leader = cluster.broker(leader_id).bootstrap
        wait_for(lambda p=p, leader=leader: list_offset(leader, name, p, -1)[0] == ErrorCode.none, 30,
                 f"broker {leader_id} to lead {name}-{p}")


def state_of(cluster: BrokerCluster, topic: str, partition: int = 0) -> zn.PartitionState:
    with cluster.zk_client() as zk:
        st = states(zk, topic, partition + 1)[partition]
    assert st is not None
    return st


def call(address: str, api_key: int, version: int, body: dict[str, Any]) -> Any:
    wire = WireClient(address, timeout=15)
    try:
        return wire.call(api_key, version, body)
    finally:
        wire.close()


def produce_batch(address: str, topic: str, partition: int, records: int, acks: int = -1,
                  timestamp: int | None = None, timeout_ms: int = 10000) -> tuple[int, int]:
    """One batch of ``records`` records; (error code, base offset)."""
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    batch = build_batch([(None, f"v{i}".encode()) for i in range(records)], timestamp=ts)
    resp = call(address, ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": acks, "timeout": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def list_offset(address: str, topic: str, partition: int, timestamp: int, epoch: int = -1) -> tuple[int, int]:
    """(error code, offset) of ListOffsets v7 as a consumer asks it."""
    resp = call(address, ApiKey.LIST_OFFSETS, 7, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "current_leader_epoch": epoch, "timestamp": timestamp}]}]})
    p = resp.topics[0].partitions[0]
    return p.error_code, p.offset


def log_lines(cluster: BrokerCluster, broker_id: int, since: int = 0) -> list[str]:
    return cluster.broker(broker_id).output()[since:].splitlines()


def log_size(cluster: BrokerCluster, broker_id: int) -> int:
    return len(cluster.broker(broker_id).output())


def others(cluster: BrokerCluster, *ids: int) -> list[int]:
    return [b for b in cluster.ids if b not in ids]


def controller_id(cluster: BrokerCluster) -> int:
    with cluster.zk_client() as zk:
        got = zk.get(zn.CONTROLLER) if zk.exists(zn.CONTROLLER) else None
    return zn.decode_controller(got[0]) if got else -1


# -- 0 --------------------------------------------------------------------------------------------
def test_a_leader_restarted_within_its_session_leads_only_once_the_controller_says_so(cluster_factory):
    """SIGKILL the leader of an RF=3 partition under an idempotent acks=all load and start it again
    at once: its previous session is still alive, ZooKeeper still names it leader. It must not act
    as leader before it has registered and the controller has written a new leader epoch (before
    the fix it did, and acknowledged records the next leader did not have); nothing acknowledged
    is lost and the replicas end identical."""
    cluster = cluster_factory(3, overrides={**FAST_DEFAULT_LAG, "zookeeper.session.timeout.ms": "6000",
                                            "min.insync.replicas": "2"})
    create(cluster, "t", [[1, 2, 3], [1, 3, 2]])
    prod = ContinuousProducer(cluster.bootstrap, "t", 2).start()
    prod.wait_acked(300, 60, "acknowledgements before the restart")
    epochs = {p: state_of(cluster, "t", p).leader_epoch for p in range(2)}
    since = log_size(cluster, 1)
    cluster.kill(1)
    cluster.start_broker(1, timeout=60)  # waits for the old session to go, then registers
    prod.wait_acked(300, 90, "acknowledgements after the restart")
    lines = log_lines(cluster, 1, since)
    registered = next(i for i, line in enumerate(lines) if "registered broker 1" in line)
    early = [line for line in lines[:registered] if re.search(r"t-\d: leader at epoch", line)]
    assert not early, f"broker 1 led before it registered: {early}"
    for line in lines[registered:]:
        m = re.search(r"t-(\d): leader at epoch (\d+)", line)
        if m:
            assert int(m.group(2)) > epochs[int(m.group(1))], f"led at an epoch of its previous run: {line}"
    prod.stop()
    assert not prod.failed, prod.failed[:5]
    counts = check_read_exactly_once(cluster.bootstrap, prod)
    wait_full_isr(cluster, "t", 2)
    check_replicas_identical(cluster, "t", 2, counts)


def test_a_leader_paused_past_its_session_loses_nothing_acknowledged(cluster_factory):
    """SIGSTOP the leader longer than its ZooKeeper session under an idempotent acks=all load:
    the controller moves leadership; when it resumes, its session has expired and it gives up its
    roles until it is registered again and told what to do. Nothing acknowledged is lost."""
    cluster = cluster_factory(3, overrides={**FAST_DEFAULT_LAG, "min.insync.replicas": "2"})
    create(cluster, "t", [[1, 2, 3], [2, 1, 3]])
    prod = ContinuousProducer(cluster.bootstrap, "t", 2).start()
    prod.wait_acked(300, 60, "acknowledgements before the pause")
    cluster.pause(1)
    time.sleep(4 + 3)  # past the 4 s session
    prod.wait_acked(100, 60, "acknowledgements while broker 1 is paused")
    cluster.resume(1)
    prod.wait_acked(300, 90, "acknowledgements after the pause")
    prod.stop()
    assert not prod.failed, prod.failed[:5]
    counts = check_read_exactly_once(cluster.bootstrap, prod)
    wait_full_isr(cluster, "t", 2)
    check_replicas_identical(cluster, "t", 2, counts)


# -- 1 --------------------------------------------------------------------------------------------
def test_the_high_watermark_does_not_pass_a_replica_whose_isr_expansion_is_being_written(
        cluster_factory, zookeeper):
    """Broker 1 leads t-0 and reaches ZooKeeper through a relay the test cuts, so its ISR
    expansion, when broker 3 catches up after a restart, hangs (kazoo sends it once the connection
    is back, within the session). Broker 3 is then paused: while the expansion may be taken, an
    acks=all write that broker 3 does not have must not be acknowledged (before the fix the high
    watermark was computed over the ISR without broker 3, and if broker 3 was then elected, the
    write was lost)."""
    relay = ZkRelay(zookeeper)
    try:
        cluster = cluster_factory(3, overrides={**FAST_DEFAULT_LAG, "zookeeper.session.timeout.ms": "20000",
                                                "replica.lag.time.max.ms": "30000", "min.insync.replicas": "2"})
        cluster.stop(1)
        cluster.broker(1).overrides["zookeeper.connect"] = relay.connect_string(cluster.chroot)
        cluster.start_broker(1)
        cluster.wait_formed()
        wait_for(lambda: controller_id(cluster) in (2, 3), 30, "a controller other than broker 1")
        create(cluster, "t", [[1, 2, 3]])
        leader = cluster.broker(1).bootstrap
        assert produce_batch(leader, "t", 0, 10)[0] == ErrorCode.none
        cluster.kill(3)
        wait_states(cluster, "t", 1, lambda st: st.isr == [1, 2], 30, "broker 3 out of the ISR")
        assert produce_batch(leader, "t", 0, 10)[0] == ErrorCode.none
        relay.cut()  # broker 1's session is suspended (20 s), not expired
        cluster.start_broker(3)  # it catches up from broker 1: the expansion's write hangs
        wait_for(lambda: _offset_of(cluster, 3, "t") >= 20, 30, "broker 3 to catch up")
        time.sleep(1)
        cluster.pause(3)
        code, _ = produce_batch(leader, "t", 0, 5, timeout_ms=3000)
        assert code == ErrorCode.request_timed_out, ErrorCode(code).name
        assert list_offset(leader, "t", 0, -1)[1] == 20  # the high watermark did not move past broker 3
        relay.restore()
        cluster.resume(3)
        wait_states(cluster, "t", 1, lambda st: st.isr == [1, 2, 3], 60, "broker 3 back in the ISR")
        wait_for(lambda: list_offset(leader, "t", 0, -1)[1] == 25, 30, "the high watermark to cover the write")
    finally:
        relay.close()


def _offset_of(cluster: BrokerCluster, broker_id: int, topic: str, partition: int = 0) -> int:
    """A replica's log end, read from its segment files."""
    from gregor.protocol import record_batch as rb

    end = -1
    for seg in sorted((cluster.broker(broker_id).data_dir / f"{topic}-{partition}").glob("*.log")):
        buf = seg.read_bytes()
        pos = 0
        while pos + rb.HEADER_SIZE <= len(buf):
            h = rb.read_header(buf, pos)
            if h.size <= 0 or pos + h.size > len(buf):
                break
            end = h.next_offset
            pos += h.size
    return end


# -- 2 --------------------------------------------------------------------------------------------
@pytest.fixture
def tmpfs_factory(tmp_path):
    """Mounts small tmpfs file systems (root only); unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def make(path: Path, size: str = "16m") -> Path:
        path.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(path)
        return path

    yield make
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; the filler file's path."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 20, 1 << 12, 1):
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_when_becoming_leader_moves_leadership_to_a_healthy_replica(tmp_path, zookeeper,
                                                                                tmpfs_factory):
    """Broker 2's log directory is a small tmpfs, filled to the last byte; the leader of t-0
    (broker 1) dies and broker 2 is elected, and cannot write its leader epoch checkpoint. It must
    not stay leader of a partition it cannot serve (before the fix it did, for good: followers got
    NOT_LEADER_OR_FOLLOWER, acks=all NOT_ENOUGH_REPLICAS, and freeing space did not help): it
    halts, as Kafka halts a broker whose last log directory failed, and leadership moves to broker 3.
    Once space is freed it starts again and rejoins the ISR."""
    cluster = BrokerCluster(tmp_path / "cluster", zookeeper, 3,
                            {**FAST_DEFAULT_LAG, "telemetry.interval.ms": "0", "min.insync.replicas": "1"})
    tmpfs_factory(tmp_path / "cluster" / "broker-2", "16m")
    try:
        cluster.start()
        create(cluster, "t", [[1, 2, 3]])
        assert produce_batch(cluster.broker(1).bootstrap, "t", 0, 10)[0] == ErrorCode.none
        wait_full_isr(cluster, "t", 1)
        filler = fill(cluster.broker(2).data_dir)
        cluster.kill(1)
        st = wait_states(cluster, "t", 1, lambda st: st.leader == 3, 60, "broker 3 to lead t-0")[0]
        assert st.leader == 3
        wait_for(lambda: not cluster.broker(2).alive(), 30, "broker 2 to halt")
        assert cluster.broker(2).proc is not None and cluster.broker(2).proc.returncode == 1
        assert "log directory" in cluster.broker(2).output() and "failed" in cluster.broker(2).output()
        code, offset = produce_batch(cluster.broker(3).bootstrap, "t", 0, 5)
        assert code == ErrorCode.none and offset == 10
        filler.unlink()
        cluster.start_broker(2, timeout=60)
        cluster.start_broker(1, timeout=60)
        wait_full_isr(cluster, "t", 1, timeout=60)
    finally:
        cluster.kill_all()


# -- 3 --------------------------------------------------------------------------------------------
def test_a_follower_rejoins_after_delete_records_moved_the_log_start_into_a_batch(cluster_factory):
    """Broker 3 is down while DeleteRecords moves t-0's log start to 45, inside the batch 40..49.
    Back, it starts its empty log at 45 and the leader sends the whole batch: Kafka starts the log
    over at the batch's base offset and appends it. Before the fix the append failed the same way
    forever and broker 3 never rejoined the ISR."""
    cluster = cluster_factory(3, overrides={**FAST_DEFAULT_LAG, "min.insync.replicas": "1"})
    create(cluster, "t", [[1, 2, 3]])
    leader = cluster.broker(1).bootstrap
    for _ in range(2):
        assert produce_batch(leader, "t", 0, 10)[0] == ErrorCode.none
    wait_full_isr(cluster, "t", 1)
    cluster.kill(3)
    for _ in range(4):
        assert produce_batch(leader, "t", 0, 10)[0] == ErrorCode.none
    resp = call(leader, ApiKey.DELETE_RECORDS, 2, {
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 45}]}], "timeout": 10000})
    assert resp.topics[0].partitions[0].error_code == ErrorCode.none
    cluster.start_broker(3)
    wait_full_isr(cluster, "t", 1, timeout=60)
    assert produce_batch(leader, "t", 0, 10)[0] == ErrorCode.none


# -- 5 --------------------------------------------------------------------------------------------
def test_a_follower_of_the_offsets_partition_dying_does_not_reload_its_coordinator(cluster_factory):
    """The controller takes a dead follower out of the ISR with a new leader epoch; the group's
    coordinator leads on and must not unload and load its shard (before the fix it did: commits and
    joins got NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS while nothing moved)."""
    cluster = cluster_factory(3, overrides={**FAST_DEFAULT_LAG, "offsets.topic.num.partitions": "1",
                                            "offsets.topic.replication.factor": "3"})
    create(cluster, "t", [[1, 2, 3]])
    group = "g"
    wait_for(lambda: _commit(cluster.bootstrap, group, 1) == ErrorCode.none, 60, "a first commit")
    coord = state_of(cluster, "__consumer_offsets").leader
    wait_full_isr(cluster, "__consumer_offsets", 1)
    victim = others(cluster, coord)[0]
    since = log_size(cluster, coord)
    errors: list[int] = []
    stop = threading.Event()

    def commit_loop() -> None:
        address = cluster.broker(coord).bootstrap
        n = 2
        while not stop.is_set():
            code = _commit(address, group, n)
            if code != ErrorCode.none:
                errors.append(code)
            n += 1
            time.sleep(0.05)

    t = threading.Thread(target=commit_loop, daemon=True)
    t.start()
    time.sleep(1)
    before = state_of(cluster, "__consumer_offsets").leader_epoch
    cluster.kill(victim)
    wait_states(cluster, "__consumer_offsets", 1, lambda st: victim not in st.isr, 30, "the victim out of the ISR")
    time.sleep(2)
    stop.set()
    t.join(10)
    after = state_of(cluster, "__consumer_offsets")
    assert after.leader == coord and after.leader_epoch > before
    lines = log_lines(cluster, coord, since)
    reloads = [line for line in lines if "Unloaded __consumer_offsets" in line or "Finished loading" in line]
    assert not reloads, reloads
    assert not errors, [ErrorCode(c).name for c in errors]


def _commit(bootstrap: str, group: str, offset: int) -> int:
    from gregor.admin.client import AdminClient as GregorAdmin

    for address in bootstrap.split(","):
        try:
            admin = GregorAdmin(address)
        except OSError:
            continue
        try:
            node, code, _ = admin.find_coordinator(group)
            if code != ErrorCode.none or node is None:
                return code
            resp = call(f"{node.host}:{node.port}", ApiKey.OFFSET_COMMIT, 8, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                         "committed_leader_epoch": -1,
                                                         "committed_metadata": ""}]}]})
            return resp.topics[0].partitions[0].error_code
        except OSError:
            continue
        finally:
            admin.close()
    return ErrorCode.coordinator_not_available


# -- 6 --------------------------------------------------------------------------------------------
def test_list_offsets_by_timestamp_answers_only_below_the_high_watermark(cluster_factory):
    """With both followers paused, a record written at the leader (acks=1) with a later timestamp
    is above the high watermark: ListOffsets by its timestamp and by max timestamp find nothing (-1)
    until the followers have it (before the fix they answered its offset, which a consumer could
    not read and which a new leader might not have)."""
    cluster = cluster_factory(3, overrides={**FAST_DEFAULT_LAG, "min.insync.replicas": "1",
                                            "replica.lag.time.max.ms": "30000"})
    create(cluster, "t", [[1, 2, 3]])
    leader = cluster.broker(1).bootstrap
    now = int(time.time() * 1000)
    assert produce_batch(leader, "t", 0, 10, timestamp=now - 60_000)[0] == ErrorCode.none
    wait_for(lambda: list_offset(leader, "t", 0, -1)[1] == 10, 30, "the high watermark at 10")
    cluster.pause(2)
    cluster.pause(3)
    try:
        assert produce_batch(leader, "t", 0, 1, acks=1, timestamp=now + 3_600_000)[0] == ErrorCode.none
        assert list_offset(leader, "t", 0, -1) == (ErrorCode.none, 10)
        assert list_offset(leader, "t", 0, now + 3_600_000) == (ErrorCode.none, -1)
        assert list_offset(leader, "t", 0, now) == (ErrorCode.none, -1)
        assert list_offset(leader, "t", 0, -3)[1] == -1
        assert list_offset(leader, "t", 0, now - 120_000) == (ErrorCode.none, 0)
    finally:
        cluster.resume(2)
        cluster.resume(3)
    wait_for(lambda: list_offset(leader, "t", 0, now + 3_600_000) == (ErrorCode.none, 10), 30, "the record committed")
    assert list_offset(leader, "t", 0, -3)[1] == 10


# -- 7 --------------------------------------------------------------------------------------------
def test_offset_fetch_does_not_show_a_commit_the_isr_does_not_have(cluster_factory):
    """The offsets partition's followers are paused: a commit is appended by its leader and waits
    for them. Meanwhile another client's OffsetFetch answers the offset committed before (before the
    fix it answered the pending one, which is lost if the leader fails now); one that asks for stable
    offsets (as consumers do) waits for the commit instead, and gets it once it is replicated."""
    cluster = cluster_factory(3, overrides={**FAST_DEFAULT_LAG, "offsets.topic.num.partitions": "1",
                                            "offsets.topic.replication.factor": "3",
                                            "zookeeper.session.timeout.ms": "30000",  # the pause outlasts 4 s
                                            "replica.lag.time.max.ms": "30000", "offsets.commit.timeout.ms": "4000"})
    create(cluster, "t", [[1, 2, 3]])
    wait_for(lambda: _commit(cluster.bootstrap, "g", 5) == ErrorCode.none, 60, "a first commit")
    coord = state_of(cluster, "__consumer_offsets").leader
    wait_full_isr(cluster, "__consumer_offsets", 1)
    followers = others(cluster, coord)
    address = cluster.broker(coord).bootstrap
    for b in followers:
        cluster.pause(b)
    try:
        pending: list[int] = []
        t = threading.Thread(target=lambda: pending.append(_commit(address, "g", 42)), daemon=True)
        t.start()
        time.sleep(1)
        assert _fetched(address, "g") == 5
        t.join(15)
        assert pending == [ErrorCode.coordinator_not_available]  # not replicated in time
        assert _fetched(address, "g") == 5
        stable: list[int] = []
        s = threading.Thread(target=lambda: stable.append(_fetched(address, "g", stable=True)), daemon=True)
        s.start()
        time.sleep(1)
        assert not stable  # it waits for the commit before it
    finally:
        for b in followers:
            cluster.resume(b)
    s.join(15)
    assert stable == [42]
    # the record is in the leader's log: once the followers have it, it is committed (as in Kafka)
    wait_for(lambda: _fetched(address, "g") == 42, 30, "the commit to be replicated")


def test_a_coordinator_paused_past_its_session_does_not_answer_from_stale_state(cluster_factory):
    """SIGSTOP the group's coordinator past its ZooKeeper session; the new coordinator takes a
    commit. An OffsetFetch waiting in the old coordinator's socket when it resumes must not be
    answered from its memory (the offset committed before the pause): its session expired, it is no
    longer anyone's leader, but it takes a few hundred ms to hear so from ZooKeeper. Before the fix
    it answered the stale offset; a broker that notices it was paused checks its session first."""
    cluster = cluster_factory(3, overrides={**FAST_DEFAULT_LAG, "offsets.topic.num.partitions": "1",
                                            "offsets.topic.replication.factor": "3"})
    create(cluster, "t", [[1, 2, 3]])
    wait_for(lambda: _commit(cluster.bootstrap, "g", 5) == ErrorCode.none, 60, "a first commit")
    coord = state_of(cluster, "__consumer_offsets").leader
    wait_full_isr(cluster, "__consumer_offsets", 1)
    rest = ",".join(cluster.broker(b).bootstrap for b in others(cluster, coord))
    wire = WireClient(cluster.broker(coord).bootstrap, timeout=30)
    try:
        cluster.pause(coord)
        try:
            wait_states(cluster, "__consumer_offsets", 1, lambda st: st.leader not in (coord, -1), 60,
                        "a new coordinator")
            wait_for(lambda: _commit(rest, "g", 42) == ErrorCode.none, 60, "a commit at the new coordinator")
            answers: list[Any] = []
            t = threading.Thread(target=lambda: answers.append(wire.call(ApiKey.OFFSET_FETCH, 8, {
                "groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}],
                "require_stable": False})), daemon=True)
            t.start()
            time.sleep(0.5)  # the request waits in the paused broker's socket
        finally:
            cluster.resume(coord)
        t.join(30)
    finally:
        wire.close()
    assert answers, "no answer"
    g = answers[0].groups[0]
    if g.error_code == ErrorCode.none:
        assert g.topics[0].partitions[0].committed_offset == 42, "answered the offset of before the pause"
    else:
        assert g.error_code == ErrorCode.not_coordinator, ErrorCode(g.error_code).name


def _fetched(address: str, group: str, stable: bool = False) -> int:
    resp = call(address, ApiKey.OFFSET_FETCH, 8, {
        "groups": [{"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}]}], "require_stable": stable})
    g = resp.groups[0]
    assert g.error_code == ErrorCode.none, ErrorCode(g.error_code).name
    return g.topics[0].partitions[0].committed_offset


# -- 8 --------------------------------------------------------------------------------------------
def test_delete_records_sent_to_a_follower_is_refused(cluster_factory):
    """A client with stale metadata sends DeleteRecords to a follower: it answers
    NOT_LEADER_OR_FOLLOWER and trims nothing (before the fix it trimmed its own log and answered
    success, and the records were still on the leader)."""
    cluster = cluster_factory(3, overrides=FAST_DEFAULT_LAG)
    create(cluster, "t", [[1, 2, 3]])
    assert produce_batch(cluster.broker(1).bootstrap, "t", 0, 10)[0] == ErrorCode.none
    wait_full_isr(cluster, "t", 1)
    resp = call(cluster.broker(2).bootstrap, ApiKey.DELETE_RECORDS, 2, {
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 5}]}], "timeout": 5000})
    p = resp.topics[0].partitions[0]
    assert p.error_code == ErrorCode.not_leader_or_follower
    c = Consumer({"bootstrap.servers": cluster.broker(2).bootstrap, "group.id": "x"})
    try:
        assert c.get_watermark_offsets(TopicPartition("t", 0), 10) == (0, 10)
    finally:
        c.close()
    checkpoint = cluster.broker(2).data_dir / "log-start-offset-checkpoint"
    assert not checkpoint.exists() or "t 0 5" not in checkpoint.read_text()


# -- 9 --------------------------------------------------------------------------------------------
def test_a_broker_in_controlled_shutdown_is_not_taken_back_into_an_isr(cluster_factory):
    """SIGTERM broker 3, a follower of 12 partitions led by brokers 1 and 2: the controlled
    shutdown takes it out of their ISRs, and from then on it must not fetch (Kafka's StopReplica),
    or its leaders take it back (acks=all would wait for a broker about to go). Before the fix it
    fetched until the controller had stopped, and was taken back."""
    cluster = cluster_factory(3, overrides={**FAST_DEFAULT_LAG, "telemetry.interval.ms": "500"})
    assignment = [[1 + p % 2, 2 - p % 2, 3] for p in range(12)]
    create(cluster, "t", assignment)
    wait_full_isr(cluster, "t", 12)
    seen: list[tuple[int, list[int]]] = []
    stop = threading.Event()

    def watch() -> None:
        with cluster.zk_client() as zk:
            while not stop.is_set():
                for p, st in states(zk, "t", 12).items():
                    if st is not None:
                        seen.append((p, list(st.isr)))
                time.sleep(0.01)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    assert cluster.stop(3) == 0
    stop.set()
    t.join(10)
    back = []
    for p in range(12):
        isrs = [isr for q, isr in seen if q == p]
        out = next((i for i, isr in enumerate(isrs) if 3 not in isr), None)
        if out is not None and any(3 in isr for isr in isrs[out:]):
            back.append(p)
    assert not back, f"broker 3 was taken back into the ISR of {back} during its controlled shutdown"


# -- 10 -------------------------------------------------------------------------------------------
def test_a_replica_asked_at_a_newer_leader_epoch_answers_unknown_leader_epoch(cluster_factory):
    """A follower that has learnt of an election asks the new leader before the leader has read it:
    Kafka checks the leader epoch first and answers UNKNOWN_LEADER_EPOCH (retried at once), not
    NOT_LEADER_OR_FOLLOWER (which cost the follower a whole replica.fetch.backoff.ms)."""
    cluster = cluster_factory(3, overrides=FAST_DEFAULT_LAG)
    create(cluster, "t", [[1, 2, 3]])
    epoch = state_of(cluster, "t").leader_epoch
    resp = call(cluster.broker(2).bootstrap, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {
        "replica_id": 3, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": epoch + 1, "leader_epoch": epoch}]}]})
    assert resp.topics[0].partitions[0].error_code == ErrorCode.unknown_leader_epoch
    resp = call(cluster.broker(2).bootstrap, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {
        "replica_id": 3, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": epoch}]}]})
    assert resp.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


def test_create_topics_answers_every_topic_of_a_large_request(cluster_factory):
    """CreateTopics with 40 topics on three brokers: written together, waited for together, each
    answered on its own (one error does not fail the others)."""
    cluster = cluster_factory(3, overrides=FAST_DEFAULT_LAG)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = [NewTopic(f"many-{i}", 2, 3) for i in range(40)] + [NewTopic("bad", 1, 5)]
    futures = admin.create_topics(topics, operation_timeout=60)
    for i in range(40):
        futures[f"many-{i}"].result(60)
    with pytest.raises(Exception, match="(?i)replication"):
        futures["bad"].result(60)
    md = admin.list_topics(timeout=10)
    assert all(f"many-{i}" in md.topics for i in range(40))


def _produce_values(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, f"{i}".encode())
    assert p.flush(60) == 0
