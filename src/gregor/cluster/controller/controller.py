"""The controller (Kafka 2.8's KafkaController in ZooKeeper mode): one broker of the cluster,
elected through the ephemeral ``/controller`` node, decides every partition's leader and writes
it to the partition's state node. Brokers follow those nodes themselves (there are no
LeaderAndIsr or UpdateMetadata requests in Gregor), so the controller's whole output is ZooKeeper
writes, each fenced by the controller epoch (``zk_writes``).

Every broker runs a ``Controller``; it takes part in the election and, while elected, processes
its events one at a time (``events.EventQueue``):

- ``BrokerChange`` (``/brokers/ids``): for a broker gone, partitions it led get a leader from
  their live ISR members (offline election), and it leaves every ISR (never emptying one: the
  last member stays, with leader -1); for a broker (re)joining, offline partitions whose ISR has
  it, and partitions never initialised, get a leader.
- ``TopicChange`` (``/brokers/topics``) and ``PartitionModifications`` (a topic node's data):
  new partitions get their first state (first live replica leads, live replicas form the ISR,
  leader epoch 0); without a live replica they wait for one.
- ``TopicDeletion`` (``/admin/delete_topics``): the topic's nodes, its configs and the request
  are deleted together. Brokers delete their replicas when the topic is gone from ZooKeeper.
- ``ControlledShutdown``: leadership of the partitions the broker leads moves to another ISR
  member, and it leaves the ISRs it is in as a follower; until its registration goes it is not
  elected anywhere. The answer lists the partitions it still leads that another replica could
  lead (a single-replica partition is not listed, as in Kafka: nothing can move it).
- ``AutoPreferredReplicaLeaderElection`` (every ``leader.imbalance.check.interval.seconds``): the
  preferred replica leads again where it is alive and in the ISR, for brokers whose share of
  partitions not led by their preferred replica is above ``leader.imbalance.per.broker.percentage``.
- ``TopicUncleanLeaderElectionEnable``: a topic's ``unclean.leader.election.enable`` turned true:
  its offline partitions may now get a leader outside the ISR.

Every election is logged at INFO in plain words.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from gregor.cluster.controller import election
from gregor.cluster.controller.context import ControllerContext, Phase, TopicPartition
from gregor.cluster.controller.election import Strategy
from gregor.cluster.controller.events import (
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    ControlledShutdown,
    ControllerChange,
    Event,
    EventQueue,
    Expire,
    PartitionModifications,
    Reelect,
    ShutdownResult,
    Startup,
    TopicChange,
    TopicDeletion,
    TopicUncleanLeaderElectionEnable,
)
from gregor.cluster.controller.zk_writes import ControllerMoved, ControllerZk
from gregor.cluster.zk import znodes
from gregor.cluster.zk.client import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    ZkClient,
    ZkSession,
    ZnodeStat,
)
from gregor.config import BrokerConfig
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

INITIAL_CONTROLLER_EPOCH = 0  # /controller_epoch when created; the first controller has epoch 1
UNKNOWN_BROKER_EPOCH = -1  # a ControlledShutdown without a broker epoch (request v0, v1)
MAX_OPS_PER_MULTI = 1000  # a multi-op is one ZooKeeper request (jute.maxbuffer, 1 MB by default)


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _leader(b: int) -> str:
    return "none" if b == znodes.NO_LEADER else str(b)


def _parse_bool(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    return True if v == "true" else False if v == "false" else None


class Controller:
    def __init__(self, zk: ZkClient, broker_id: int, config: BrokerConfig, *,
                 rebalance_first_delay_s: float = 5.0) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.config = config
        self.rebalance_first_delay_s = rebalance_first_delay_s
        self.active_controller_id = -1
        self.ctx = ControllerContext()
        self.store = ControllerZk(zk, self.ctx, lambda: self.is_active)
        self.queue = EventQueue(self._process)
        self._watches: list[Callable[[], None]] = []  # stopped on resignation
        self._topic_watches: dict[str, list[Callable[[], None]]] = {}
        self._controller_watch: Callable[[], None] | None = None
        self._rebalance_timer: asyncio.TimerHandle | None = None
        self._session_expired = False
        self._started = False
        self._stopping = False
        self._stopped = False

    # -- public --------------------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id and not self._stopped

    @property
    def epoch(self) -> int:
        """The controller epoch this broker was elected with (0 when it never was)."""
        return self.ctx.epoch

    async def start(self) -> None:
        """Take part in the election (now and whenever ``/controller`` goes away)."""
        if self._started:
            return
        self._started = True
        self.zk.add_session_listener(self._on_session)
        self.queue.start()
        self.queue.put(Startup())

    async def stop(self) -> None:
        """Stop taking part; if this broker is the controller, resign and delete ``/controller``
        so that another broker takes over at once."""
        if self._stopping:
            return
        self._stopping = True
        await self.queue.close()
        if self._controller_watch is not None:
            self._controller_watch()
            self._controller_watch = None
        was_active = self.active_controller_id == self.broker_id
        self._stopped = True
        if was_active:
            version = self.ctx.epoch_zk_version
            self._on_resignation()
            self.active_controller_id = -1
            try:
                await asyncio.wait_for(self.zk.multi([Op.check(znodes.CONTROLLER_EPOCH, version),
                                                      Op.delete(znodes.CONTROLLER)]), 5)
                log.info("broker %d resigned as controller", self.broker_id)
            except Exception as e:  # noqa: BLE001 - moved already, or ZooKeeper unreachable: the session ends it
                log.info("broker %d stopped as controller (%s)", self.broker_id, type(e).__name__)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> ShutdownResult:
        """Move leadership away from ``broker_id`` before it stops: (error, partitions it still
        leads). NOT_CONTROLLER unless this broker is the controller; STALE_BROKER_EPOCH for a
        request of an earlier registration; BROKER_NOT_AVAILABLE for a broker not registered."""
        if self._stopping or not self._started:
            return ErrorCode.not_controller, []
        fut: asyncio.Future[ShutdownResult] = asyncio.get_running_loop().create_future()
        self.queue.put(ControlledShutdown(broker_id, broker_epoch, fut))
        return await fut

    async def wait_idle(self) -> None:
        """Until the events put so far are processed (tests, and callers that need a decision made)."""
        await self.queue.wait_idle()

    # -- session and election --------------------------------------------------------------------------
    def _on_session(self, state: ZkSession) -> None:
        if self._stopped:
            return
        if state is ZkSession.EXPIRED:
            # the session's /controller is gone; nothing may be decided with it any more
            self._session_expired = True
            was = self.active_controller_id == self.broker_id
            self.active_controller_id = -1
            if was:
                log.warning("broker %d: ZooKeeper session expired; no longer the controller", self.broker_id)
            self.queue.clear_and_put(Expire())
        elif state is ZkSession.CONNECTED and self._session_expired:
            self._session_expired = False
            self.queue.put(Reelect())

    def _on_controller_node(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        self.queue.put(Reelect() if data is None else ControllerChange())

    async def _process(self, event: Event) -> None:
        try:
            match event:
                case Startup():
                    if self._controller_watch is None:
                        self._controller_watch = await self.zk.watch_data(znodes.CONTROLLER, self._on_controller_node)
                    await self._elect()
                case ControllerChange():
                    await self._maybe_resign()
                case Reelect():
                    await self._maybe_resign()
                    await self._elect()
                case Expire():
                    self.active_controller_id = -1
                    self._on_resignation()
                case BrokerChange():
                    await self._process_broker_change()
                case TopicChange():
                    await self._process_topic_change()
                case PartitionModifications(topic=topic):
                    await self._process_partition_modifications(topic)
                case TopicDeletion():
                    await self._process_topic_deletion()
                case TopicUncleanLeaderElectionEnable(topic=topic):
                    if self.is_active:
                        log.info("unclean leader election enabled for topic %s", topic)
                        await self._trigger_online_partitions(topic, reason=f"unclean election enabled for {topic}")
                case AutoPreferredReplicaLeaderElection():
                    await self._process_auto_preferred_election()
                case ControlledShutdown(broker_id=bid, broker_epoch=bep, result=fut):
                    try:
                        result = await self._do_controlled_shutdown(bid, bep)
                    except ControllerMoved as e:
                        await self._on_controller_moved(event, e)  # before answering: resigned by then
                        result = (ErrorCode.not_controller, [])
                    except Exception:
                        log.exception("controlled shutdown of broker %d failed", bid)
                        result = (ErrorCode.unknown_server_error, [])
                    if not fut.done():
                        fut.set_result(result)
        except ControllerMoved as e:
            await self._on_controller_moved(event, e)

    async def _on_controller_moved(self, event: Event, e: ControllerMoved) -> None:
        log.info("broker %d: controller moved while processing %s: %s", self.broker_id, type(event).__name__, e)
        try:
            await self._maybe_resign()
        except ControllerMoved:
            pass
        if self.is_active:
            # /controller is still this broker's, yet the epoch moved on: no write of this
            # controller can succeed any more; give /controller up and elect again
            log.warning("broker %d: /controller is still this broker's but the controller epoch moved; "
                        "resigning", self.broker_id)
            self.active_controller_id = -1
            self._on_resignation()
            await self._delete_own_controller_node()

    async def _read_controller_id(self) -> int:
        got = await self.store.get(znodes.CONTROLLER)
        if got is None:
            return -1
        try:
            return znodes.decode_controller(got[0])
        except (znodes.ZnodeFormatError, KeyError, ValueError):
            return -1

    async def _maybe_resign(self) -> None:
        was_active = self.is_active
        self.active_controller_id = await self._read_controller_id()
        if was_active and not self.is_active:
            log.info("broker %d is no longer the controller (broker %s is)", self.broker_id,
                     _leader(self.active_controller_id))
            self._on_resignation()

    async def _elect(self) -> None:
        """Become the controller if there is none: create ``/controller`` and increment
        ``/controller_epoch`` (conditionally on the version read) in one multi-op."""
        for _ in range(10):
            self.active_controller_id = await self._read_controller_id()
            if self.active_controller_id != -1:
                return
            current, version = await self._read_or_create_epoch()
            new_epoch = current + 1
            try:
                results = await self.zk.multi([
                    Op.create(znodes.CONTROLLER, znodes.encode_controller(self.broker_id), ephemeral=True),
                    Op.set(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(new_epoch), version)])
                epoch_version = results[1].version
            except (NodeExistsError, BadVersionError, ConnectionLoss):
                # lost, unless this very request won and only its answer was lost
                winner = await self._read_controller_id()
                got = await self.store.get(znodes.CONTROLLER_EPOCH)
                if winner == -1:
                    continue  # nobody won (the request did not get through): again
                if winner != self.broker_id or got is None or znodes.decode_controller_epoch(got[0]) != new_epoch:
                    self.active_controller_id = winner
                    return
                epoch_version = got[1].version
            await self._become_controller(new_epoch, epoch_version)
            return
        log.warning("broker %d: the controller election did not settle; waiting for /controller to change",
                    self.broker_id)

    async def _read_or_create_epoch(self) -> tuple[int, int]:
        """/controller_epoch's value and version, created with 0 if missing (the first controller
        of a cluster has epoch 1)."""
        got = await self.store.get(znodes.CONTROLLER_EPOCH)
        if got is None:
            try:
                await self.store.call(lambda: self.zk.create(
                    znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(INITIAL_CONTROLLER_EPOCH)))
                return INITIAL_CONTROLLER_EPOCH, 0
            except NodeExistsError:
                got = await self.store.get(znodes.CONTROLLER_EPOCH)
                if got is None:
                    raise RuntimeError(f"{znodes.CONTROLLER_EPOCH} vanished during the election") from None
        return znodes.decode_controller_epoch(got[0]), got[1].version

    async def _become_controller(self, epoch: int, epoch_version: int) -> None:
        self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=epoch_version)
        self.store.ctx = self.ctx
        self.active_controller_id = self.broker_id
        log.info("broker %d elected as the controller, controller epoch %d", self.broker_id, epoch)
        try:
            await self._on_controller_failover()
        except ControllerMoved:
            raise
        except Exception:
            log.exception("broker %d failed to take over as controller; resigning", self.broker_id)
            await self._trigger_controller_move()

    async def _trigger_controller_move(self) -> None:
        """Resign and delete ``/controller`` (if still this broker's) so that another election runs."""
        self.active_controller_id = await self._read_controller_id()
        if not self.is_active:
            return
        version = self.ctx.epoch_zk_version
        self.active_controller_id = -1
        self._on_resignation()
        try:
            await self.zk.multi([Op.check(znodes.CONTROLLER_EPOCH, version), Op.delete(znodes.CONTROLLER)])
        except (BadVersionError, NoNodeError):
            log.info("the controller had moved already")

    async def _delete_own_controller_node(self) -> None:
        got = await self.store.get(znodes.CONTROLLER)
        if got is not None and got[1].ephemeralOwner == self.zk.session_id:
            try:
                await self.zk.delete(znodes.CONTROLLER, got[1].version)
            except (BadVersionError, NoNodeError):
                pass

    def _on_resignation(self) -> None:
        for stop in self._watches:
            stop()
        self._watches.clear()
        for stops in self._topic_watches.values():
            for stop in stops:
                stop()
        self._topic_watches.clear()
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None
        if self.ctx.epoch_zk_version != -1:
            log.info("broker %d resigned as controller (epoch %d)", self.broker_id, self.ctx.epoch)
        self.ctx = ControllerContext()
        self.store.ctx = self.ctx

    # -- becoming the controller ---------------------------------------------------------------------
    async def _on_controller_failover(self) -> None:
        put = self.queue.put
        # watch first, then read: a change between the two is an event processed after this one
        self._watches.append(await self.zk.watch_children(znodes.BROKERS_IDS, lambda _c: put(BrokerChange())))
        self._watches.append(await self.zk.watch_children(znodes.BROKERS_TOPICS, lambda _c: put(TopicChange())))
        self._watches.append(await self.zk.watch_children(znodes.DELETE_TOPICS, lambda _c: put(TopicDeletion())))
        ctx = self.ctx
        ctx.broker_epochs = await self._read_brokers()
        topics = await self.store.children(znodes.BROKERS_TOPICS)
        for topic in topics:
            await self._load_topic(topic)
        states = await self.store.read_states(ctx.all_partitions())
        ctx.leadership = {tp: st for tp, st in states.items() if st is not None}
        ctx.topics_to_delete = set(await self.store.children(znodes.DELETE_TOPICS)) & set(ctx.assignments)
        log.info("controller %d: live brokers %s, %d topics, %d partitions, %d to delete", self.broker_id,
                 sorted(ctx.broker_epochs), len(ctx.assignments), len(ctx.all_partitions()),
                 len(ctx.topics_to_delete))
        # replicas on brokers that are not alive leave the ISRs (brokers may have died while
        # there was no controller), then every partition without a live leader gets one
        dead = {b for tp in ctx.leadership for b in ctx.replicas(tp)} - ctx.live_or_shutting_down_ids()
        for b in sorted(dead):
            await self._remove_replica_from_isrs(b, self._partitions_with_state_on(b), f"broker {b} is not alive")
        # a leader that registered after its leadership was written restarted while there was no
        # controller to see it: its brokers act on it only once the controller has said so for their
        # current registration, so it is handled as the restart it was (failed, then back)
        restarted = sorted({st.leader for st in ctx.leadership.values()
                            if st.leader in ctx.broker_epochs and 0 <= st.mzxid < ctx.broker_epochs[st.leader]})
        if restarted:
            log.info("controller %d: brokers %s registered after their leaderships were written; handling them "
                     "as restarted", self.broker_id, restarted)
            await self._bounce(restarted)
        for tp in ctx.all_partitions():
            st = ctx.leadership.get(tp)
            if st is None:
                ctx.phases[tp] = Phase.NEW
            else:
                ctx.phases[tp] = Phase.ONLINE if ctx.is_replica_online(st.leader) else Phase.OFFLINE
        await self._trigger_online_partitions(reason="a new controller was elected")
        log.info("broker %d ready as the controller (epoch %d)", self.broker_id, ctx.epoch)
        if self.config["auto.leader.rebalance.enable"]:
            self._schedule_rebalance(self.rebalance_first_delay_s)

    async def _read_brokers(self) -> dict[int, int]:
        """Registered brokers -> their epochs (czxid of their registration)."""
        ids = [int(c) for c in await self.store.children(znodes.BROKERS_IDS) if c.isdigit()]

        async def epoch(b: int) -> int | None:
            got = await self.store.get(znodes.broker_path(b))
            return None if got is None else got[1].czxid

        epochs = await asyncio.gather(*(epoch(b) for b in ids))
        return {b: e for b, e in zip(ids, epochs, strict=True) if e is not None}

    async def _load_topic(self, topic: str) -> dict[int, list[int]]:
        """Read a topic's assignment into the context (giving it a topic id if it has none, as a
        Kafka 2.8 controller does) and watch its node and its configs."""
        got = await self.store.get(znodes.topic_path(topic))
        if got is None:
            return {}
        data, stat = got
        try:
            assignment = znodes.TopicAssignment.decode(topic, data)
        except znodes.ZnodeFormatError as e:
            log.error("ignoring topic %s: %s", topic, e)
            return {}
        version = stat.version
        topic_id = assignment.topic_id
        if topic_id is None:
            topic_id = uuid.uuid4()
            new = znodes.TopicAssignment(topic, assignment.partitions, topic_id)
            try:
                (written,) = await self.store.fenced([Op.set(znodes.topic_path(topic), new.encode(), version)])
                version = written.version
                log.info("topic %s had no topic id; assigned %s", topic, znodes.encode_topic_id(topic_id))
            except (BadVersionError, NoNodeError):
                topic_id = None  # changed meanwhile: its modification event comes next
        self.ctx.assignments[topic] = {p: list(r) for p, r in assignment.partitions.items()}
        if topic_id is not None:
            self.ctx.topic_ids[topic] = topic_id
        self.ctx.topic_versions[topic] = version
        if topic not in self._topic_watches:
            self._topic_watches[topic] = [
                await self.zk.watch_data(znodes.topic_path(topic), self._changes_only(
                    topic, self._on_topic_node)),
                await self.zk.watch_data(znodes.topic_config_path(topic), self._changes_only(
                    topic, self._on_topic_config)),
            ]
        return self.ctx.assignments[topic]

    @staticmethod
    def _changes_only(topic: str, fn: Callable[[str, bytes | None], None]
                      ) -> Callable[[bytes | None, ZnodeStat | None], None]:
        """A watch callback for ``topic`` that ignores the first call (the node as it is when
        watched)."""
        first = [True]

        def cb(data: bytes | None, stat: ZnodeStat | None) -> None:
            if first[0]:
                first[0] = False
                return
            fn(topic, data)

        return cb

    def _on_topic_node(self, topic: str, data: bytes | None) -> None:
        if data is not None:  # deletion is TopicChange's
            self.queue.put(PartitionModifications(topic))

    def _on_topic_config(self, topic: str, data: bytes | None) -> None:
        try:
            cfg = znodes.decode_topic_config(topic, data)
        except znodes.ZnodeFormatError:
            return
        if _parse_bool(cfg.get("unclean.leader.election.enable")):
            self.queue.put(TopicUncleanLeaderElectionEnable(topic))

    def _stop_topic_watches(self, topic: str) -> None:
        for stop in self._topic_watches.pop(topic, []):
            stop()

    def _partitions_with_state_on(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.ctx.partitions_on_broker(broker_id)
                if tp in self.ctx.leadership and not self.ctx.is_queued_for_deletion(tp[0])]

    # -- the partition state machine -------------------------------------------------------------------
    async def _trigger_online_partitions(self, topic: str | None = None, reason: str = "") -> None:
        """Every new or offline partition (of ``topic``) not being deleted: initialise or elect."""
        tps = [tp for tp in self.ctx.partitions_in((Phase.NEW, Phase.OFFLINE), topic)
               if not self.ctx.is_queued_for_deletion(tp[0])]
        await self._to_online(tps, Strategy.OFFLINE, reason)

    async def _to_online(self, tps: list[TopicPartition], strategy: Strategy, reason: str
                         ) -> dict[TopicPartition, znodes.PartitionState | None]:
        """Initialise the new partitions among ``tps``, elect leaders for the others. Returns the
        new state of each partition that got one (None: no leader could be chosen)."""
        out: dict[TopicPartition, znodes.PartitionState | None] = {}
        new = [tp for tp in tps if self.ctx.phases.get(tp) is Phase.NEW]
        others = [tp for tp in tps if self.ctx.phases.get(tp) in (Phase.ONLINE, Phase.OFFLINE)]
        if new:
            out.update(await self._initialise(new))
        if others:
            out.update(await self._elect_leaders(others, strategy, reason))
        return out

    async def _initialise(self, tps: list[TopicPartition]) -> dict[TopicPartition, znodes.PartitionState | None]:
        ctx = self.ctx
        live = ctx.live_broker_ids()
        first: dict[TopicPartition, znodes.PartitionState] = {}
        out: dict[TopicPartition, znodes.PartitionState | None] = {}
        for tp in tps:
            st = election.initial_state(ctx.replicas(tp), live, ctx.epoch)
            if st is None:
                log.info("partition %s: no replica of %s is alive; it gets a leader when one is", _tp(tp),
                         ctx.replicas(tp))
                out[tp] = None
            else:
                first[tp] = st
        if not first:
            return out
        created, failed = await self.store.create_states(first)
        for tp, st in sorted(created.items()):
            ctx.leadership[tp] = st
            ctx.phases[tp] = Phase.ONLINE
            out[tp] = st
            log.info("partition %s: initialised, leader %d (epoch 0), ISR %s", _tp(tp), st.leader, st.isr)
        if failed:
            existing = await self.store.read_states([tp for tp, e in failed.items() if isinstance(e, NodeExistsError)])
            for tp, e in sorted(failed.items()):
                st2 = existing.get(tp)
                if st2 is not None:  # written by an earlier controller after this one read
                    ctx.leadership[tp] = st2
                    ctx.phases[tp] = Phase.ONLINE if ctx.is_replica_online(st2.leader) else Phase.OFFLINE
                    out[tp] = st2
                else:
                    log.warning("partition %s: could not create its state: %s", _tp(tp), e)
                    out[tp] = None
        return out

    async def _elect_leaders(self, tps: list[TopicPartition], strategy: Strategy, reason: str
                             ) -> dict[TopicPartition, znodes.PartitionState | None]:
        """Elect with ``strategy``, re-reading and deciding again for partitions whose state
        changed meanwhile (a leader changed the ISR), until each is decided."""
        ctx = self.ctx
        out: dict[TopicPartition, znodes.PartitionState | None] = {}
        remaining = list(tps)
        while remaining:
            states = await self.store.read_states(remaining)
            proposals: dict[TopicPartition, znodes.PartitionState] = {}
            previous: dict[TopicPartition, znodes.PartitionState] = {}
            unclean_used: set[TopicPartition] = set()
            live = ctx.live_broker_ids()
            for tp in remaining:
                current = states[tp]
                if current is None:
                    log.warning("partition %s: no state node; cannot elect a leader", _tp(tp))
                    out[tp] = None
                    continue
                if current.controller_epoch > ctx.epoch:
                    raise ControllerMoved(f"partition {_tp(tp)} was written by controller epoch "
                                          f"{current.controller_epoch}")
                ctx.leadership[tp] = current
                proposal = await self._decide(tp, current, strategy, live)
                if proposal is None:
                    out[tp] = None
                    if strategy is Strategy.OFFLINE:
                        ctx.phases[tp] = Phase.OFFLINE
                    continue
                if strategy is Strategy.OFFLINE and proposal.leader not in current.isr:
                    unclean_used.add(tp)
                proposals[tp] = proposal
                previous[tp] = current
            if not proposals:
                break
            written, remaining, failed = await self.store.update_states(proposals)
            for tp, st in sorted(written.items()):
                ctx.leadership[tp] = st
                ctx.phases[tp] = Phase.ONLINE
                out[tp] = st
                self._log_change(tp, previous[tp], st, reason, unclean=tp in unclean_used)
            for tp, e in failed.items():
                log.warning("partition %s: election failed: %s", _tp(tp), e)
                out[tp] = None
            if remaining:
                log.info("partitions %s changed while electing; deciding again", [_tp(tp) for tp in remaining])
        return out

    async def _decide(self, tp: TopicPartition, current: znodes.PartitionState, strategy: Strategy,
                      live: set[int]) -> znodes.PartitionState | None:
        ctx = self.ctx
        assignment = ctx.replicas(tp)
        if strategy is Strategy.OFFLINE:
            unclean = False
            if not any(b in live for b in current.isr):
                unclean = await self._unclean_enabled(tp[0])
            proposal = election.elect_offline(current, assignment, live, unclean, ctx.epoch)
            if proposal is None:
                log.info("partition %s: offline, no ISR member of %s is alive%s", _tp(tp), current.isr,
                         "" if unclean else " (unclean.leader.election.enable is false)")
            return proposal
        if strategy is Strategy.PREFERRED:
            return election.elect_preferred(current, assignment, live, ctx.epoch)
        proposal = election.elect_for_controlled_shutdown(current, assignment, ctx.live_or_shutting_down_ids(),
                                                          ctx.shutting_down, ctx.epoch)
        if proposal is None:
            log.info("partition %s: leader %s stays, no other ISR member of %s is alive", _tp(tp),
                     _leader(current.leader), current.isr)
        return proposal

    async def _unclean_enabled(self, topic: str) -> bool:
        """The topic's unclean.leader.election.enable, over the broker's."""
        got = await self.store.get(znodes.topic_config_path(topic))
        if got is not None:
            try:
                value = _parse_bool(znodes.decode_topic_config(topic, got[0]).get("unclean.leader.election.enable"))
            except znodes.ZnodeFormatError:
                value = None
            if value is not None:
                return value
        return bool(self.config["unclean.leader.election.enable"])

    def _log_change(self, tp: TopicPartition, before: znodes.PartitionState, after: znodes.PartitionState,
                    reason: str, unclean: bool = False) -> None:
        isr = f"ISR {before.isr} -> {after.isr}" if before.isr != after.isr else f"ISR {after.isr}"
        log.info("partition %s: leader %s -> %s (epoch %d -> %d), %s%s%s", _tp(tp), _leader(before.leader),
                 _leader(after.leader), before.leader_epoch, after.leader_epoch, isr,
                 f"; {reason}" if reason else "",
                 "; UNCLEAN election: no ISR member was alive, records acknowledged by the old ISR may be lost"
                 if unclean else "")

    # -- replicas leaving the ISR ------------------------------------------------------------------------
    async def _remove_replica_from_isrs(self, replica: int, tps: list[TopicPartition], reason: str) -> None:
        """``replica`` leaves the ISR of each of ``tps`` (Kafka's OfflineReplica transition)."""
        ctx = self.ctx
        remaining = list(tps)
        while remaining:
            states = await self.store.read_states(remaining)
            proposals: dict[TopicPartition, znodes.PartitionState] = {}
            for tp, current in states.items():
                if current is None:
                    if not ctx.is_queued_for_deletion(tp[0]):
                        log.warning("partition %s: no state node while removing broker %d from its ISR",
                                    _tp(tp), replica)
                    continue
                if current.controller_epoch > ctx.epoch:
                    raise ControllerMoved(f"partition {_tp(tp)} was written by controller epoch "
                                          f"{current.controller_epoch}")
                ctx.leadership[tp] = current
                if replica in current.isr:
                    proposals[tp] = election.without_replica(current, replica, ctx.epoch)
            if not proposals:
                return
            written, remaining, failed = await self.store.update_states(proposals)
            for tp, st in sorted(written.items()):
                self._log_change(tp, states[tp] or st, st, reason)
                ctx.leadership[tp] = st
            for tp, e in failed.items():
                log.warning("partition %s: removing broker %d from the ISR failed: %s", _tp(tp), replica, e)

    # -- events --------------------------------------------------------------------------------------
    async def _process_broker_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.ctx
        current = await self._read_brokers()
        known = ctx.live_or_shutting_down_ids()
        new = sorted(set(current) - known)
        dead = sorted(known - set(current))
        bounced = sorted(b for b in set(current) & known if current[b] > ctx.broker_epochs[b])
        if not (new or dead or bounced):
            return
        log.info("brokers: joined %s, gone %s, restarted %s; live now %s", new, dead, bounced, sorted(current))
        if new:
            for b in new:
                ctx.broker_epochs[b] = current[b]
            await self._on_broker_startup(new)
        if bounced:
            for b in bounced:
                ctx.broker_epochs[b] = current[b]
            await self._bounce(bounced)
        if dead:
            for b in dead:
                ctx.broker_epochs.pop(b, None)
            await self._on_broker_failure(dead)

    async def _bounce(self, brokers: list[int]) -> None:
        """Brokers that restarted (a new registration): handled as failed, then back (Kafka's
        bounced brokers), so that every partition they led gets a new leader epoch, written after
        their new registration, and they leave the ISRs until they have caught up again."""
        ctx = self.ctx
        epochs = {b: ctx.broker_epochs.pop(b) for b in brokers if b in ctx.broker_epochs}
        await self._on_broker_failure(brokers)
        ctx.broker_epochs.update(epochs)
        await self._on_broker_startup(brokers)

    async def _on_broker_startup(self, brokers: list[int]) -> None:
        await self._trigger_online_partitions(
            reason=f"brokers {', '.join(map(str, brokers))} joined" if len(brokers) > 1
            else f"broker {brokers[0]} joined")

    async def _on_broker_failure(self, brokers: list[int]) -> None:
        ctx = self.ctx
        for b in brokers:
            ctx.shutting_down.discard(b)
        gone = (f"brokers {', '.join(map(str, brokers))} are gone" if len(brokers) > 1
                else f"broker {brokers[0]} is gone")
        for tp in ctx.partitions_with_offline_leader():
            ctx.phases[tp] = Phase.OFFLINE
        await self._trigger_online_partitions(reason=gone)
        for b in brokers:
            await self._remove_replica_from_isrs(b, self._partitions_with_state_on(b), f"broker {b} is gone")

    async def _process_topic_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.ctx
        topics = set(await self.store.children(znodes.BROKERS_TOPICS))
        new = sorted(topics - set(ctx.assignments))
        deleted = sorted(set(ctx.assignments) - topics)
        for topic in deleted:
            self._stop_topic_watches(topic)
            ctx.remove_topic(topic)
        added: list[TopicPartition] = []
        for topic in new:
            added.extend((topic, p) for p in sorted(await self._load_topic(topic)))
        if new or deleted:
            log.info("topics: new %s, deleted %s", new, deleted)
        if added:
            await self._on_new_partitions(added)

    async def _on_new_partitions(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.ctx.phases[tp] = Phase.NEW
        await self._to_online(tps, Strategy.OFFLINE, "new partition")

    async def _process_partition_modifications(self, topic: str) -> None:
        if not self.is_active or topic not in self.ctx.assignments:
            return
        ctx = self.ctx
        got = await self.store.get(znodes.topic_path(topic))
        if got is None:
            return
        assignment = znodes.TopicAssignment.decode(topic, got[0]).partitions
        known = ctx.assignments[topic]
        for p, replicas in assignment.items():
            if p in known and known[p] != replicas:
                log.warning("topic %s: partition %d's replicas changed from %s to %s in ZooKeeper; reassignment "
                            "is not supported, keeping %s", topic, p, known[p], replicas, known[p])
        added = sorted(p for p in assignment if p not in known)
        if not added:
            return
        if ctx.is_queued_for_deletion(topic):
            log.warning("topic %s: not adding partitions %s, the topic is being deleted", topic, added)
            return
        for p in added:
            known[p] = list(assignment[p])
        ctx.topic_versions[topic] = got[1].version
        log.info("topic %s: partitions added %s", topic, {p: assignment[p] for p in added})
        await self._on_new_partitions([(topic, p) for p in added])

    async def _process_topic_deletion(self) -> None:
        if not self.is_active:
            return
        ctx = self.ctx
        requested = sorted(await self.store.children(znodes.DELETE_TOPICS))
        if not requested:
            return
        unknown = [t for t in requested if t not in ctx.assignments]
        if unknown:
            log.warning("ignoring deletion requests of topics that do not exist: %s", unknown)
        if not self.config["delete.topic.enable"]:
            log.info("delete.topic.enable is false: removing the deletion requests of %s", requested)
            unknown = requested
        for topic in unknown:
            try:
                await self.store.fenced([Op.delete(znodes.delete_topic_path(topic))])
            except NoNodeError:
                pass
        to_delete = [t for t in requested if t not in unknown]
        ctx.topics_to_delete.update(to_delete)
        for topic in to_delete:
            await self._delete_topic(topic)

    async def _delete_topic(self, topic: str) -> None:
        """Delete the topic's nodes (partition states, the topic, its configs) and the deletion
        request, fenced, in one multi-op when the topic is not huge: brokers see the whole
        topic go at once."""
        self._stop_topic_watches(topic)
        for attempt in range(10):
            try:
                ops = await self._topic_deletion_ops(topic)
                for start in range(0, len(ops), MAX_OPS_PER_MULTI):  # deepest nodes first
                    await self.store.fenced(ops[start:start + MAX_OPS_PER_MULTI])
                break
            except (NoNodeError, NotEmptyError) as e:  # changed under us: look again
                log.info("topic %s changed while being deleted (%s); retrying", topic, type(e).__name__)
                if attempt == 9:
                    log.error("topic %s: deletion did not complete; it is retried at the next deletion event", topic)
                    return
        self.ctx.remove_topic(topic)
        log.info("deleted topic %s", topic)

    async def _topic_deletion_ops(self, topic: str) -> list[Op]:
        ops: list[Op] = []
        parts = znodes.partitions_path(topic)
        for p in await self.store.children(parts):
            path = f"{parts}/{p}"
            ops.extend(Op.delete(f"{path}/{c}") for c in await self.store.children(path))
            ops.append(Op.delete(path))
        for path in (parts, znodes.topic_path(topic), znodes.topic_config_path(topic)):
            if await self.store.get(path) is not None:
                ops.append(Op.delete(path))
        ops.append(Op.delete(znodes.delete_topic_path(topic)))
        return ops

    async def _do_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> ShutdownResult:
        if not self.is_active:
            return ErrorCode.not_controller, []
        ctx = self.ctx
        if broker_id not in ctx.broker_epochs:
            log.info("controlled shutdown of broker %d refused: it is not registered", broker_id)
            return ErrorCode.broker_not_available, []
        if broker_epoch != UNKNOWN_BROKER_EPOCH and broker_epoch < ctx.broker_epochs[broker_id]:
            log.info("controlled shutdown of broker %d refused: broker epoch %d is older than %d", broker_id,
                     broker_epoch, ctx.broker_epochs[broker_id])
            return ErrorCode.stale_broker_epoch, []
        log.info("controlled shutdown of broker %d", broker_id)
        ctx.shutting_down.add(broker_id)
        to_act = [tp for tp in ctx.partitions_on_broker(broker_id)
                  if len(ctx.replicas(tp)) > 1 and tp in ctx.leadership and not ctx.is_queued_for_deletion(tp[0])]
        led = sorted(tp for tp in to_act if ctx.leadership[tp].leader == broker_id)
        followed = sorted(tp for tp in to_act if ctx.leadership[tp].leader != broker_id)
        reason = f"broker {broker_id} is shutting down"
        await self._elect_leaders(led, Strategy.CONTROLLED_SHUTDOWN, reason)
        await self._remove_replica_from_isrs(broker_id, followed, reason)
        remaining = ctx.partition_leaders_on_broker(broker_id)
        if remaining:
            log.info("controlled shutdown of broker %d: it still leads %s", broker_id, [_tp(tp) for tp in remaining])
        return ErrorCode.none, remaining

    # -- preferred leaders ------------------------------------------------------------------------------
    def _schedule_rebalance(self, delay_s: float) -> None:
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
        self._rebalance_timer = asyncio.get_running_loop().call_later(
            delay_s, self.queue.put, AutoPreferredReplicaLeaderElection())

    async def _process_auto_preferred_election(self) -> None:
        if not self.is_active:
            return
        try:
            await self._check_and_trigger_auto_leader_rebalance()
        finally:
            if self.is_active and self.config["auto.leader.rebalance.enable"]:
                self._schedule_rebalance(float(self.config["leader.imbalance.check.interval.seconds"]))

    async def _check_and_trigger_auto_leader_rebalance(self) -> None:
        ctx = self.ctx
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in ctx.all_partitions():
            if not ctx.is_queued_for_deletion(tp[0]) and ctx.replicas(tp):
                by_preferred.setdefault(ctx.replicas(tp)[0], []).append(tp)
        threshold = self.config["leader.imbalance.per.broker.percentage"] / 100
        for broker, tps in sorted(by_preferred.items()):
            not_led = [tp for tp in tps if tp in ctx.leadership and ctx.leadership[tp].leader != broker]
            ratio = len(not_led) / len(tps)
            if ratio <= threshold:
                continue
            if not ctx.is_replica_online(broker):
                continue
            # the leaders may have added the preferred replica back to the ISR since the
            # controller last read these states
            fresh = await self.store.read_states(not_led)
            candidates = []
            for tp, st in sorted(fresh.items()):
                if st is None:
                    continue
                ctx.leadership[tp] = st
                if st.leader != broker and election.preferred_leader(ctx.replicas(tp), st.isr,
                                                                     ctx.live_broker_ids()) is not None:
                    candidates.append(tp)
            if candidates:
                log.info("broker %d leads %d of the %d partitions it is the preferred replica of (imbalance %.0f%% "
                         "> %d%%): preferred replica election for %s", broker, len(tps) - len(not_led), len(tps),
                         ratio * 100, self.config["leader.imbalance.per.broker.percentage"],
                         [_tp(tp) for tp in candidates])
                await self._elect_leaders(candidates, Strategy.PREFERRED,
                                          f"preferred replica {broker} leads again")

    # -- tests and tools ---------------------------------------------------------------------------------
    def leaders(self) -> dict[TopicPartition, int]:
        """The leader of each partition as this controller knows it (empty when not active)."""
        return {tp: st.leader for tp, st in self.ctx.leadership.items()}

    async def trigger_preferred_replica_election(self) -> None:
        """Run the leader imbalance check now rather than at the next interval, and wait for it."""
        self.queue.put(AutoPreferredReplicaLeaderElection())
        await self.wait_idle()
