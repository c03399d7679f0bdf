"""The controller against a real ZooKeeper (cluster/controller/): election and failover, the
epoch fence, partition states of new topics, broker death and return, unclean election,
controlled shutdown, preferred leader rebalance, topic deletion, a controller taking over
half-done work. Brokers are sessions in this process (harness.py); assertions read ZooKeeper."""

from __future__ import annotations

import asyncio

from gregor.cluster.zk import admin as zk_admin
from gregor.cluster.zk import znodes
from gregor.cluster.zk.client import Op, ZkSession
from gregor.protocol.errors import ErrorCode
from tests.cluster.controller.harness import Cluster, GatedZkClient, TcpProxy, eventually, new_chroot, run


def test_one_controller_and_the_epoch_grows_at_each_failover(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            for b in (1, 2, 3):
                await c.add(b)
            first = await c.active()
            assert await c.controller_epoch() == 1 and first.controller.epoch == 1
            await c.kill(first.broker_id)
            second = await c.active()
            assert second.broker_id != first.broker_id
            assert await c.controller_epoch() == 2 and second.controller.epoch == 2
            await c.kill(second.broker_id)
            third = await c.active()
            assert await c.controller_epoch() == 3 and third.controller.epoch == 3
            # a controller that stops hands over at once (it deletes /controller)
            await c.add(first.broker_id)
            await third.controller.stop()
            fourth = await c.active()
            assert fourth.broker_id == first.broker_id and await c.controller_epoch() == 4
    run(scenario())


def test_a_deposed_controller_cannot_write(connect):
    """Broker 1 was elected, then stopped hearing from ZooKeeper's watches while broker 2 was
    elected with a higher epoch: 1 still believes it is the controller, and its writes fail."""
    async def scenario() -> None:
        async with Cluster(connect) as c:
            old = await c.add(1, zk_class=GatedZkClient)
            assert (await c.active()).broker_id == 1
            await c.add(2)
            await c.add(3)
            await c.create_topic("t", {0: [3, 2]})
            before = await c.wait_state("t", 0, leader=3, isr=[3, 2])
            assert isinstance(old.zk, GatedZkClient)
            old.zk.gated = True
            await c.admin.delete(znodes.CONTROLLER)
            new = await eventually(lambda: _new_controller(c), 20, "broker 2 or 3 elected")
            assert old.controller.is_active  # it has not noticed
            assert await c.controller_epoch() == 2
            code, remaining = await old.controller.controlled_shutdown(3, c.nodes[3].epoch)
            assert code == ErrorCode.not_controller and remaining == []
            assert not old.controller.is_active  # the failed write made it look and resign
            after = await c.state("t", 0)
            assert after == before and after.zk_version == before.zk_version
            # the real controller decides
            code, remaining = await new.controller.controlled_shutdown(3, c.nodes[3].epoch)
            assert (code, remaining) == (ErrorCode.none, [])
            moved = await c.wait_state("t", 0, leader=2, isr=[2])
            assert moved.controller_epoch == 2 and moved.leader_epoch == before.leader_epoch + 1
    run(scenario())


async def _new_controller(c: Cluster):
    cid = await c.controller_id()
    node = c.nodes.get(cid)
    return node if cid in (2, 3) and node.controller.is_active else None


def test_new_topic_states_first_live_replica_leads_live_replicas_in_isr(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            for b in (1, 2, 3):
                await c.add(b)
            await c.active()
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1], 2: [4, 1, 2], 3: [4, 5]})
            s0 = await c.wait_state("t", 0, leader=1, isr=[1, 2, 3])
            assert (s0.leader_epoch, s0.controller_epoch) == (0, 1)
            await c.wait_state("t", 1, leader=2, isr=[2, 3, 1])
            await c.wait_state("t", 2, leader=1, isr=[1, 2])  # broker 4 is not alive
            await c.settled()
            assert await c.state("t", 3) is None  # no replica alive: not initialised
            await c.add(5)
            s3 = await c.wait_state("t", 3, leader=5, isr=[5])
            assert s3.leader_epoch == 0
            # the nodes are Kafka's
            assert await c.admin.exists(znodes.partition_path("t", 3)) is not None
    run(scenario())


def test_added_partitions_are_initialised(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            for b in (1, 2):
                await c.add(b)
            await c.active()
            await c.create_topic("t", {0: [1, 2]})
            await c.wait_state("t", 0, leader=1)
            topic = await zk_admin.read_topic(c.admin, "t")
            await zk_admin.add_partitions(c.admin, "t", {**topic.assignment, 1: [2, 1], 2: [1, 2]}, topic.version)
            await c.wait_state("t", 1, leader=2, isr=[2, 1])
            await c.wait_state("t", 2, leader=1, isr=[1, 2])
    run(scenario())


def test_broker_death_moves_leadership_within_the_isr_and_keeps_the_last_member(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            await c.add(9)  # the controller, holding no replicas
            await c.active()
            for b in (1, 2, 3):
                await c.add(b, controller=False)
            await c.create_topic("t", {0: [1, 2, 3], 1: [2, 1]})
            await c.wait_state("t", 0, leader=1, isr=[1, 2, 3])
            await c.wait_state("t", 1, leader=2, isr=[2, 1])
            await c.kill(1)
            s0 = await c.wait_state("t", 0, leader=2, isr=[2, 3])
            assert (s0.leader_epoch, s0.controller_epoch) == (1, 1)
            s1 = await c.wait_state("t", 1, leader=2, isr=[2])  # a follower leaves the ISR too
            assert s1.leader_epoch == 1
            await c.kill(2)
            await c.wait_state("t", 0, leader=3, isr=[3])
            # partition 1's last ISR member dies: no leader, and the ISR keeps it (it has every record)
            s1 = await c.wait_state("t", 1, leader=znodes.NO_LEADER, isr=[2])
            assert s1.leader_epoch == 2
            await c.kill(3)
            s0 = await c.wait_state("t", 0, leader=znodes.NO_LEADER, isr=[3])
            assert s0.leader_epoch == 3
    run(scenario())


def test_returning_broker_leads_its_offline_partition_again(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            await c.add(1)
            await c.add(2, controller=False)
            await c.active()
            await c.create_topic("t", {0: [2]})
            s = await c.wait_state("t", 0, leader=2, isr=[2])
            await c.kill(2)
            offline = await c.wait_state("t", 0, leader=znodes.NO_LEADER, isr=[2])
            assert offline.leader_epoch == s.leader_epoch + 1
            await c.add(2, controller=False)
            back = await c.wait_state("t", 0, leader=2, isr=[2])
            assert back.leader_epoch == offline.leader_epoch + 1
    run(scenario())


def test_unclean_election_follows_topic_config_over_broker_default(connect):
    """Partitions whose ISR is only a dead broker: a live replica outside the ISR leads only
    where unclean.leader.election.enable is true (topic config, else broker default)."""
    async def scenario() -> None:
        async with Cluster(connect) as c:
            await c.add(9)  # the controller, holding no replicas
            await c.active()
            await c.add(1, controller=False)
            await c.add(2, controller=False)
            await c.create_topic("clean", {0: [1, 2]})
            await c.create_topic("unclean", {0: [1, 2]}, {"unclean.leader.election.enable": "true"})
            for t in ("clean", "unclean"):
                await c.wait_state(t, 0, leader=1, isr=[1, 2])
            await c.kill(2)
            for t in ("clean", "unclean"):
                await c.wait_state(t, 0, leader=1, isr=[1])
            await c.kill(1)
            for t in ("clean", "unclean"):
                await c.wait_state(t, 0, leader=znodes.NO_LEADER, isr=[1])
            await c.add(2, controller=False)  # alive again, but not in the ISR
            unclean = await c.wait_state("unclean", 0, leader=2, isr=[2])
            await c.settled()
            assert (await c.state("clean", 0)).leader == znodes.NO_LEADER
            # enabling it on the topic later elects at once
            await zk_admin.set_topic_config(c.admin, "clean", {"unclean.leader.election.enable": "true"})
            await c.wait_state("clean", 0, leader=2, isr=[2])
            assert unclean.controller_epoch == 1
    run(scenario())


def test_unclean_election_from_the_broker_default(connect):
    async def scenario() -> None:
        async with Cluster(connect, {"unclean.leader.election.enable": "true"}) as c:
            await c.add(9)
            await c.active()
            await c.add(1, controller=False)
            await c.add(2, controller=False)
            await c.create_topic("t", {0: [1, 2]})
            await c.create_topic("off", {0: [1, 2]}, {"unclean.leader.election.enable": "false"})
            await c.kill(2)
            await c.wait_state("t", 0, leader=1, isr=[1])
            await c.kill(1)
            await c.add(2, controller=False)
            await c.wait_state("t", 0, leader=2, isr=[2])
            await c.settled()
            assert (await c.state("off", 0)).leader == znodes.NO_LEADER
    run(scenario())


def test_controlled_shutdown_moves_what_it_can(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            await c.add(9)
            ctl = (await c.active()).controller
            for b in (1, 2, 3):
                await c.add(b, controller=False)
            await c.create_topic("led", {0: [1, 2, 3], 1: [1, 3]})
            await c.create_topic("followed", {0: [2, 1, 3]})
            await c.create_topic("single", {0: [1]})
            await c.create_topic("alone", {0: [1, 2]})
            await c.wait_state("led", 0, leader=1)
            await c.wait_state("led", 1, leader=1)
            await c.wait_state("followed", 0, leader=2)
            await c.wait_state("single", 0, leader=1)
            alone = await c.wait_state("alone", 0, leader=1, isr=[1, 2])
            # the leader of alone-0 shrank its ISR: 2 is not caught up
            await c.admin.set(znodes.state_path("alone", 0), alone.with_isr([1]).encode(), alone.zk_version)
            assert await ctl.controlled_shutdown(1, c.nodes[1].epoch - 1) == (ErrorCode.stale_broker_epoch, [])
            assert await ctl.controlled_shutdown(7, 0) == (ErrorCode.broker_not_available, [])
            code, remaining = await ctl.controlled_shutdown(1, c.nodes[1].epoch)
            # a single replica cannot move and is not reported (as Kafka); alone-0 has no other ISR member
            assert (code, remaining) == (ErrorCode.none, [("alone", 0)])
            l0, l1, f0 = await c.state("led", 0), await c.state("led", 1), await c.state("followed", 0)
            assert (l0.leader, l0.isr, l0.leader_epoch) == (2, [2, 3], 1)
            assert (l1.leader, l1.isr) == (3, [3])
            assert (f0.leader, f0.isr, f0.leader_epoch) == (2, [2, 3], 1)
            assert (await c.state("single", 0)).leader == 1
            assert (await c.state("alone", 0)).isr == [1]
            # not elected again while it shuts down, even where it is the first live ISR member
            await c.kill(2)
            await c.wait_state("followed", 0, leader=3, isr=[3])
            assert (await c.state("led", 0)).leader == 3
            # and the request elsewhere than the controller
            other = await c.add(4)
            assert await other.controller.controlled_shutdown(1, c.nodes[1].epoch) == (ErrorCode.not_controller, [])
    run(scenario())


def test_preferred_replicas_lead_again(connect):
    async def scenario() -> None:
        settings = {"auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": "1",
                    "leader.imbalance.per.broker.percentage": "10"}
        async with Cluster(connect) as c:
            await c.add(9, settings=settings, rebalance_first_delay_s=0.2)
            await c.active()
            await c.add(1, controller=False)
            await c.add(2, controller=False)
            await c.create_topic("t", {0: [1, 2], 1: [2, 1]})
            await c.wait_state("t", 0, leader=1, isr=[1, 2])
            await c.kill(1)
            s = await c.wait_state("t", 0, leader=2, isr=[2])
            await c.add(1, controller=False)
            await asyncio.sleep(1.5)
            # back, but not in the ISR: the leader has not let it catch up
            assert (await c.state("t", 0)).leader == 2
            # the leader (2) adds it back to the ISR itself
            await c.admin.set(znodes.state_path("t", 0), s.with_isr([2, 1]).encode(), s.zk_version)
            back = await c.wait_state("t", 0, leader=1, isr=[2, 1], timeout=10)
            assert back.leader_epoch == s.leader_epoch + 1
            assert (await c.state("t", 1)).leader == 2
    run(scenario())


def test_preferred_replica_election_waits_below_the_imbalance_threshold(connect):
    """Broker 1 is the preferred replica of three partitions and leads two of them: 33% of its
    partitions are not led by it, not above leader.imbalance.per.broker.percentage=50."""
    async def scenario() -> None:
        settings = {"auto.leader.rebalance.enable": "true", "leader.imbalance.per.broker.percentage": "50"}
        async with Cluster(connect) as c:
            ctl = (await c.add(9, settings=settings, rebalance_first_delay_s=60)).controller
            await c.active()
            await c.add(1, controller=False)
            await c.add(2, controller=False)
            await c.create_topic("t", {0: [1, 2], 1: [1, 2], 2: [1, 2]})
            for p in (1, 2):  # their leader (1) shrank their ISRs: 2 fell behind
                s = await c.wait_state("t", p, leader=1, isr=[1, 2])
                await c.admin.set(znodes.state_path("t", p), s.with_isr([1]).encode(), s.zk_version)
            await c.wait_state("t", 0, leader=1, isr=[1, 2])
            await c.kill(1)
            s0 = await c.wait_state("t", 0, leader=2, isr=[2])
            await c.wait_state("t", 1, leader=znodes.NO_LEADER, isr=[1])
            await c.add(1, controller=False)
            await c.wait_state("t", 1, leader=1, isr=[1])
            await c.wait_state("t", 2, leader=1, isr=[1])
            await c.admin.set(znodes.state_path("t", 0), s0.with_isr([2, 1]).encode(), s0.zk_version)
            await ctl.trigger_preferred_replica_election()
            assert (await c.state("t", 0)).leader == 2
    run(scenario())


def test_topic_deletion_removes_its_nodes(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            await c.add(1)
            await c.add(2)
            await c.active()
            await c.create_topic("t", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"})
            await c.create_topic("kept", {0: [1]})
            await c.wait_state("t", 1, leader=2)
            await zk_admin.request_delete(c.admin, "t")
            await zk_admin.request_delete(c.admin, "t")  # twice is fine
            await eventually(lambda: _gone(c, znodes.topic_path("t"), znodes.topic_config_path("t"),
                                           znodes.delete_topic_path("t")), 20, "topic t deleted")
            assert await c.admin.get_children(znodes.BROKERS_TOPICS) == ["kept"]
            # a request for a topic that does not exist is dropped
            await c.admin.create(znodes.delete_topic_path("ghost"))
            await eventually(lambda: _gone(c, znodes.delete_topic_path("ghost")), 20, "request dropped")
            # the name can be used again
            await c.create_topic("t", {0: [2]})
            s = await c.wait_state("t", 0, leader=2, isr=[2])
            assert s.leader_epoch == 0
    run(scenario())


def test_deletion_requests_are_dropped_when_deletion_is_disabled(connect):
    async def scenario() -> None:
        async with Cluster(connect, {"delete.topic.enable": "false"}) as c:
            await c.add(1)
            await c.active()
            await c.create_topic("t", {0: [1]})
            await c.wait_state("t", 0, leader=1)
            await zk_admin.request_delete(c.admin, "t")
            await eventually(lambda: _gone(c, znodes.delete_topic_path("t")), 20, "request dropped")
            assert await c.state("t", 0) is not None
    run(scenario())


async def _gone(c: Cluster, *paths: str) -> bool | None:
    for p in paths:
        if await c.admin.exists(p) is not None:
            return None
    return True


def test_a_new_controller_finishes_what_the_last_one_left(connect):
    """Topics created while there was no controller, a partition initialised and its sibling
    not (the controller died in between), a deletion requested: the next controller does the
    rest."""
    async def scenario() -> None:
        async with Cluster(connect) as c:
            await c.add(1, controller=False)
            await c.add(2, controller=False)
            await c.create_topic("t", {0: [1, 2], 1: [2, 1]})
            await c.create_topic("half", {0: [1, 2], 1: [2, 1]})
            await c.create_topic("doomed", {0: [1]})
            # "half": partition 0 was initialised by a controller of epoch 0, 1 was not
            await c.admin.ensure_path(znodes.partition_path("half", 0))
            await c.admin.create(znodes.state_path("half", 0), znodes.PartitionState(2, 0, [2, 1], 0).encode())
            await c.admin.create(znodes.delete_topic_path("doomed"))
            await c.add(3)
            await c.active()
            await c.wait_state("t", 0, leader=1, isr=[1, 2])
            await c.wait_state("t", 1, leader=2, isr=[2, 1])
            await c.wait_state("half", 1, leader=2, isr=[2, 1])
            kept = await c.state("half", 0)
            assert (kept.leader, kept.leader_epoch, kept.controller_epoch) == (2, 0, 0)  # left as it was
            await eventually(lambda: _gone(c, znodes.topic_path("doomed")), 20, "doomed deleted")
    run(scenario())


def test_a_broker_dying_while_there_is_no_controller_leaves_the_isrs(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            await c.add(1)
            await c.active()
            await c.add(2, controller=False)
            await c.add(3, controller=False)
            await c.create_topic("t", {0: [2, 3], 1: [3, 2]})
            await c.wait_state("t", 0, leader=2, isr=[2, 3])
            await c.kill(1)  # no controller now
            await c.kill(2)
            await c.settled()
            assert (await c.state("t", 0)).leader == 2  # nobody decided yet
            await c.add(4)
            await c.wait_state("t", 0, leader=3, isr=[3])
            await c.wait_state("t", 1, leader=3, isr=[3])
    run(scenario())


def test_a_leader_that_restarted_while_there_was_no_controller_gets_a_new_epoch(connect):
    """Issue 23, defect 0: a broker restarted while no controller watched still finds itself leader
    in ZooKeeper, at an epoch written for its previous registration. Its replica manager acts on a
    leadership only when the controller wrote it after the broker registered, so the next
    controller handles the restart as Kafka handles a bounced broker: leadership moves to another
    ISR member, or (the only replica) goes offline and comes back at a new epoch, both written after
    the new registration."""
    async def scenario() -> None:
        async with Cluster(connect) as c:
            await c.add(1)
            await c.active()
            await c.add(2, controller=False)
            await c.add(3, controller=False)
            await c.create_topic("t", {0: [2, 3]})
            await c.create_topic("u", {0: [2]})
            t0 = await c.wait_state("t", 0, leader=2, isr=[2, 3])
            u0 = await c.wait_state("u", 0, leader=2, isr=[2])
            await c.kill(1)  # no controller now
            restarted = await c.restart(2, controller=False)
            await c.settled()
            assert (await c.state("t", 0)).leader_epoch == t0.leader_epoch  # nobody decided yet
            await c.add(4)
            t1 = await c.wait_state("t", 0, leader=3, isr=[3])
            assert t1.leader_epoch > t0.leader_epoch
            await eventually(lambda: _epoch_at_least(c, "u", u0.leader_epoch + 2), 20,
                             "u-0 offline (-1), then led again")
            u1 = await c.wait_state("u", 0, leader=2, isr=[2])
            assert u1.leader_epoch >= u0.leader_epoch + 2
            got = await c.admin.get(znodes.state_path("u", 0))
            assert got is not None and got[1].mzxid > restarted.epoch  # written for the new registration
    run(scenario())


def test_session_expiry_makes_the_controller_resign_and_register_again(connect):
    async def scenario() -> None:
        async with Cluster(connect) as c:
            first = await c.add(1)
            await c.active()
            await c.add(2)
            epoch_before = first.epoch
            await c.create_topic("t", {0: [1, 2]})
            await c.wait_state("t", 0, leader=1, isr=[1, 2])
            await c.expire(1)
            # the registration is made again in a new session: a new broker epoch
            await eventually(lambda: _reregistered(first, epoch_before), 20, "broker 1 registered again")
            assert (await c.admin.exists(znodes.broker_path(1))).ephemeralOwner == first.zk.session_id
            # it resigned: whoever won the new election (broker 1 again, or 2) has epoch 2
            ctl = await c.active()
            assert await c.controller_epoch() == 2 and ctl.controller.epoch == 2
    run(scenario())


async def _reregistered(node, before: int) -> bool | None:
    return True if node.epoch > before and node.epoch != -1 else None


def test_every_controller_write_carries_the_epoch_check(connect):
    """A state written by a controller is conditional on /controller_epoch: bumping the epoch
    behind the controller's back makes its next write fail and the controller resign."""
    async def scenario() -> None:
        async with Cluster(connect) as c:
            node = await c.add(1, zk_class=GatedZkClient)
            await c.active()
            await c.add(2, controller=False)
            await c.create_topic("t", {0: [2, 1]})
            before = await c.wait_state("t", 0, leader=2, isr=[2, 1])
            node.zk.gated = True
            got = await c.admin.get(znodes.CONTROLLER_EPOCH)
            await c.admin.multi([Op.set(znodes.CONTROLLER_EPOCH, b"7", got[1].version)])
            code, _ = await node.controller.controlled_shutdown(2, c.nodes[2].epoch)
            assert code == ErrorCode.not_controller
            assert await c.state("t", 0) == before
    run(scenario())


def test_a_connection_loss_within_the_session_changes_nothing(zookeeper):
    """The controller's connection to ZooKeeper drops for less than the session timeout: it
    stays the controller, and acts on what happened meanwhile once the connection is back."""
    async def scenario() -> None:
        proxy = TcpProxy("127.0.0.1", zookeeper.port)
        port = await proxy.start()
        chroot = new_chroot()
        try:
            async with Cluster(zookeeper.connect_string(chroot)) as c:
                c.connect = f"127.0.0.1:{port}{chroot}"  # broker 9 reaches ZooKeeper through the proxy
                ctl = await c.add(9)
                c.connect = zookeeper.connect_string(chroot)
                await c.active()
                states: list[ZkSession] = []
                ctl.zk.add_session_listener(states.append)
                await c.add(1, controller=False)
                await c.add(2, controller=False)
                await c.create_topic("t", {0: [1, 2]})
                await c.wait_state("t", 0, leader=1, isr=[1, 2])
                proxy.cut()
                await eventually(lambda: _seen(states, ZkSession.SUSPENDED), 10, "connection loss noticed")
                await c.kill(1)  # while the controller cannot hear of it
                await asyncio.sleep(0.5)
                assert (await c.state("t", 0)).leader == 1
                proxy.restore()
                s = await c.wait_state("t", 0, leader=2, isr=[2])
                assert s.controller_epoch == 1 and await c.controller_epoch() == 1
                assert ZkSession.EXPIRED not in states and ctl.controller.is_active
        finally:
            await proxy.stop()
    run(scenario())


async def _seen(states: list, state) -> bool | None:
    return True if state in states else None


async def _epoch_at_least(c, topic: str, epoch: int):
    st = await c.state(topic, 0)
    return st if st is not None and st.leader_epoch >= epoch else None
