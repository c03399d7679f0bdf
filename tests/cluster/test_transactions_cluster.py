"""Transactions on three brokers (ZooKeeper cluster): ``__transaction_state`` replicated like
``__consumer_offsets``, markers written by other brokers through WriteTxnMarkers, and the
exactly-once processor of tests/integration/test_exactly_once.py SIGKILLed while the broker
coordinating its transactions and the leader of an output partition are SIGKILLed too."""

from __future__ import annotations

from confluent_kafka import Producer

from gregor.protocol.transaction_log import TRANSACTION_STATE_TOPIC, partition_for
from tests.support.exactly_once import read_output, run_with_kills
from tests.support.group_checks import start_cluster
from tests.support.group_load import leader_of, wait_full_isr
from tests.support.replication import create_topic
from tests.support.waiting import wait_for

TXN_PARTITIONS = 5
TXN_OVERRIDES = {"transaction.state.log.num.partitions": str(TXN_PARTITIONS),
                 "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2"}


def test_transactions_across_brokers_commit_and_abort(cluster_factory):
    cluster = start_cluster(cluster_factory, **TXN_OVERRIDES)
    create_topic(cluster.bootstrap, "spread", 3, 3, {"min.insync.replicas": "2"})
    wait_full_isr(cluster, "spread", 3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "spread-1", "linger.ms": 5})
    p.init_transactions(60)
    wait_full_isr(cluster, TRANSACTION_STATE_TOPIC, TXN_PARTITIONS)
    for t in range(6):
        p.begin_transaction()
        for i in range(30):
            p.produce("spread", f"{t}:{i}".encode(), partition=i % 3)  # partitions led by every broker
        assert p.flush(30) == 0
        if t % 2:
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
    got = sorted(read_output(cluster.bootstrap, "spread"))
    assert got == sorted(f"{t}:{i}" for t in (0, 2, 4) for i in range(30))


def test_exactly_once_through_coordinator_and_leader_sigkills(cluster_factory, tmp_path):
    cluster = start_cluster(cluster_factory, **TXN_OVERRIDES)
    coordinator_partition = partition_for("eos-1", TXN_PARTITIONS)
    killed: list[int] = []

    def fault(i: int) -> None:
        """After the processor's 1st kill: SIGKILL the broker coordinating its transactions; after
        the 2nd: the leader of output partition 0; each is restarted after the next kill."""
        for b in killed:
            cluster.restart(b, timeout=60)
        killed.clear()
        if i == 0:
            victim = leader_of(cluster, TRANSACTION_STATE_TOPIC, coordinator_partition)
        elif i == 1:
            victim = leader_of(cluster, "out", 0)
        else:
            return
        if victim >= 0:
            cluster.kill(victim)
            killed.append(victim)
            wait_for(lambda: leader_of(cluster, "out", 0) not in (victim, -1)
                     and leader_of(cluster, TRANSACTION_STATE_TOPIC, coordinator_partition) not in (victim, -1),
                     30, f"leaders other than broker {victim}")

    # the input and output topics are created by run_with_kills with 3 replicas
    run_with_kills(cluster.bootstrap, tmp_path, kills=4, fault=fault, seed=7)
