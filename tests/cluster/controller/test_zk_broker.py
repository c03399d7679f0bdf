"""A broker joining the cluster (cluster/zk_broker.py): persistent paths, the cluster id against
meta.properties, the registration and its epoch, a duplicate broker id, the registration of the
broker's own previous run, re-registration after a session expiry."""

from __future__ import annotations

import asyncio
import json

import pytest

from gregor.cluster.zk import znodes
from gregor.cluster.zk.client import ConnectionLoss, ZkClient
from gregor.cluster.zk.registration import BrokerIdInUse, BrokerRegistrar, InconsistentClusterId
from tests.cluster.controller.harness import SESSION_MS, Cluster, eventually, run


async def session(connect: str) -> ZkClient:
    zk = ZkClient(connect, SESSION_MS)
    await zk.start()
    return zk


def registration(broker_id: int, port: int, rack: str | None = None) -> znodes.BrokerRegistration:
    return znodes.BrokerRegistration(broker_id, "127.0.0.1", port, rack)


def test_cluster_id_is_created_once_and_checked(connect):
    async def scenario() -> None:
        a, b, c = [await session(connect) for _ in range(3)]
        try:
            assert await BrokerRegistrar(a, registration(1, 9001)).start("Cluster-From-Meta") == "Cluster-From-Meta"
            for path in znodes.PERSISTENT_PATHS:
                assert await a.exists(path) is not None
            assert await BrokerRegistrar(b, registration(2, 9002)).start(None) == "Cluster-From-Meta"
            with pytest.raises(InconsistentClusterId, match="Other-Cluster in meta.properties"):
                await BrokerRegistrar(c, registration(3, 9003)).start("Other-Cluster")
            assert await c.exists(znodes.broker_path(3)) is None
        finally:
            for zk in (a, b, c):
                await zk.stop()
    run(scenario())


def test_registration_is_kafkas_and_its_epoch_is_the_czxid(connect):
    async def scenario() -> None:
        zk = await session(connect)
        try:
            reg = BrokerRegistrar(zk, registration(4, 9004, "rack-1"))
            await reg.start(None)
            data, stat = await zk.get(znodes.broker_path(4))
            obj = json.loads(data)
            assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9004"] and obj["rack"] == "rack-1"
            assert stat.ephemeralOwner == zk.session_id and reg.broker_epoch == stat.czxid > 0
            assert await reg.register() == reg.broker_epoch  # registering again in the session: a no-op
        finally:
            await zk.stop()
    run(scenario())


def test_an_id_registered_by_another_live_broker_is_refused(connect):
    async def scenario() -> None:
        a, b = await session(connect), await session(connect)
        try:
            await BrokerRegistrar(a, registration(2, 9002)).start(None)
            with pytest.raises(BrokerIdInUse, match="broker.id 2 is registered by another live broker at "
                                                    "127.0.0.1:9002"):
                await BrokerRegistrar(b, registration(2, 9102)).start(None)
        finally:
            await a.stop()
            await b.stop()
    run(scenario())


def test_the_previous_run_of_this_broker_is_waited_for(connect):
    """Same id and endpoint in another session: this broker's previous run, whose session is not
    expired yet. The new run waits for it (here, it closes after half a second)."""
    async def scenario() -> None:
        old, new = await session(connect), await session(connect)
        try:
            await BrokerRegistrar(old, registration(5, 9005)).start(None)
            registrar = BrokerRegistrar(new, registration(5, 9005), previous_session_wait_s=20)
            starting = asyncio.get_running_loop().create_task(registrar.start(None))
            await asyncio.sleep(0.5)
            assert not starting.done()
            await old.stop()
            await asyncio.wait_for(starting, 10)
            assert (await new.exists(znodes.broker_path(5))).ephemeralOwner == new.session_id
            # and if it never goes, another broker with this id and address is running
            stuck = await session(connect)
            with pytest.raises(BrokerIdInUse, match="still registered"):
                await BrokerRegistrar(stuck, registration(5, 9005), previous_session_wait_s=0.5).start(None)
            await stuck.stop()
        finally:
            await old.stop()
            await new.stop()
    run(scenario())


def test_registration_comes_back_after_a_session_expiry(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            node = await c.add(6, controller=False)
            first_epoch = node.epoch
            epochs: list[int] = []
            node.registrar.add_listener(epochs.append)
            await c.expire(6)
            await eventually(lambda: _registered_again(c, node, first_epoch), 20, "registered again")
            # the registration lost with the session (-1), then the new one
            assert epochs == [-1, node.epoch] and node.epoch > first_epoch
    run(scenario())


async def _registered_again(c, node, first_epoch: int):
    stat = await c.admin.exists(znodes.broker_path(6))
    if stat is not None and stat.czxid > first_epoch and node.epoch == stat.czxid:
        return True
    return None


class LosingZkClient(ZkClient):
    """A session whose first ``losses`` multi-ops fail with ConnectionLoss after being applied (the
    answer is lost with the connection), as when ZooKeeper goes away in the middle of a start-up."""

    losses = 1

    async def multi(self, ops):  # type: ignore[override]
        results = await super().multi(ops)
        if self.losses > 0:
            self.losses -= 1
            raise ConnectionLoss()
        return results


def test_a_registration_whose_answer_is_lost_is_made_once(connect):
    """The registration's multi-op is applied but its answer is lost: the registrar asks again,
    finds its own session's node, and carries on (before, the ConnectionLoss ended the broker's
    start-up with exit code 1; the fault campaign met it with ZooKeeper restarting)."""
    async def scenario() -> None:
        zk = LosingZkClient(connect, SESSION_MS)
        await zk.start()
        try:
            reg = BrokerRegistrar(zk, registration(7, 9007))
            await asyncio.wait_for(reg.start(None), 20)
            stat = await zk.exists(znodes.broker_path(7))
            assert stat is not None and stat.ephemeralOwner == zk.session_id and reg.broker_epoch == stat.czxid
        finally:
            await zk.stop()
    run(scenario())
