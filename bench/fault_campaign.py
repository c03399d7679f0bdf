"""A seeded, randomized fault campaign against a three-broker Gregor cluster over ZooKeeper: every
fault logged, the invariants checked once everything is healed. Not a pytest test: a script.

    PYTHONPATH=<tree>/src:<tree> .venv/bin/python bench/fault_campaign.py [--seed N] [--minutes M]
                                                                        [--keep] [--json]

Run it against a frozen tree (a git worktree) so that the brokers it spawns (``python -m gregor
serve``, which inherits PYTHONPATH) run that tree's code. Exit code 0 only if every invariant holds.

Set-up: a ZooKeeper server of the campaign's own (so that it can be stopped and paused), three
brokers (min.insync.replicas=2, RF 3 everywhere, 6 __consumer_offsets partitions, 6 s ZooKeeper
sessions, replica.lag.time.max.ms=10000, no unclean election; the consumer group protocol enabled
besides the classic one), one topic of 6 partitions with RF 3.

Load during the whole fault phase: two idempotent acks=all producers (tests/support/replication.py's
ContinuousProducer, each tagging its values ``<partition>:<seq>:<producer>``) on the topic; a
classic consumer group and a consumer-protocol (KIP-848) group of two members each
(tests/support/group_load.py's GroupConsumer, committing synchronously every 200 ms); a thread
reading every group's committed offsets (OffsetFetch at the coordinator, confluent-kafka's admin
client) every second; a thread polling /controller and the partition state znodes of the topic and
of __consumer_offsets and logging every change (states.log).

Faults (chosen by the seed, one every 2-15 s, each running on a thread of its own so that they
overlap): SIGKILL of a random broker, of the controller, of a group's coordinator, each restarted
after 0-20 s (0: at once, within its old ZooKeeper session); SIGKILL of the leader of a random
partition, restarted at once; SIGSTOP of a broker for 1-15 s; a controlled shutdown (SIGTERM) and a
restart; ZooKeeper stopped for 1-10 s and started again over the same data; ZooKeeper SIGSTOPped for
1-5 s. At most one broker is affected at a time, except that a second broker fault is let in now and
then (``DOUBLE_FAULT_P``), to make partitions go offline.

Healing: every fault thread ends, everything paused is resumed, ZooKeeper and every broker started,
every partition of the topic and of __consumer_offsets led with a full ISR, 300 more
acknowledgements per producer, the producers stopped (flushed), the groups read to the end and
commit it, are described, and stop.

Invariants, each reported on its own, with evidence: no acknowledged record lost or moved (read
back at the offset it was acknowledged with); no record twice; offsets contiguous and each
producer's records in the order produced; the replicas of every partition (topic and
__consumer_offsets) byte-identical below the high watermark; committed offsets never going back
(an OffsetFetch, or a successful commit, that started after another one's answer never has a lower
offset) and no acknowledged commit lost (the final committed offset >= the highest successful
commit); each group Stable again with its members, and each group having read every offset.

An acknowledgement librdkafka gives without an offset (an implicit ack: a later batch of the
idempotent producer succeeded after this one's request failed in a way that may have persisted it)
is checked by value only. Broker restarts that exit during start-up are retried (a broker that
reaches no ZooKeeper within zookeeper.connection.timeout.ms exits with 2); any other exit is
reported as an anomaly, which the summary lists but which does not change the exit code.

Everything goes to a temporary directory (printed): campaign.log (every fault with monotonic and
wall-clock times), states.log (/controller and the partition state znodes over time), the brokers'
and ZooKeeper's logs, librdkafka-*.log (the consumers' cgrp and the producers' eos,msg debug logs),
acked-<producer>.txt (every acknowledgement: partition, offset, value), evidence-*.txt, summary.txt
and summary.json. It is removed at the end unless --keep is given or an invariant is violated.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))  # tests.support; PYTHONPATH comes first

from confluent_kafka import KafkaError  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402
from kazoo.exceptions import NoNodeError  # noqa: E402
from tests.support import group_load  # noqa: E402
from tests.support.cluster import BrokerCluster  # noqa: E402
from tests.support.group_checks import snapshot as consumer_group_snapshot  # noqa: E402
from tests.support.group_load import GroupConsumer, gaps, read_by_group  # noqa: E402
from tests.support.replication import (  # noqa: E402
    ContinuousProducer,
    consume_to_end,
    create_topic,
    high_watermarks,
    log_prefix,
)
from tests.support.zookeeper import ZooKeeperServer  # noqa: E402

from gregor.admin.client import AdminClient as GregorAdmin  # noqa: E402
from gregor.admin.client import AdminError  # noqa: E402
from gregor.cluster.zk import znodes as zn  # noqa: E402
from gregor.protocol import record_batch as rb  # noqa: E402
from gregor.protocol.api_keys import ApiKey  # noqa: E402
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for  # noqa: E402
from gregor.protocol.errors import ErrorCode  # noqa: E402

TOPIC = "campaign"
PARTITIONS = 6
OFFSETS_PARTITIONS = 6
OVERRIDES = {
    "zookeeper.session.timeout.ms": "6000", "min.insync.replicas": "2", "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "replica.lag.time.max.ms": "10000", "leader.imbalance.check.interval.seconds": "30",
    "unclean.leader.election.enable": "false",
    "group.coordinator.rebalance.protocols": "classic,consumer",  # for the KIP-848 group
}
CLASSIC_GROUP = "campaign-classic"
CONSUMER_GROUP = "campaign-consumer"
MEMBERS = 2
COMMIT_INTERVAL_S = 0.2
PRODUCER_PAUSE_S = 0.01  # between two sends of a producer: ~100 records/s each at most
DOUBLE_FAULT_P = 0.2  # a broker fault while another broker is affected
START_TIMEOUT_S = 180  # a broker's restart (the machine is slow and shared)
HEAL_TIMEOUT_S = 240
GROUP_TIMEOUT_S = 240
# kind -> weight
FAULT_WEIGHTS = {"kill_restart": 3, "kill_controller": 2, "kill_coordinator": 2, "kill_leader": 2, "pause": 3,
                 "controlled_shutdown": 2, "zk_stop": 1.5, "zk_pause": 1.5}
BROKER_FAULTS = {"kill_restart", "kill_controller", "kill_coordinator", "kill_leader", "pause", "controlled_shutdown"}
LOG_PATTERNS = re.compile(r"truncat|leader at epoch|ISR|follower of", re.IGNORECASE)


# -- the run's log ----------------------------------------------------------------------------------
class RunLog:
    """Lines with the time since the start, the monotonic clock and the wall clock (the brokers'
    logs have wall-clock times: ``[YYYY-mm-dd HH:MM:SS,mmm]``), to a file and to stderr."""

    def __init__(self, path: Path, echo: bool = True) -> None:
        self.path = path
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.echo = echo
        self._lock = threading.Lock()
        self._file = open(path, "a", buffering=1)  # noqa: SIM115

    def wall(self, mono: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.wall0 + (mono - self.t0))

    def stamp(self, mono: float | None = None) -> str:
        mono = time.monotonic() if mono is None else mono
        return f"{mono - self.t0:9.3f} mono={mono:.3f} {self.wall(mono).strftime('%H:%M:%S.%f')[:-3]}"

    def __call__(self, msg: str) -> None:
        line = f"{self.stamp()} {msg}"
        with self._lock:
            self._file.write(line + "\n")
            if self.echo:
                print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        self._file.close()


# -- load -------------------------------------------------------------------------------------------
class TaggedProducer(ContinuousProducer):
    """ContinuousProducer whose values carry the producer's tag (``<p>:<seq>:<tag>``: two producers
    on one topic write distinct values) and which records when each acknowledgement came; with
    ``debug_dir``, librdkafka's eos and msg debug log goes to ``librdkafka-producer-<tag>.log``."""

    debug_dir: Path | None = None

    def __init__(self, bootstrap: str, topic: str, partitions: int, tag: str, pause_s: float) -> None:
        super().__init__(bootstrap, topic, partitions, pause_s=pause_s)
        self.tag = tag
        if self.debug_dir is not None:  # librdkafka's idempotence and message-set debug log
            logger = logging.getLogger(f"fault_campaign.producer-{tag}")
            logger.propagate = False
            logger.setLevel(logging.DEBUG)
            handler = logging.FileHandler(self.debug_dir / f"librdkafka-producer-{tag}.log")
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            logger.addHandler(handler)
            self.config.update({"debug": "eos,msg", "logger": logger})
        # (partition, offset) -> when acknowledged; offset None: librdkafka acknowledged the record
        # without an offset (an implicit ack: a later batch of the idempotent producer succeeded
        # after this one's request had failed in a way that may have persisted it)
        self.acked_at: dict[tuple[int, int | None], float] = {}
        self.no_offset: list[tuple[int, bytes, float]] = []
        self.stop_error: str | None = None

    def _done(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            with self._lock:
                self.acked_at[(msg.partition(), msg.offset())] = time.monotonic()
                if msg.offset() is None:
                    self.no_offset.append((msg.partition(), msg.value(), time.monotonic()))
        super()._done(err, msg)

    def value(self, partition: int, seq: int) -> bytes:
        return f"{partition}:{seq:09d}:{self.tag}".encode()

    def stop_quietly(self) -> None:
        try:
            self.stop()
        except AssertionError as e:
            self.stop_error = str(e)


class LoggedConsumer(GroupConsumer):
    """GroupConsumer whose librdkafka ``cgrp`` debug log goes to ``<debug_dir>/librdkafka-<name>.log``
    (wall-clock times, as the brokers' logs), to find out afterwards what a member did."""

    debug_dir: Path | None = None

    def _config(self) -> dict[str, Any]:
        conf = super()._config()
        if self.debug_dir is not None:
            logger = logging.getLogger(f"fault_campaign.{self.name}")
            logger.propagate = False
            logger.setLevel(logging.DEBUG)
            handler = logging.FileHandler(self.debug_dir / f"librdkafka-{self.name}.log")
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            logger.addHandler(handler)
            conf.update({"debug": "cgrp", "logger": logger})
        return conf


def parse_value(value: bytes) -> tuple[int, int, str] | None:
    try:
        p, seq, tag = value.decode().split(":")
        return int(p), int(seq), tag
    except (UnicodeDecodeError, ValueError):
        return None


def offset_fetch(bootstrap: str, group: str, timeout: float = 5) -> dict[int, int]:
    """The group's committed offsets of the topic's partitions (-1: none), by OffsetFetch at the
    coordinator a broker of ``bootstrap`` names (the project's admin client, not librdkafka's:
    librdkafka 2.16's admin client aborted the process once, ``rd_kafka_enq_once_del_source_return:
    Assertion `eonce->refcnt > 0' failed``, while a coordinator was SIGSTOPped). With require_stable,
    as consumers ask: answered once the coordinator's earlier writes are committed (an admin's
    non-stable read may show an older offset right after the coordinator moved, as in Kafka).
    Raises on any error."""
    admin = GregorAdmin(bootstrap, timeout=timeout)
    try:
        r = admin.coordinator_conn(group).call(ApiKey.OFFSET_FETCH, {
            "group_id": group, "topics": [{"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}],
            "require_stable": True})
        if r.error_code:
            raise AdminError(f"OffsetFetch {group}: {ErrorCode(r.error_code).name}")
        out: dict[int, int] = {}
        for t in r.topics:
            for p in t.partitions:
                if p.error_code:
                    raise AdminError(f"OffsetFetch {group} {t.name}-{p.partition_index}: "
                                     f"{ErrorCode(p.error_code).name}")
                if t.name == TOPIC:
                    out[p.partition_index] = p.committed_offset
        return out
    finally:
        admin.close()


def describe_group(bootstrap: str, group: str) -> tuple[str, int]:
    """(state, members) as DescribeGroups at the coordinator answers."""
    admin = GregorAdmin(bootstrap, timeout=5)
    try:
        g = admin.coordinator_conn(group).call(ApiKey.DESCRIBE_GROUPS, {
            "groups": [group], "include_authorized_operations": False}).groups[0]
        if g.error_code:
            raise AdminError(f"DescribeGroups {group}: {ErrorCode(g.error_code).name}")
        return g.group_state, len(g.members)
    finally:
        admin.close()


class CommittedSampler:
    """Every second, each group's committed offsets of the topic (offset_fetch), as (sent,
    answered, {partition: offset})."""

    def __init__(self, bootstrap: str, groups: list[str]) -> None:
        self.bootstrap = bootstrap
        self.groups = groups
        self.samples: dict[str, list[tuple[float, float, dict[int, int]]]] = {g: [] for g in groups}
        self.failures = Counter[str]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="committed-sampler", daemon=True)

    def fetch(self, group: str) -> dict[int, int]:
        return offset_fetch(self.bootstrap, group)

    def _run(self) -> None:
        while not self._stop.is_set():
            for g in self.groups:
                sent = time.monotonic()
                try:
                    got = self.fetch(g)
                except Exception as e:  # noqa: BLE001 - no coordinator now, a timeout: the next round
                    self.failures[f"{g}: {str(e)[:80]}"] += 1
                    continue
                self.samples[g].append((sent, time.monotonic(), got))
            self._stop.wait(1.0)

    def start(self) -> CommittedSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


class StatePoller:
    """Polls /controller and every partition state znode of the topic and __consumer_offsets twice
    a second and logs each change (who leads at which epoch, the ISR) to states.log; ``history``
    keeps them as (monotonic time, what, value)."""

    def __init__(self, cluster: BrokerCluster, log: RunLog) -> None:
        self.cluster = cluster
        self.log = log
        self.history: list[tuple[float, str, str]] = []
        self.last: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="state-poller", daemon=True)

    def _run(self) -> None:
        zk = KazooClient(hosts=self.cluster.zookeeper_connect, timeout=10,
                         connection_retry={"max_tries": -1, "delay": 0.2, "max_delay": 1})
        try:
            zk.start(30)
        except Exception as e:  # noqa: BLE001
            self.log(f"state poller: could not connect to ZooKeeper: {e}")
            return
        paths = {"controller": zn.CONTROLLER}
        for t, n in ((TOPIC, PARTITIONS), (OFFSETS_TOPIC, OFFSETS_PARTITIONS)):
            for p in range(n):
                paths[f"{t}-{p}"] = zn.state_path(t, p)
        try:
            while not self._stop.is_set():
                for name, path in paths.items():
                    try:
                        data, _stat = zk.get(path)
                        if name == "controller":
                            value = f"broker {zn.decode_controller(data)}"
                        else:
                            st = zn.PartitionState.decode(data, -1, path)
                            value = f"leader {st.leader} epoch {st.leader_epoch} isr {st.isr} " \
                                    f"controller_epoch {st.controller_epoch}"
                    except NoNodeError:
                        value = "none"
                    except Exception:  # noqa: BLE001 - ZooKeeper down or paused: the next round
                        break
                    if self.last.get(name) != value:
                        self.last[name] = value
                        now = time.monotonic()
                        self.history.append((now, name, value))
                        self.log(f"{name}: {value}")
                self._stop.wait(0.5)
        finally:
            with contextlib.suppress(Exception):
                zk.stop()
                zk.close()

    def start(self) -> StatePoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def around(self, name: str, t: float, before: float = 60, after: float = 10) -> list[str]:
        return [f"{self.log.stamp(w)} {n}: {v}" for w, n, v in self.history
                if n == name and t - before <= w <= t + after]


# -- faults -----------------------------------------------------------------------------------------
def start_broker_retrying(cluster: BrokerCluster, b: int, timeout: float, say: Callable[[str], None],
                          anomalies: list[str]) -> str | None:
    """Start broker ``b`` and wait until it is ready; start it again while it exits during its
    start-up (a broker that reaches no ZooKeeper server within zookeeper.connection.timeout.ms exits
    with 2, as Kafka's does: expected while ZooKeeper is down; any other exit is an anomaly), until
    ``timeout``. None once ready, else why not."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        attempt += 1
        bp = cluster.broker(b)
        mark = bp.log_path.stat().st_size if bp.log_path.exists() else 0
        try:
            cluster.start_broker(b, timeout=max(10.0, deadline - time.monotonic()))
            return None
        except RuntimeError:
            with open(bp.log_path, errors="replace") as f:
                f.seek(mark)
                lines = [line.rstrip() for line in f if line.strip() and not line.startswith("%")]
            why = next((line for line in reversed(lines) if line.startswith("gregor:")), " | ".join(lines[-2:]))
            if bp.alive():
                return f"not ready within {timeout} s (still running): {why[:300]}"
            with contextlib.suppress(Exception):
                bp.log.close()
            rc = bp.proc.returncode if bp.proc else None
            say(f"broker {b} exited with {rc} during start-up (attempt {attempt}): {why[:300]}")
            if "ZooKeeper" not in why:
                anomalies.append(f"broker {b} exited with {rc} during start-up: {why[:300]}")
            if time.monotonic() > deadline:
                return f"still exiting during start-up after {attempt} attempts: {why[:300]}"
            time.sleep(2)


class Faults:
    """Chooses the faults (in the main thread, with the seeded generator) and runs each on a thread
    of its own. ``affected``: brokers a running fault has killed, stopped or paused (they are not
    chosen again until it ends); ``zk_affected``: a ZooKeeper fault is running."""

    def __init__(self, cluster: BrokerCluster, zk: ZooKeeperServer, rng: random.Random, log: RunLog) -> None:
        self.cluster = cluster
        self.zk = zk
        self.rng = rng
        self.log = log
        self.lock = threading.Lock()
        self.affected: set[int] = set()
        self.paused: set[int] = set()
        self.zk_affected = False
        self.zk_paused = False
        self.done: list[dict[str, Any]] = []  # every fault run: kind, target, parameters, start, end, notes
        self.skipped = Counter[str]()
        self.anomalies: list[str] = []
        self.threads: list[threading.Thread] = []
        self._n = 0

    # -- looking things up -----------------------------------------------------------------------
    def _bootstrap(self) -> str:
        with self.lock:
            live = [b for b in self.cluster.alive_ids() if b not in self.affected]
        return ",".join(self.cluster.broker(b).bootstrap for b in live) or self.cluster.bootstrap

    def controller(self) -> tuple[int, str]:
        with contextlib.suppress(Exception), self.cluster.zk_client(timeout=5) as zk:
            got = zk.get(zn.CONTROLLER)
            return zn.decode_controller(got[0]), "/controller"
        with contextlib.suppress(Exception):
            admin = GregorAdmin(self._bootstrap(), timeout=5)
            try:
                return admin.metadata([]).controller_id, "Metadata"
            finally:
                admin.close()
        return -1, "none"

    def coordinator(self, group: str) -> int:
        admin = GregorAdmin(self._bootstrap(), timeout=5)
        try:
            node, code, _ = admin.find_coordinator(group)
            return node.node_id if node is not None and code == ErrorCode.none else -1
        except Exception:  # noqa: BLE001
            return -1
        finally:
            admin.close()

    def leader_of(self, topic: str, partition: int) -> tuple[int, str]:
        with contextlib.suppress(Exception), self.cluster.zk_client(timeout=5) as zk:
            data, _ = zk.get(zn.state_path(topic, partition))
            st = zn.PartitionState.decode(data)
            return st.leader, f"state node (epoch {st.leader_epoch}, isr {st.isr})"
        with contextlib.suppress(Exception):
            admin = GregorAdmin(self._bootstrap(), timeout=5)
            try:
                md = admin.metadata([topic])
                return next(q.leader_id for q in md.topics[0].partitions if q.partition_index == partition), "Metadata"
            finally:
                admin.close()
        return -1, "none"

    # -- choosing ----------------------------------------------------------------------------------
    def restart_delay(self) -> float:
        return 0.0 if self.rng.random() < 0.25 else round(self.rng.uniform(0, 20), 2)

    def launch_one(self, deadline: float) -> None:
        """Choose a fault and start it (waiting, while before ``deadline``, for the broker or
        ZooKeeper it needs to be free)."""
        kind = self.rng.choices(list(FAULT_WEIGHTS), weights=list(FAULT_WEIGHTS.values()))[0]
        if kind in BROKER_FAULTS:
            n = self.unavailable()
            allow_second = self.rng.random() < DOUBLE_FAULT_P
            while n >= 2 or (n == 1 and not allow_second):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.5)
                n = self.unavailable()
        else:
            while True:
                with self.lock:
                    if not self.zk_affected:
                        break
                if time.monotonic() > deadline:
                    return
                time.sleep(0.5)
        getattr(self, f"_start_{kind}")()

    def unavailable(self) -> int:
        """Brokers a running fault has taken away, or not running (a restart that failed)."""
        with self.lock:
            gone = set(self.affected)
        return len(gone | {b for b in self.cluster.ids if not self.cluster.broker(b).alive()})

    def _free(self, broker: int) -> bool:
        with self.lock:
            return broker not in self.affected and self.cluster.broker(broker).alive()

    def _random_free_broker(self) -> int | None:
        with self.lock:
            free = [b for b in self.cluster.ids if b not in self.affected]
        free = [b for b in free if self.cluster.broker(b).alive()]
        return self.rng.choice(free) if free else None

    def _run(self, kind: str, target: Any, params: dict[str, Any], body: Callable[[dict[str, Any]], None],
             brokers: list[int] = (), zk: bool = False) -> None:  # type: ignore[assignment]
        with self.lock:
            self._n += 1
            record = {"n": self._n, "kind": kind, "target": target, "params": params, "start": time.monotonic(),
                      "end": None, "notes": []}
            self.affected.update(brokers)
            if zk:
                self.zk_affected = True
            self.done.append(record)
        self.log(f"FAULT #{record['n']} {kind} target={target} {params}")

        def run() -> None:
            try:
                body(record)
            except Exception as e:  # noqa: BLE001 - logged; the healing phase repairs what is left
                note = f"fault #{record['n']} {kind} failed: {e!r}"
                record["notes"].append(note)
                self.anomalies.append(note)
                self.log(f"FAULT #{record['n']} ERROR {e!r}\n{traceback.format_exc()}")
            finally:
                record["end"] = time.monotonic()
                with self.lock:
                    self.affected.difference_update(brokers)
                    if zk:
                        self.zk_affected = False
                self.log(f"FAULT #{record['n']} {kind} target={target} ended after "
                         f"{record['end'] - record['start']:.1f} s")

        t = threading.Thread(target=run, name=f"fault-{record['n']}-{kind}", daemon=True)
        self.threads.append(t)
        t.start()

    def note(self, record: dict[str, Any], msg: str) -> None:
        record["notes"].append(f"{self.log.stamp()} {msg}")
        self.log(f"FAULT #{record['n']} {msg}")

    # -- the steps ---------------------------------------------------------------------------------
    def _kill(self, record: dict[str, Any], b: int) -> None:
        self.cluster.kill(b)
        self.note(record, f"broker {b} SIGKILLed")

    def _start(self, record: dict[str, Any], b: int) -> None:
        started = time.monotonic()
        failed = start_broker_retrying(self.cluster, b, START_TIMEOUT_S, lambda msg: self.note(record, msg),
                                       self.anomalies)
        if failed:
            msg = f"broker {b} restart failed: {failed}"
            self.anomalies.append(msg)
            self.note(record, msg)
            return
        self.note(record, f"broker {b} ready again after {time.monotonic() - started:.1f} s")

    def _kill_then_restart(self, b: int, delay: float) -> Callable[[dict[str, Any]], None]:
        def body(record: dict[str, Any]) -> None:
            self._kill(record, b)
            if delay:
                time.sleep(delay)
            self._start(record, b)
        return body

    def _start_kill_restart(self) -> None:
        b = self._random_free_broker()
        if b is None:
            self.skipped["kill_restart: no free broker"] += 1
            return
        delay = self.restart_delay()
        self._run("kill_restart", b, {"restart_after_s": delay}, self._kill_then_restart(b, delay), [b])

    def _start_kill_controller(self) -> None:
        c, source = self.controller()
        if c < 0 or not self._free(c):
            self.skipped[f"kill_controller: controller {c} ({source}) not a free live broker"] += 1
            return
        delay = self.restart_delay()
        self._run("kill_controller", c, {"restart_after_s": delay, "found_in": source},
                  self._kill_then_restart(c, delay), [c])

    def _start_kill_coordinator(self) -> None:
        group = self.rng.choice([CLASSIC_GROUP, CONSUMER_GROUP])
        c = self.coordinator(group)
        if c < 0 or not self._free(c):
            self.skipped[f"kill_coordinator: coordinator {c} of {group} not a free live broker"] += 1
            return
        delay = self.restart_delay()
        self._run("kill_coordinator", c, {"group": group, "offsets_partition": partition_for(group, OFFSETS_PARTITIONS),
                                          "restart_after_s": delay}, self._kill_then_restart(c, delay), [c])

    def _start_kill_leader(self) -> None:
        p = self.rng.randrange(PARTITIONS)
        leader, source = self.leader_of(TOPIC, p)
        if leader < 0 or not self._free(leader):
            self.skipped[f"kill_leader: leader {leader} of {TOPIC}-{p} not a free live broker"] += 1
            return
        self._run("kill_leader", leader, {"partition": f"{TOPIC}-{p}", "found_in": source, "restart_after_s": 0},
                  self._kill_then_restart(leader, 0), [leader])

    def _start_pause(self) -> None:
        b = self._random_free_broker()
        if b is None:
            self.skipped["pause: no free broker"] += 1
            return
        duration = round(self.rng.uniform(1, 15), 2)

        def body(record: dict[str, Any]) -> None:
            self.cluster.pause(b)
            with self.lock:
                self.paused.add(b)
            self.note(record, f"broker {b} SIGSTOPped")
            time.sleep(duration)
            with self.lock:
                self.paused.discard(b)
            self.cluster.resume(b)
            self.note(record, f"broker {b} SIGCONTed")

        self._run("pause", b, {"duration_s": duration}, body, [b])

    def _start_controlled_shutdown(self) -> None:
        b = self._random_free_broker()
        if b is None:
            self.skipped["controlled_shutdown: no free broker"] += 1
            return
        delay = round(self.rng.uniform(0, 10), 2)

        def body(record: dict[str, Any]) -> None:
            started = time.monotonic()
            self.note(record, f"broker {b} SIGTERM")
            try:
                rc = self.cluster.stop(b, timeout=120)
            except subprocess.TimeoutExpired:
                msg = f"broker {b}'s controlled shutdown took more than 120 s: SIGKILL"
                self.anomalies.append(msg)
                self.note(record, msg)
                self.cluster.kill(b)
                rc = None
            took = time.monotonic() - started
            self.note(record, f"broker {b} exited with {rc} after {took:.1f} s")
            if rc not in (0, None):
                self.anomalies.append(f"fault #{record['n']}: broker {b}'s controlled shutdown exited with {rc}")
            if delay:
                time.sleep(delay)
            self._start(record, b)

        self._run("controlled_shutdown", b, {"restart_after_s": delay}, body, [b])

    def _start_zk_stop(self) -> None:
        duration = round(self.rng.uniform(1, 10), 2)

        def body(record: dict[str, Any]) -> None:
            rc = self.zk.stop()
            self.note(record, f"ZooKeeper stopped (exit {rc})")
            time.sleep(duration)
            self.zk.start(60)
            self.note(record, "ZooKeeper serving again")

        self._run("zk_stop", "zookeeper", {"duration_s": duration}, body, zk=True)

    def _start_zk_pause(self) -> None:
        duration = round(self.rng.uniform(1, 5), 2)

        def body(record: dict[str, Any]) -> None:
            self.zk.pause()
            with self.lock:
                self.zk_paused = True
            self.note(record, "ZooKeeper SIGSTOPped")
            time.sleep(duration)
            with self.lock:
                self.zk_paused = False
            self.zk.resume()
            self.note(record, "ZooKeeper SIGCONTed")

        self._run("zk_pause", "zookeeper", {"duration_s": duration}, body, zk=True)

    # -- healing -----------------------------------------------------------------------------------
    def join(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]

    def around(self, t: float, before: float = 60, after: float = 5) -> list[str]:
        """The faults running in [t - before, t + after], one line each."""
        out = []
        for r in self.done:
            end = r["end"] if r["end"] is not None else float("inf")
            if r["start"] <= t + after and end >= t - before:
                out.append(f"#{r['n']} {r['kind']} target={r['target']} {r['params']} "
                           f"from {self.log.stamp(r['start'])} "
                           f"to {self.log.stamp(r['end']) if r['end'] else '?'}; {'; '.join(r['notes'])}")
        return out


# -- checks -----------------------------------------------------------------------------------------
class Verdicts:
    def __init__(self) -> None:
        self.results: dict[str, dict[str, Any]] = {}

    def set(self, name: str, ok: bool, summary: str, evidence: list[str] | None = None) -> None:
        self.results[name] = {"ok": ok, "summary": summary, "evidence": evidence or []}

    @property
    def ok(self) -> bool:
        return all(r["ok"] for r in self.results.values())


def wait_until(cond: Callable[[], Any], timeout: float, poll: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = cond()
        except Exception:  # noqa: BLE001
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            return None
        time.sleep(poll)


def partition_states(cluster: BrokerCluster, topic: str, n: int) -> dict[int, zn.PartitionState | None]:
    out: dict[int, zn.PartitionState | None] = {}
    with cluster.zk_client(timeout=10) as zk:
        for p in range(n):
            try:
                data, stat = zk.get(zn.state_path(topic, p))
                out[p] = zn.PartitionState.decode(data, stat.version)
            except NoNodeError:
                out[p] = None
    return out


def full_isr(cluster: BrokerCluster, topic: str, n: int) -> bool:
    sts = partition_states(cluster, topic, n)
    return all(st is not None and st.leader >= 0 and len(st.isr) == 3 for st in sts.values())


def broker_logs(cluster: BrokerCluster) -> dict[int, Path]:
    return {b: cluster.broker(b).log_path for b in cluster.ids}


LINE_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")


def grep_logs(cluster: BrokerCluster, log: RunLog, name: str, t: float | None, before: float = 60,
              after: float = 30) -> list[str]:
    """Lines of the brokers' logs about ``name`` (``topic-partition``) matching LOG_PATTERNS, within
    [t - before, t + after] (every such line when t is None), ordered by time, with the broker id."""
    lo = hi = None
    if t is not None:
        lo, hi = log.wall(t - before), log.wall(t + after)
    rows: list[tuple[str, str]] = []
    needle = f"{name}:"
    for b, path in broker_logs(cluster).items():
        if not path.exists():
            continue
        with open(path, errors="replace") as f:
            for line in f:
                if needle not in line or not LOG_PATTERNS.search(line):
                    continue
                m = LINE_TIME.match(line)
                if not m:
                    continue
                if lo is not None:
                    when = dt.datetime.strptime(f"{m.group(1)}.{m.group(2)}", "%Y-%m-%d %H:%M:%S.%f")
                    if not lo <= when <= hi:
                        continue
                rows.append((m.group(0), f"broker {b}: {line.rstrip()}"))
    rows.sort()
    return [r for _, r in rows]


def check_records(bootstrap: str, producers: list[TaggedProducer], v: Verdicts, log: RunLog, faults: Faults,
                  cluster: BrokerCluster, run_dir: Path, poller: StatePoller) -> dict[int, int]:
    """Read every partition back from 0 and check: each acknowledged record at its offset, no
    value twice, offsets contiguous from 0, each producer's sequence numbers increasing."""
    at_least = {p: max(max((o for o, _ in prod.acked[p] if o is not None), default=-1) + 1 for prod in producers)
                for p in range(PARTITIONS)}
    try:
        got = consume_to_end(bootstrap, TOPIC, PARTITIONS, at_least, timeout=300)
    except Exception as e:  # noqa: BLE001
        for name in ("acknowledged_records_kept", "no_duplicates", "order_kept"):
            v.set(name, False, f"could not read the topic back: {e}")
        return {}
    lost: list[str] = []
    dupes: list[str] = []
    order: list[str] = []
    extra: list[str] = []
    evidence_times: dict[int, float] = {}
    tags = {prod.tag: prod for prod in producers}
    for p in range(PARTITIONS):
        offsets = [o for o, _ in got[p]]
        if offsets != list(range(len(offsets))):
            bad = next(i for i, o in enumerate(offsets) if o != i)
            order.append(f"{TOPIC}-{p}: offsets not contiguous from 0: at index {bad} offset {offsets[bad]} "
                         f"(previous {offsets[bad - 1] if bad else None})")
        where: dict[bytes, list[int]] = {}
        for o, val in got[p]:
            where.setdefault(val, []).append(o)
        for val, os_ in where.items():
            if len(os_) > 1:
                dupes.append(f"{TOPIC}-{p}: value {val!r} at offsets {os_}")
        last: dict[str, tuple[int, int]] = {}
        for o, val in got[p]:
            parsed = parse_value(val)
            if parsed is None or parsed[0] != p or parsed[2] not in tags:
                order.append(f"{TOPIC}-{p}: unexpected value {val!r} at offset {o}")
                continue
            _, seq, tag = parsed
            if tag in last and seq <= last[tag][1]:
                order.append(f"{TOPIC}-{p}: producer {tag} seq {seq} at offset {o} after seq {last[tag][1]} at "
                             f"offset {last[tag][0]}")
            last[tag] = (o, seq)
        at = dict(got[p])
        for prod in producers:
            # an acknowledgement without an offset: the value must be in the log (where, unknown)
            acked = [*prod.acked[p], *((None, val) for val in prod.acked_unknown[p])]
            missing = [(o, val) for o, val in acked
                       if (at.get(o) != val if o is not None else val not in where)]
            for o, val in missing[:10]:
                elsewhere = where.get(val, [])
                t = prod.acked_at.get((p, o)) if o is not None else next(
                    (w for q, v_, w in prod.no_offset if q == p and v_ == val), None)
                evidence_times.setdefault(p, t if t is not None else time.monotonic())
                lost.append(f"{TOPIC}-{p}: {prod.tag} acknowledged {val!r} at offset {o} "
                            f"(acked at {log.stamp(t) if t else '?'}); the log has "
                            f"{at.get(o)!r} there; the value is at offsets {elsewhere or 'nowhere'}")
            if len(missing) > 10:
                lost.append(f"{TOPIC}-{p}: {prod.tag}: {len(missing) - 10} more acknowledged records missing or moved")
            if not prod.failed:
                in_log = sum(1 for val in at.values() if val.endswith(f":{prod.tag}".encode()))
                if in_log != len(acked):
                    extra.append(f"{TOPIC}-{p}: {in_log} records of {prod.tag} in the log, {len(acked)} "
                                 "acknowledged (every record it sent was answered)")
    ev: list[str] = []
    for p, t in sorted(evidence_times.items()):
        ev.append(f"-- {TOPIC}-{p}: faults around the first lost record's acknowledgement ({log.stamp(t)}):")
        ev += ["   " + line for line in faults.around(t)]
        ev.append(f"-- {TOPIC}-{p}: partition states around it:")
        ev += ["   " + line for line in poller.around(f"{TOPIC}-{p}", t, 120, 60)]
        lines = grep_logs(cluster, log, f"{TOPIC}-{p}", t, 120, 60)
        path = run_dir / f"evidence-{TOPIC}-{p}.txt"
        path.write_text("\n".join(lines) + "\n")
        ev.append(f"-- {TOPIC}-{p}: broker log lines around it ({len(lines)}, all in {path}):")
        ev += ["   " + line for line in lines[-40:]]
    no_offset = sum(len(prod.no_offset) for prod in producers)
    v.set("acknowledged_records_kept", not lost,
          f"{sum(len(prod.acked[p]) + len(prod.acked_unknown[p]) for prod in producers for p in range(PARTITIONS))} "
          "acknowledged records "
          f"({no_offset} acknowledged without an offset, checked by value only), {len(lost)} lost or moved",
          lost + ev)
    v.set("no_duplicates", not dupes and not extra, f"{len(dupes)} duplicated values, {len(extra)} partitions with "
          "unacknowledged records", dupes[:20] + extra)
    v.set("order_kept", not order, f"{len(order)} order/contiguity problems", order[:20])
    return {p: len(got[p]) for p in got}


def batches(prefix: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """(base offset, next offset, leader epoch, producer id, base sequence, size) of each batch."""
    out = []
    pos = 0
    while pos + rb.HEADER_SIZE <= len(prefix):
        h = rb.read_header(prefix, pos)
        epoch = int.from_bytes(prefix[pos + rb.PARTITION_LEADER_EPOCH:pos + rb.PARTITION_LEADER_EPOCH + 4], "big",
                               signed=True)
        out.append((h.base_offset, h.next_offset, epoch, h.producer_id, h.base_sequence, h.size))
        pos += h.size
    return out


def check_replicas(cluster: BrokerCluster, topic: str, n: int, read: dict[int, int], log: RunLog,
                   run_dir: Path) -> tuple[bool, str, list[str]]:
    """check_replicas_identical of tests/cluster/test_faults.py, every partition checked and the
    first differing batch shown."""
    try:
        hwms = wait_until(lambda: (h := high_watermarks(cluster.bootstrap, topic, n, timeout=60))
                          and all(h[p] >= read.get(p, 0) for p in range(n)) and h, 60)
    except Exception as e:  # noqa: BLE001
        return False, f"no high watermarks: {e}", []
    if not hwms:
        return False, f"the high watermarks did not cover the records read ({read})", []
    with cluster.zk_client() as zk:
        assignment = zn.TopicAssignment.decode(topic, zk.get(zn.topic_path(topic))[0]).partitions
    problems: list[str] = []
    for p in range(n):
        prefixes: dict[int, bytes] = {}
        for b in assignment[p]:
            try:
                prefixes[b] = log_prefix(cluster.broker(b).data_dir, topic, p, hwms[p])
            except AssertionError as e:
                problems.append(f"{topic}-{p}: broker {b}: {e}")
        if len(set(prefixes.values())) > 1:
            listing = {b: batches(x) for b, x in prefixes.items()}
            first = min(len(x) for x in listing.values())
            at = next((i for i in range(first) if len({str(x[i]) for x in listing.values()}) > 1), first)
            detail = {b: x[at] if at < len(x) else None for b, x in listing.items()}
            problems.append(f"{topic}-{p}: replicas differ below the high watermark {hwms[p]}: first differing "
                            f"batch #{at} (base, next, epoch, pid, seq, size) {detail}; sizes "
                            f"{ {b: len(x) for b, x in prefixes.items()} }")
            lines = grep_logs(cluster, log, f"{topic}-{p}", None)
            (run_dir / f"evidence-{topic}-{p}-replicas.txt").write_text("\n".join(lines) + "\n")
            problems += [f"   {line}" for line in lines[-30:]]
    return not problems, f"hwms {hwms}", problems


def check_commits(groups: dict[str, list[GroupConsumer]], sampler: CommittedSampler, final: dict[str, dict[int, int]],
                  log: RunLog, faults: Faults, cluster: BrokerCluster, run_dir: Path, poller: StatePoller,
                  v: Verdicts) -> None:
    """Per group and partition: every OffsetFetch answer or successful commit that began after another
    one's answer came has an offset no lower than it; the final committed offset is no lower than
    the highest successful commit."""
    backwards: list[str] = []
    lost: list[str] = []
    times: dict[str, list[tuple[str, float]]] = {"back": [], "lost": []}
    for g, members in groups.items():
        # (start, end, offset, what) per partition
        events: dict[int, list[tuple[float, float, int, str]]] = {p: [] for p in range(PARTITIONS)}
        for m in members:
            for c in m.commits:
                if c.error is None:
                    for p, o in c.offsets.items():
                        events[p].append((c.started, c.ended, o, f"commit by {m.name}"))
        for sent, answered, offsets in sampler.samples[g]:
            for p, o in offsets.items():
                if o >= 0:
                    events[p].append((sent, answered, o, "OffsetFetch"))
                elif any(e[2] >= 0 and e[1] < sent for e in events[p]):
                    events[p].append((sent, answered, o, "OffsetFetch (nothing committed)"))
        for p, evs in events.items():
            by_end = sorted(evs, key=lambda e: e[1])
            ends = [e[1] for e in by_end]
            best: tuple[float, float, int, str] | None = None
            i = 0
            for e in sorted(evs, key=lambda e: e[0]):
                while i < len(by_end) and ends[i] < e[0]:
                    if best is None or by_end[i][2] > best[2]:
                        best = by_end[i]
                    i += 1
                if best is not None and e[2] < best[2]:
                    backwards.append(f"{g} {TOPIC}-{p}: {e[3]} sent {log.stamp(e[0])} answered {log.stamp(e[1])}: "
                                     f"offset {e[2]}, after {best[3]} answered {log.stamp(best[1])}: offset {best[2]}")
                    times["back"].append((g, e[0]))
        acked: dict[int, tuple[int, float, str]] = {}
        for m in members:
            for c in m.commits:
                if c.error is None:
                    for p, o in c.offsets.items():
                        if p not in acked or o > acked[p][0]:
                            acked[p] = (o, c.ended, m.name)
        for p, (o, t, who) in acked.items():
            have = final.get(g, {}).get(p)
            if have is None or have < o:
                lost.append(f"{g} {TOPIC}-{p}: final committed offset {have}, but {who}'s commit of {o} was "
                            f"acknowledged at {log.stamp(t)}")
                times["lost"].append((g, t))
    def evidence(which: str) -> list[str]:
        ev: list[str] = []
        seen: set[str] = set()
        for g, t in times[which][:3]:
            name = f"{OFFSETS_TOPIC}-{partition_for(g, OFFSETS_PARTITIONS)}"
            ev.append(f"-- {g} ({name}) at {log.stamp(t)}: faults around:")
            ev += ["   " + line for line in faults.around(t)]
            ev += ["   " + line for line in poller.around(name, t, 120, 30)]
            if name not in seen:
                seen.add(name)
                lines = grep_logs(cluster, log, name, t, 120, 30)
                path = run_dir / f"evidence-{name}-{which}.txt"
                path.write_text("\n".join(lines) + "\n")
                ev.append(f"-- broker log lines about {name} ({len(lines)}, all in {path}):")
                ev += ["   " + line for line in lines[-30:]]
        return ev

    n_commits = {g: sum(1 for m in ms for c in m.commits if c.error is None) for g, ms in groups.items()}
    n_samples = {g: len(s) for g, s in sampler.samples.items()}
    v.set("commits_never_go_back", not backwards,
          f"{len(backwards)} going back; successful commits {n_commits}, OffsetFetch samples {n_samples}",
          backwards[:20] + evidence("back"))
    v.set("acknowledged_commits_kept", not lost, f"final committed {final}", lost[:20] + evidence("lost"))


# -- the run ----------------------------------------------------------------------------------------
def main() -> int:  # noqa: C901, PLR0912, PLR0915 - one campaign, step by step
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="the random seed (default: a random one, printed)")
    ap.add_argument("--minutes", type=float, default=10, help="duration of the fault phase")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory and every log")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    run_dir = Path(tempfile.mkdtemp(prefix=f"gregor-faults-{seed}-"))
    log = RunLog(run_dir / "campaign.log")
    log(f"seed {seed}, {args.minutes} minutes of faults, directory {run_dir}, gregor from "
        f"{__import__('gregor').__file__}")
    print(f"fault campaign: seed {seed}, directory {run_dir}", file=sys.stderr, flush=True)
    group_load.COMMIT_INTERVAL_S = COMMIT_INTERVAL_S
    LoggedConsumer.debug_dir = TaggedProducer.debug_dir = run_dir

    zk = ZooKeeperServer(run_dir / "zookeeper")
    cluster: BrokerCluster | None = None
    producers: list[TaggedProducer] = []
    members: dict[str, list[GroupConsumer]] = {}
    sampler: CommittedSampler | None = None
    poller: StatePoller | None = None
    v = Verdicts()
    faults: Faults | None = None
    brokers_out = Counter[int]()
    summary: dict[str, Any] = {"seed": seed, "minutes": args.minutes, "directory": str(run_dir)}
    fault_started = fault_ended = None
    try:
        zk.start(60)
        cluster = BrokerCluster(run_dir / "cluster", zk, 3, OVERRIDES)
        cluster.start(timeout=120)
        log(f"brokers {[(b, cluster.broker(b).bootstrap, str(cluster.broker(b).log_path)) for b in cluster.ids]}; "
            f"ZooKeeper {zk.connect_string(cluster.chroot)}, log {zk.log_path}")
        for b in cluster.ids:
            admin = AdminClient({"bootstrap.servers": cluster.broker(b).bootstrap})
            if not wait_until(lambda admin=admin: admin.list_topics(timeout=10).controller_id >= 0, 60):
                raise RuntimeError(f"broker {b} does not know the controller")
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
        if not wait_until(lambda: full_isr(cluster, TOPIC, PARTITIONS), 60):
            raise RuntimeError(f"{TOPIC} not fully replicated")
        group_load.offsets_topic_ready(cluster, OFFSETS_PARTITIONS, 3, timeout=120)
        poller = StatePoller(cluster, RunLog(run_dir / "states.log", echo=False)).start()
        poller.log.t0, poller.log.wall0 = log.t0, log.wall0  # one time base for both logs
        producers = [TaggedProducer(cluster.bootstrap, TOPIC, PARTITIONS, tag, PRODUCER_PAUSE_S).start()
                     for tag in ("A", "B")]
        members = {
            CLASSIC_GROUP: [LoggedConsumer(f"classic-{i}", cluster.bootstrap, CLASSIC_GROUP, TOPIC, "range")
                            for i in range(MEMBERS)],
            CONSUMER_GROUP: [LoggedConsumer(f"kip848-{i}", cluster.bootstrap, CONSUMER_GROUP, TOPIC,
                                           protocol="consumer") for i in range(MEMBERS)],
        }
        for ms in members.values():
            for m in ms:
                m.start()
        sampler = CommittedSampler(cluster.bootstrap, list(members)).start()
        if not wait_until(lambda: all(p.count >= 200 for p in producers), 120):
            raise RuntimeError(f"the producers got {[p.count for p in producers]} acknowledgements in 120 s")
        everyone = [m for ms in members.values() for m in ms]
        if not wait_until(lambda: all(m.successes_after(0) for m in everyone), 120):
            log(f"WARNING: not every member committed before the faults: "
                f"{[(m.name, len(m.commits), [c.error for c in m.commits][-2:]) for m in everyone]}")
        log(f"load running: {[p.count for p in producers]} acknowledged, "
            f"{ {m.name: len(m.commits) for m in everyone} } commits")

        # -- the fault phase ------------------------------------------------------------------------
        faults = Faults(cluster, zk, rng, log)
        counting = threading.Event()

        def count_out(faults: Faults = faults) -> None:  # seconds with n brokers down, paused or starting
            while not counting.wait(0.5):
                brokers_out[faults.unavailable()] += 0.5

        threading.Thread(target=count_out, name="brokers-out", daemon=True).start()
        fault_started = time.monotonic()
        deadline = fault_started + args.minutes * 60
        next_progress = fault_started + 30
        while time.monotonic() < deadline:
            faults.launch_one(deadline)
            wait = rng.uniform(2, 15)
            end = min(deadline, time.monotonic() + wait)
            while time.monotonic() < end:
                time.sleep(min(0.5, max(0.0, end - time.monotonic())))
                if time.monotonic() >= next_progress:
                    next_progress += 30
                    log(f"progress: acknowledged {[p.count for p in producers]}, delivery errors "
                        f"{[len(p.failed) for p in producers]}, successful commits "
                        f"{ {g: sum(c.error is None for m in ms for c in m.commits) for g, ms in members.items()} }"
                        f", alive {cluster.alive_ids()}, affected {sorted(faults.affected)}")
        fault_ended = time.monotonic()
        counting.set()
        log(f"fault phase over after {(fault_ended - fault_started) / 60:.1f} min: "
            f"{dict(Counter(r['kind'] for r in faults.done))}")

        # -- healing -------------------------------------------------------------------------------
        stuck = faults.join(START_TIMEOUT_S + 200)
        if stuck:
            faults.anomalies.append(f"fault threads still running at the healing: {stuck}")
            log(f"WARNING: fault threads still running: {stuck}")
        if zk.alive() and faults.zk_paused:
            zk.resume()
        if not zk.alive():
            zk.start(60)
        for b in cluster.ids:
            bp = cluster.broker(b)
            if bp.alive():
                cluster.resume(b)  # SIGCONT: harmless if it runs
        for b in cluster.ids:
            if not cluster.broker(b).alive():
                log(f"healing: starting broker {b}")
                failed = start_broker_retrying(cluster, b, START_TIMEOUT_S, log, faults.anomalies)
                if failed:
                    faults.anomalies.append(f"healing: broker {b} did not start: {failed}")
        healed_at = time.monotonic()
        healed = all(wait_until(lambda t=t, n=n: full_isr(cluster, t, n), HEAL_TIMEOUT_S, poll=1)
                     for t, n in ((TOPIC, PARTITIONS), (OFFSETS_TOPIC, OFFSETS_PARTITIONS)))
        states_now = {}
        with contextlib.suppress(Exception):
            states_now = {t: {p: (st.leader, st.leader_epoch, st.isr) if st else None
                              for p, st in partition_states(cluster, t, n).items()}
                          for t, n in ((TOPIC, PARTITIONS), (OFFSETS_TOPIC, OFFSETS_PARTITIONS))}
        log(f"healing: full ISRs {'reached' if healed else 'NOT reached'} after {time.monotonic() - healed_at:.1f} s: "
            f"{states_now}")
        v.set("healed", healed, f"every partition led with a full ISR within {HEAL_TIMEOUT_S} s",
              [] if healed else [f"states {states_now}"])
        for p in producers:
            target = p.count + 300
            if not wait_until(lambda p=p, target=target: p.count >= target, 180):
                log(f"WARNING: producer {p.tag} got only {p.count} of {target} acknowledgements after healing")
        for p in producers:
            p.stop_quietly()
        log(f"producers stopped: acknowledged {[p.count for p in producers]}, delivery errors "
            f"{[p.failed[:3] for p in producers]}, fatal {[p.fatal for p in producers]}, stop errors "
            f"{[p.stop_error for p in producers]}")
        for p in producers:  # for a look afterwards: partition, offset (None: acknowledged without one), value
            with open(run_dir / f"acked-{p.tag}.txt", "w") as f:
                for q in range(PARTITIONS):
                    f.writelines(f"{q} {o} {val.decode()}\n" for o, val in p.acked[q])
        prod_ok = all(p.stop_error is None and not p.fatal for p in producers)
        v.set("producers_clean", prod_ok and not any(p.failed for p in producers),
              f"delivery errors {[len(p.failed) for p in producers]}, fatal {[len(p.fatal) for p in producers]}",
              [f"{p.tag}: {p.stop_error} {p.fatal[:3]} {p.failed[:3]}" for p in producers
               if p.stop_error or p.fatal or p.failed])

        # the groups read to the end, commit it, and are Stable with their members
        ends = {}
        with contextlib.suppress(Exception):
            ends = high_watermarks(cluster.bootstrap, TOPIC, PARTITIONS, timeout=60)
        log(f"log ends {ends}")
        group_problems: list[str] = []
        for g, ms in members.items():
            def caught_up(ms: list[GroupConsumer] = ms) -> bool:
                read = read_by_group(ms)
                return all(end == 0 or max(read.get(p, {-1})) >= end - 1 for p, end in ends.items())

            def committed_ends(g: str = g) -> bool:
                assert sampler is not None
                return sampler.fetch(g) == ends

            if not wait_until(caught_up, GROUP_TIMEOUT_S):
                group_problems.append(f"{g}: did not read to the end {ends} within {GROUP_TIMEOUT_S} s; read up to "
                                      f"{ {p: max(s) for p, s in read_by_group(ms).items()} }")
            if not wait_until(committed_ends, GROUP_TIMEOUT_S):
                group_problems.append(f"{g}: did not commit the ends {ends} within {GROUP_TIMEOUT_S} s")
        stable: dict[str, str] = {}
        bootstrap = cluster.bootstrap
        classic = wait_until(lambda: describe_group(bootstrap, CLASSIC_GROUP) == ("Stable", MEMBERS), GROUP_TIMEOUT_S)
        with contextlib.suppress(Exception):
            stable[CLASSIC_GROUP] = str(describe_group(bootstrap, CLASSIC_GROUP))
        if not classic:
            group_problems.append(f"{CLASSIC_GROUP}: not Stable with {MEMBERS} members: {stable.get(CLASSIC_GROUP)}")
        kip848 = wait_until(lambda: (s := consumer_group_snapshot(bootstrap, CONSUMER_GROUP)) is not None
                            and s.settled(MEMBERS) and s, GROUP_TIMEOUT_S)
        s = consumer_group_snapshot(bootstrap, CONSUMER_GROUP)
        stable[CONSUMER_GROUP] = s.brief() if s else "not described"
        if not kip848:
            group_problems.append(f"{CONSUMER_GROUP}: not Stable with {MEMBERS} members at their targets: "
                                  f"{stable[CONSUMER_GROUP]}")
        for m in [m for ms in members.values() for m in ms]:
            if not m._thread.is_alive() or m.failure is not None:
                group_problems.append(f"{m.name}: not running ({m.failure!r})")
            elif not m.successes_after(healed_at):
                group_problems.append(f"{m.name}: no successful commit after the healing")
        if group_problems:
            for m in [m for ms in members.values() for m in ms]:
                with m._lock:
                    errs = [(log.stamp(c.ended), c.error) for c in m.commits if c.error][-3:]
                    last_ok = max((c.ended for c in m.commits if c.error is None), default=None)
                    events = [(log.stamp(t), k, ps) for t, k, ps in m.events][-4:]
                group_problems.append(f"  {m.name}: last successful commit {log.stamp(last_ok) if last_ok else None}; "
                                      f"last failed {errs}; last rebalance events {events}; consume errors "
                                      f"{m.consume_errors[-3:]}; librdkafka cgrp debug in "
                                      f"{run_dir / f'librdkafka-{m.name}.log'}")
        log(f"groups: {stable}; problems {group_problems}")
        v.set("groups_stable", not group_problems, f"{stable}", group_problems)
        missing = {g: gaps(read_by_group(ms), ends) for g, ms in members.items()}
        v.set("groups_read_everything", not any(missing.values()), "offsets no member of a group read",
              [f"{g}: {m_}; jumps {[(mm.name, j) for mm in members[g] for j in mm.jumps][:10]}"
               for g, m_ in missing.items() if m_])
        for ms in members.values():
            for m in ms:
                try:
                    m.stop(60)
                except AssertionError as e:
                    faults.anomalies.append(f"stopping {m.name}: {e}")
        sampler.stop()
        final: dict[str, dict[int, int]] = {}
        for g in members:
            got = wait_until(lambda g=g: sampler.fetch(g), 60)
            final[g] = got or {}

        # -- checks ---------------------------------------------------------------------------------
        read = check_records(cluster.bootstrap, producers, v, log, faults, cluster, run_dir, poller)
        check_commits(members, sampler, final, log, faults, cluster, run_dir, poller, v)
        time.sleep(2)  # the last group writes (LeaveGroup) replicated
        wait_until(lambda: full_isr(cluster, TOPIC, PARTITIONS)
                   and full_isr(cluster, OFFSETS_TOPIC, OFFSETS_PARTITIONS), HEAL_TIMEOUT_S)
        ok, what, problems = check_replicas(cluster, TOPIC, PARTITIONS, read, log, run_dir)
        v.set("replicas_identical", ok, what, problems)
        ok, what, problems = check_replicas(cluster, OFFSETS_TOPIC, OFFSETS_PARTITIONS, {}, log, run_dir)
        v.set("offsets_topic_replicas_identical", ok, what, problems)
    except Exception as e:  # noqa: BLE001 - the campaign itself failed: reported, not hidden
        log(f"CAMPAIGN ERROR {e!r}\n{traceback.format_exc()}")
        v.set("campaign_completed", False, f"the campaign stopped: {e!r}", traceback.format_exc().splitlines()[-10:])
    finally:
        if poller is not None:
            poller.stop()
        for p in producers:
            p._stop.set()
        for ms in members.values():
            for m in ms:
                m._stop.set()
        if sampler is not None:
            sampler.stop()
        if cluster is not None:
            for b in cluster.ids:
                bp = cluster.broker(b)
                if bp.alive():
                    with contextlib.suppress(Exception):
                        bp.kill()
        if zk.proc is not None and zk.alive():
            with contextlib.suppress(Exception):
                zk.kill()

    summary.update({
        "fault_phase_minutes": round((fault_ended - fault_started) / 60, 2) if fault_ended and fault_started else None,
        "faults_by_kind": dict(Counter(r["kind"] for r in faults.done)) if faults else {},
        "faults_skipped": dict(faults.skipped) if faults else {},
        "records_acknowledged": {p.tag: p.count for p in producers},
        "delivery_errors": {p.tag: len(p.failed) for p in producers},
        "acknowledged_without_offset": {p.tag: len(p.no_offset) for p in producers},
        "seconds_with_n_brokers_out": {n: round(t) for n, t in sorted(brokers_out.items())},
        "commits": {g: {"ok": sum(1 for m in ms for c in m.commits if c.error is None),
                        "failed": sum(1 for m in ms for c in m.commits if c.error is not None)}
                    for g, ms in members.items()},
        "offset_fetch_samples": {g: len(s) for g, s in sampler.samples.items()} if sampler else {},
        "anomalies": faults.anomalies if faults else [],
        "invariants": v.results,
        "ok": v.ok,
        "brokers": {b: str(cluster.broker(b).log_path) for b in cluster.ids} if cluster else {},
    })
    keep = args.keep or not v.ok
    summary["kept"] = keep
    text = [f"seed {seed}; {summary['fault_phase_minutes']} min of faults; directory {run_dir} "
            f"({'kept' if keep else 'removed'})",
            f"faults by kind: {summary['faults_by_kind']}; skipped: {summary['faults_skipped']}",
            f"records acknowledged: {summary['records_acknowledged']} (without an offset: "
            f"{summary['acknowledged_without_offset']}); delivery errors {summary['delivery_errors']}",
            f"seconds with n brokers out (down, paused or starting): {summary['seconds_with_n_brokers_out']}",
            f"commits: {summary['commits']}; OffsetFetch samples {summary['offset_fetch_samples']}",
            f"anomalies: {summary['anomalies'] or 'none'}"]
    for name, r in v.results.items():
        text.append(f"{'PASS' if r['ok'] else 'FAIL'} {name}: {r['summary']}")
        if not r["ok"]:
            text += [f"    {line}" for line in r["evidence"][:120]]
    text.append("RESULT: " + ("every invariant holds" if v.ok else "VIOLATED"))
    (run_dir / "summary.txt").write_text("\n".join(text) + "\n")
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    for r in faults.done if faults else []:
        log(f"fault #{r['n']} {r['kind']} target={r['target']} {r['params']}: {'; '.join(r['notes'])}")
    log.close()
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
    else:
        print("\n".join(text))
    if not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0 if v.ok else 1


if __name__ == "__main__":
    sys.exit(main())
