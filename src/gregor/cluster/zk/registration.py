"""A broker's membership in the cluster: the ZooKeeper side of its start-up, as KafkaServer and
KafkaZkClient do it.

``BrokerRegistrar.start``:
1. creates the persistent paths every Kafka broker creates (``znodes.PERSISTENT_PATHS``);
2. reads ``/cluster/id``, or creates it (the first broker of a cluster does) with the cluster id of
   this broker's ``meta.properties`` if it has one; a broker whose ``meta.properties`` names another
   cluster refuses to start (Kafka's InconsistentClusterIdException): its data belongs elsewhere,
   or ``zookeeper.connect`` points at the wrong ensemble or chroot;
3. registers the ephemeral ``/brokers/ids/<id>``. If the node exists:
   - owned by this session: already registered (nothing to do);
   - with this broker's own endpoint: the registration of this broker's previous run, whose
     session ZooKeeper has not expired yet (the process was killed): wait for it to go (at most
     twice the session timeout), then register;
   - otherwise another live broker has this id: refuse to start, naming it.

The broker epoch is the registration node's czxid (KIP-380): it grows with each registration, so
the controller can tell a request of this registration from one of an earlier one. After a
session expiry the registration is made again in the new session (ZooKeeper deleted the node
with the old session) and the listeners hear of the new epoch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gregor.cluster.meta_properties import random_cluster_id
from gregor.cluster.zk import znodes
from gregor.cluster.zk.client import (
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    Op,
    SessionExpiredError,
    ZkClient,
    ZkSession,
    ZnodeStat,
)

log = logging.getLogger(__name__)


class InconsistentClusterId(RuntimeError):
    """meta.properties and ZooKeeper name different clusters."""


class BrokerIdInUse(RuntimeError):
    """Another live broker is registered with this broker's id."""


class BrokerRegistrar:
    def __init__(self, zk: ZkClient, registration: znodes.BrokerRegistration,
                 previous_session_wait_s: float | None = None) -> None:
        self.zk = zk
        self.registration = registration
        self.broker_id = registration.broker_id
        self.path = znodes.broker_path(registration.broker_id)
        # how long a registration of this broker's previous run may take to disappear
        self.previous_session_wait_s = (previous_session_wait_s if previous_session_wait_s is not None
                                        else 2 * zk.session_timeout_ms / 1000 + 1)
        self.broker_epoch = -1  # czxid of the registration node; -1 while not registered
        self.cluster_id: str | None = None
        self._session_id: int | None = None  # the session that made the registration
        self._listeners: list[Callable[[int], None]] = []
        self._expired = False
        self._stopped = False
        self._reregistering: asyncio.Task[None] | None = None

    def add_listener(self, fn: Callable[[int], None]) -> None:
        """``fn(broker_epoch)`` after each registration (the first and those after an expiry),
        and ``fn(-1)`` when the registration is lost with an expired session."""
        self._listeners.append(fn)

    async def start(self, stored_cluster_id: str | None) -> str:
        """Persistent paths, cluster id, registration. ``stored_cluster_id``: the cluster id in this
        broker's meta.properties (None for a new data directory). Returns the cluster's id, which
        the caller keeps in meta.properties. Raises InconsistentClusterId or BrokerIdInUse."""
        for path in znodes.PERSISTENT_PATHS:
            await self.zk.ensure_path(path)
        self.cluster_id = await self._cluster_id(stored_cluster_id)
        await self.register()
        self.zk.add_session_listener(self._on_session)
        return self.cluster_id

    async def stop(self) -> None:
        """Stop re-registering after expiries. The node itself goes with the session (closing
        the ZkClient), as a Kafka broker's does."""
        self._stopped = True
        if self._reregistering is not None:
            self._reregistering.cancel()

    async def _cluster_id(self, stored: str | None) -> str:
        got = await self.zk.get(znodes.CLUSTER_ID)
        if got is None:
            proposed = stored or random_cluster_id()
            try:
                await self.zk.create(znodes.CLUSTER_ID, znodes.encode_cluster_id(proposed), makepath=True)
                log.info("created cluster id %s in ZooKeeper (%s)", proposed, znodes.CLUSTER_ID)
                return proposed
            except NodeExistsError:  # another broker was first
                got = await self.zk.get(znodes.CLUSTER_ID)
                if got is None:
                    raise RuntimeError(f"{znodes.CLUSTER_ID} was deleted while this broker started") from None
        cluster_id = znodes.decode_cluster_id(got[0])
        if stored is not None and stored != cluster_id:
            raise InconsistentClusterId(
                f"the cluster id {cluster_id} in ZooKeeper ({self.zk.connect}) does not match the cluster id "
                f"{stored} in meta.properties: this broker's data belongs to another cluster, or "
                "zookeeper.connect points at the wrong ensemble or chroot")
        return cluster_id

    async def register(self) -> int:
        """Create ``/brokers/ids/<id>`` (see the module docstring); returns the broker epoch."""
        data = self.registration.encode()
        deadline = time.monotonic() + self.previous_session_wait_s
        waited = False
        while True:
            try:
                # created empty, then set: the set's stat carries the czxid (Kafka's checked create)
                results = await self.zk.multi([Op.create(self.path, b"", ephemeral=True), Op.set(self.path, data, 0)])
                stat = results[1]
                break
            except NodeExistsError:
                pass
            except (ConnectionLoss, SessionExpiredError):
                # applied or not: the next attempt finds this session's node, or creates it
                await asyncio.sleep(0.2)
                continue
            existing = await self._existing()
            if existing is None:  # went away meanwhile
                continue
            owner_stat, other = existing
            if owner_stat.ephemeralOwner == self.zk.session_id:
                stat = owner_stat  # this session's own registration
                break
            if self._session_id is not None and owner_stat.ephemeralOwner == self._session_id:
                # our expired session's node that ZooKeeper kept (ZOOKEEPER-2985): replace it
                log.info("replacing broker %d's registration left by its expired session", self.broker_id)
                try:
                    await self.zk.delete(self.path)
                except NoNodeError:
                    pass
                continue
            same_endpoint = other is not None and (other.host, other.port) == (self.registration.host,
                                                                             self.registration.port)
            where = f"{other.host}:{other.port}" if other is not None else "an unreadable address"
            if not same_endpoint:
                raise BrokerIdInUse(f"broker.id {self.broker_id} is registered by another live broker at {where}")
            if time.monotonic() >= deadline:
                raise BrokerIdInUse(
                    f"broker.id {self.broker_id} is still registered at {where} (this broker's endpoint) by "
                    f"another ZooKeeper session after {self.previous_session_wait_s:.0f} s: another broker "
                    "with this id and address is running")
            if not waited:
                log.info("broker %d's registration from its previous run (session 0x%x) is still in ZooKeeper; "
                         "waiting for that session to expire", self.broker_id, owner_stat.ephemeralOwner)
                waited = True
            await asyncio.sleep(0.2)
        self._session_id = self.zk.session_id
        self.broker_epoch = stat.czxid
        log.info("registered broker %d at %s with endpoint %s:%d%s, broker epoch %d", self.broker_id, self.path,
                 self.registration.host, self.registration.port,
                 f", rack {self.registration.rack}" if self.registration.rack else "", self.broker_epoch)
        self._tell(self.broker_epoch)
        return self.broker_epoch

    def _tell(self, broker_epoch: int) -> None:
        for fn in list(self._listeners):
            try:
                fn(broker_epoch)
            except Exception:
                log.exception("broker registration listener failed")

    async def _existing(self) -> tuple[ZnodeStat, znodes.BrokerRegistration | None] | None:
        got = await self.zk.get(self.path)
        if got is None:
            return None
        data, stat = got
        try:
            return stat, znodes.BrokerRegistration.decode(self.broker_id, data)
        except znodes.ZnodeFormatError:
            return stat, None

    def _on_session(self, state: ZkSession) -> None:
        if self._stopped:
            return
        if state is ZkSession.EXPIRED:
            self._expired = True
            self.broker_epoch = -1
            self._tell(-1)
        elif state is ZkSession.CONNECTED and self._expired:
            self._expired = False
            if self._reregistering is None or self._reregistering.done():
                self._reregistering = asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        delay = 0.1
        while not self._stopped and not self._expired:
            try:
                await self.register()
                return
            except BrokerIdInUse as e:
                log.error("cannot register again after the session expired: %s", e)
                return
            except Exception as e:  # noqa: BLE001 - connection trouble: try again
                log.warning("registering broker %d again failed (%s); retrying", self.broker_id, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
