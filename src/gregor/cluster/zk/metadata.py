"""What a broker of a ZooKeeper cluster knows of the cluster: a cache of ZooKeeper's state, fed by
watches, answering the questions ``ClusterMetadata`` answers on one node (brokers, controller, who
leads each partition with which replicas and ISR), and telling listeners of every change.

Kafka's brokers learn partition state from the controller's LeaderAndIsr and UpdateMetadata
requests. Gregor's brokers read it from ZooKeeper itself, the node the controller (or a leader
changing its ISR) wrote with a conditional write: the same data, one fewer channel to keep in step,
and no broker can act on a state that ZooKeeper does not hold. Watches deliver changes in order per
node, on the event loop (``ZkClient``).

Listeners (called on the event loop, in the order the changes arrived):
- ``on_topic(assignment: TopicAssignment, configs: dict[str, str])``: a topic appeared or changed
  (partitions added, configs changed);
- ``on_topic_deleted(topic)``: the topic is gone from ZooKeeper;
- ``on_partition(topic, partition, replicas, state | None)``: a partition's state (None while the
  controller has not initialised it);
- ``on_brokers(live: dict[int, BrokerEndpoint])``: the set of live brokers changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from gregor.cluster.metadata import BrokerEndpoint, ClusterMetadata, PartitionLeadership
from gregor.cluster.zk import znodes as zn
from gregor.cluster.zk.client import ZkClient, ZnodeStat

log = logging.getLogger(__name__)

TopicListener = Callable[[zn.TopicAssignment, dict[str, str]], None]
PartitionListener = Callable[[str, int, list[int], zn.PartitionState | None], None]


@dataclass
class _TopicWatches:
    assignment: zn.TopicAssignment | None = None
    configs: dict[str, str] = field(default_factory=dict)
    stops: list[Callable[[], None]] = field(default_factory=list)
    partitions: set[int] = field(default_factory=set)


class ZkClusterMetadata(ClusterMetadata):
    def __init__(self, zk: ZkClient, node_id: int, rack: str | None = None, inter_broker: str = "PLAINTEXT") -> None:
        super().__init__(node_id, rack)
        self.zk = zk
        self.inter_broker = inter_broker
        self.live: dict[int, BrokerEndpoint] = {}
        self.assignments: dict[str, zn.TopicAssignment] = {}
        self.states: dict[tuple[str, int], zn.PartitionState] = {}
        self._controller_id = -1
        self._topics: dict[str, _TopicWatches] = {}
        self._stops: list[Callable[[], None]] = []
        self._broker_reads = 0  # generation of the live-broker set, so that a stale read is dropped
        self.on_topic: list[TopicListener] = []
        self.on_topic_deleted: list[Callable[[str], None]] = []
        self.on_partition: list[PartitionListener] = []
        self.on_brokers: list[Callable[[dict[int, BrokerEndpoint]], None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.synced = asyncio.Event()  # set once the first full picture is in

    # -- ClusterMetadata -----------------------------------------------------------------------
    @property
    def controller_id(self) -> int:
        return self._controller_id

    def brokers(self) -> list[BrokerEndpoint]:
        return [self.live[b] for b in sorted(self.live)]

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return self.live.get(node_id)

    def partition(self, topic: str, partition: int) -> PartitionLeadership:
        assignment = self.assignments.get(topic)
        replicas = list(assignment.partitions.get(partition, [])) if assignment is not None else []
        st = self.states.get((topic, partition))
        offline = [r for r in replicas if r not in self.live]
        if st is None:
            return PartitionLeadership(zn.NO_LEADER, -1, replicas, [], offline)
        leader = st.leader if st.leader in self.live else zn.NO_LEADER
        return PartitionLeadership(leader, st.leader_epoch, replicas, list(st.isr), offline)

    def state(self, topic: str, partition: int) -> zn.PartitionState | None:
        return self.states.get((topic, partition))

    # -- watches ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Watch the controller, the brokers and every topic; returns once the first picture of
        all of them is in (listeners have heard of every topic and partition)."""
        self._stops.append(await self.zk.watch_data(zn.CONTROLLER, self._controller_changed))
        self._stops.append(await self.zk.watch_children(zn.BROKERS_IDS, self._brokers_changed))
        self._stops.append(await self.zk.watch_children(zn.BROKERS_TOPICS, self._topics_changed))
        await self._settle()
        self.synced.set()

    async def _settle(self) -> None:
        """Wait until the reads the watches started are done (and the ones those started)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self) -> None:
        for stop in self._stops:
            stop()
        self._stops.clear()
        for tw in self._topics.values():
            for stop in tw.stops:
                stop()
        self._topics.clear()
        for t in list(self._tasks):
            t.cancel()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("reading cluster state from ZooKeeper failed: %s", task.exception())

    def _controller_changed(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        try:
            new = zn.decode_controller(data) if data else -1
        except (zn.ZnodeFormatError, KeyError) as e:
            log.error("cannot read %s: %s", zn.CONTROLLER, e)
            new = -1
        if new != self._controller_id:
            log.info("controller: broker %s", new if new >= 0 else "none (election in progress)")
        self._controller_id = new

    def _brokers_changed(self, children: list[str]) -> None:
        self._broker_reads += 1
        self._spawn(self._read_brokers([int(c) for c in children if c.isdigit()], self._broker_reads))

    async def _read_brokers(self, ids: list[int], generation: int) -> None:
        live: dict[int, BrokerEndpoint] = {}
        for broker_id in ids:
            got = await self.zk.get(zn.broker_path(broker_id))
            if got is None:
                continue  # gone between the listing and the read
            try:
                reg = zn.BrokerRegistration.decode(broker_id, got[0], self.inter_broker)
            except zn.ZnodeFormatError as e:
                log.error("ignoring broker %d: %s", broker_id, e)
                continue
            live[broker_id] = BrokerEndpoint(broker_id, reg.host, reg.port, reg.rack, reg.endpoints)
        if generation != self._broker_reads:
            return  # a newer listing is being read
        gone, came = set(self.live) - set(live), set(live) - set(self.live)
        self.live = live
        if gone or came:
            log.info("live brokers: %s%s%s", sorted(live), f" (gone: {sorted(gone)})" if gone else "",
                     f" (new: {sorted(came)})" if came else "")
        for fn in list(self.on_brokers):
            _tell(fn, dict(live))

    def _topics_changed(self, children: list[str]) -> None:
        names = set(children)
        for gone in set(self._topics) - names:
            tw = self._topics.pop(gone)
            for stop in tw.stops:
                stop()
            self.assignments.pop(gone, None)
            for p in tw.partitions:
                self.states.pop((gone, p), None)
            log.info("topic %s deleted from the cluster", gone)
            for fn in list(self.on_topic_deleted):
                _tell(fn, gone)
        for new in sorted(names - set(self._topics)):
            self._topics[new] = _TopicWatches()
            self._spawn(self._watch_topic(new))

    async def _watch_topic(self, topic: str) -> None:
        tw = self._topics.get(topic)
        if tw is None:
            return
        got = await self.zk.get(zn.topic_config_path(topic))
        try:
            tw.configs = zn.decode_topic_config(topic, got[0] if got else None)
        except zn.ZnodeFormatError as e:
            log.error("ignoring the configs of topic %s: %s", topic, e)
        stop = await self.zk.watch_data(zn.topic_path(topic), lambda d, s: self._topic_data(topic, d))
        if self._topics.get(topic) is not tw:
            stop()
            return
        tw.stops.append(stop)
        stop = await self.zk.watch_data(zn.topic_config_path(topic), lambda d, s: self._topic_config(topic, d))
        tw.stops.append(stop)

    def _topic_config(self, topic: str, data: bytes | None) -> None:
        tw = self._topics.get(topic)
        if tw is None:
            return
        try:
            configs = zn.decode_topic_config(topic, data)
        except zn.ZnodeFormatError as e:
            log.error("ignoring the configs of topic %s: %s", topic, e)
            return
        if configs != tw.configs:
            tw.configs = configs
            if tw.assignment is not None:
                for fn in list(self.on_topic):
                    _tell(fn, tw.assignment, dict(configs))

    def _topic_data(self, topic: str, data: bytes | None) -> None:
        tw = self._topics.get(topic)
        if tw is None or data is None:
            return  # deleted: the children watch tells
        try:
            assignment = zn.TopicAssignment.decode(topic, data)
        except zn.ZnodeFormatError as e:
            log.error("ignoring topic %s: %s", topic, e)
            return
        tw.assignment = assignment
        self.assignments[topic] = assignment
        for fn in list(self.on_topic):
            _tell(fn, assignment, dict(tw.configs))
        for p in sorted(set(assignment.partitions) - tw.partitions):
            tw.partitions.add(p)
            self._spawn(self._watch_state(topic, p, tw))

    async def _watch_state(self, topic: str, partition: int, tw: _TopicWatches) -> None:
        stop = await self.zk.watch_data(zn.state_path(topic, partition),
                                        lambda d, s: self._state_changed(topic, partition, d, s))
        if self._topics.get(topic) is not tw:
            stop()
            return
        tw.stops.append(stop)

    def _state_changed(self, topic: str, partition: int, data: bytes | None, stat: ZnodeStat | None) -> None:
        assignment = self.assignments.get(topic)
        if assignment is None or topic not in self._topics:
            return
        st: zn.PartitionState | None = None
        if data is not None and stat is not None:
            try:
                st = zn.PartitionState.decode(data, stat.version, zn.state_path(topic, partition), stat.mzxid)
            except zn.ZnodeFormatError as e:
                log.error("ignoring the state of %s-%d: %s", topic, partition, e)
                return
        old = self.states.get((topic, partition))
        if st is None:
            self.states.pop((topic, partition), None)
        else:
            if old is not None and st.zk_version < old.zk_version:
                return  # an older read delivered late
            self.states[(topic, partition)] = st
        replicas = list(assignment.partitions.get(partition, []))
        for fn in list(self.on_partition):
            _tell(fn, topic, partition, replicas, st)

    def remember_state(self, topic: str, partition: int, state: zn.PartitionState) -> None:
        """A state this broker wrote itself (a leader's ISR change), known before the watch says so."""
        old = self.states.get((topic, partition))
        if old is None or state.zk_version > old.zk_version:
            self.states[(topic, partition)] = state


def _tell(fn: Callable[..., object], *args: object) -> None:
    """One listener: its failure is logged and never keeps the others from hearing the change
    (a topic deletion that stopped at the first failing listener left stale replicas open)."""
    try:
        fn(*args)
    except Exception:
        log.exception("listener %s failed on %s", getattr(fn, "__qualname__", fn), args[:2])
