"""``gregor transactions`` (admin/transactions_cli.py) against ``gregor serve``: committed, aborted
and open transactions of confluent-kafka producers listed and described, producers described, a
killed producer's transaction aborted by hand, and a hanging transaction (a transactional batch
whose producer id the coordinator never saw) found and aborted, read_committed readers moving
past it."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from gregor.admin.wire_client import WireClient
from gregor.cli import main
from gregor.protocol import record_batch as rb
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch

NODE_ID = 3


def gregor(bootstrap: str, *args: str) -> tuple[int, str, str]:
    """``gregor transactions --bootstrap-server B ARGS``: (exit code, stdout, stderr). Run in this
    process (the command line's ``main``): a Python process takes seconds to start on a busy
    machine, and the tool keeps no state between runs."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["transactions", "--bootstrap-server", bootstrap, *args])
        except SystemExit as e:  # argparse's refusals
            rc = int(e.code or 0)
    return rc, out.getvalue(), err.getvalue()


def gjson(bootstrap: str, *args: str):
    rc, out, err = gregor(bootstrap, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def table(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    r = subprocess.run([sys.executable, "-m", "gregor", "topics", "--bootstrap-server", bootstrap, "create", name,
                        "--partitions", str(partitions)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def txn_producer(bootstrap: str, tid: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0,
                  "transaction.timeout.ms": 600000})
    p.init_transactions(30)
    return p


def lso(bootstrap: str, topic: str, partition: int) -> int:
    """ListOffsets latest for a read_committed consumer: the last stable offset."""
    w = WireClient(bootstrap)
    try:
        r = w.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": -1}]}]})
    finally:
        w.close()
    (p,) = r.topics[0].partitions
    assert p.error_code == ErrorCode.none
    return p.offset


def read_committed(bootstrap: str, topic: str, partition: int, expected: int, timeout: float = 20) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            out.append(m.value())
    finally:
        c.close()
    return out


HANGING_PRODUCER = """
import sys, time
from confluent_kafka import Producer
bootstrap, tid, topic, partition = sys.argv[1:]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0,
              "transaction.timeout.ms": 600000})
p.init_transactions(30)
p.begin_transaction()
p.produce(topic, b"open", partition=int(partition))
assert p.flush(10) == 0
print("ready", flush=True)
time.sleep(600)
"""


def killed_in_a_transaction(bootstrap: str, tid: str, topic: str, partition: int) -> None:
    """A producer process that began a transaction, wrote to ``topic``-``partition`` and was
    SIGKILLed: the coordinator keeps it Ongoing until its (10 minute) timeout."""
    proc = subprocess.Popen([sys.executable, "-c", HANGING_PRODUCER, bootstrap, tid, topic, str(partition)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read() if proc.stderr else line
    finally:
        proc.kill()
        proc.wait(10)


def raw_transactional_batch(bootstrap: str, topic: str, partition: int, producer_id: int, age_ms: int) -> int:
    """A transactional batch written with a Produce request naming a transactional id, by a
    producer id its coordinator never gave out, on a broker that does not verify transactional
    batches (transaction.partition.verification.enable=false, as before KIP-890): no coordinator
    will ever end it (Kafka's hanging transaction). Its timestamp is ``age_ms`` old. Returns its
    offset."""
    batch = build_batch([(None, b"hung")], producer_id=producer_id, producer_epoch=0, base_sequence=0,
                        attributes=rb.TRANSACTIONAL_BIT, timestamp=int(time.time() * 1000) - age_ms)
    w = WireClient(bootstrap)
    try:
        r = w.call(ApiKey.PRODUCE, 9, {"transactional_id": "hanging", "acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    finally:
        w.close()
    (p,) = r.responses[0].partition_responses
    assert p.error_code == ErrorCode.none, ErrorCode(p.error_code)
    return p.base_offset


def test_list_describe_and_describe_producers(broker_factory):
    b = broker_factory(node_id=str(NODE_ID)).bootstrap
    create_topic(b, "txcli", 2)
    committed = txn_producer(b, "cli-committed")
    committed.begin_transaction()
    for i in range(3):
        committed.produce("txcli", b"c%d" % i, partition=0)   # offsets 0-2, the marker at 3
    committed.commit_transaction(30)
    aborted = txn_producer(b, "cli-aborted")
    aborted.begin_transaction()
    aborted.produce("txcli", b"a", partition=1)
    assert aborted.flush(10) == 0
    aborted.abort_transaction(30)
    open_ = txn_producer(b, "cli-open")
    open_.begin_transaction()
    open_.produce("txcli", b"o", partition=0)                 # offset 4, left open
    assert open_.flush(10) == 0
    try:
        # list: a table with Kafka's columns, and JSON
        rc, out, err = gregor(b, "list")
        assert rc == 0, err
        rows = table(out)
        assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        states = {r[0]: (r[1], r[3]) for r in rows[1:]}
        assert states == {"cli-aborted": (str(NODE_ID), "CompleteAbort"),
                          "cli-committed": (str(NODE_ID), "CompleteCommit"), "cli-open": (str(NODE_ID), "Ongoing")}
        listed = {t["transactional_id"]: t for t in gjson(b, "list")}
        assert set(listed) == set(states) and listed["cli-open"]["coordinator"] == NODE_ID
        assert [t["transactional_id"] for t in gjson(b, "list", "--state", "Ongoing")] == ["cli-open"]
        assert sorted(t["transactional_id"] for t in gjson(b, "list", "--state", "CompleteCommit",
                                                            "--state", "CompleteAbort")) == ["cli-aborted",
                                                                                             "cli-committed"]
        pid = listed["cli-committed"]["producer_id"]
        assert [t["transactional_id"] for t in gjson(b, "list", "--producer-id", str(pid))] == ["cli-committed"]
        assert gjson(b, "list", "--duration-filter", "3600000") == []
        assert [t["transactional_id"] for t in gjson(b, "list", "--transactional-id-pattern", "cli-o.*")] == [
            "cli-open"]

        # describe
        d = gjson(b, "describe", "--transactional-id", "cli-open")
        assert d["coordinator_id"] == NODE_ID and d["transaction_state"] == "Ongoing"
        assert d["producer_id"] == listed["cli-open"]["producer_id"] and d["transaction_timeout_ms"] == 600000
        assert d["topic_partitions"] == [{"topic": "txcli", "partition": 0}]
        assert 0 <= d["transaction_duration_ms"] < 120_000
        rc, out, err = gregor(b, "describe", "--transactional-id", "cli-open")
        assert rc == 0, err
        head, row = table(out)
        assert head == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                        "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                        "TopicPartitions"]
        assert row[:2] == [str(NODE_ID), "cli-open"] and row[4] == "Ongoing" and row[-1] == "txcli-0"
        done = gjson(b, "describe", "--transactional-id", "cli-committed")
        assert done["transaction_state"] == "CompleteCommit" and done["topic_partitions"] == []
        rc, _, err = gregor(b, "describe", "--transactional-id", "nobody")
        assert rc == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in err

        # describe-producers: the committed producer (coordinator epoch of its marker) and the open one
        producers = {p["producer_id"]: p for p in gjson(b, "describe-producers", "--topic", "txcli",
                                                        "--partition", "0")}
        assert set(producers) == {pid, d["producer_id"]}
        assert producers[pid]["current_transaction_start_offset"] is None
        assert producers[pid]["latest_coordinator_epoch"] >= 0 and producers[pid]["last_sequence"] == 2
        assert producers[d["producer_id"]]["current_transaction_start_offset"] == 4
        assert producers[d["producer_id"]]["latest_coordinator_epoch"] == -1
        rc, out, err = gregor(b, "describe-producers", "--topic", "txcli", "--partition", "0")
        assert rc == 0, err
        rows = table(out)
        assert rows[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                           "CurrentTransactionStartOffset"]
        assert sorted(r[-1] for r in rows[1:]) == ["4", "None"]
        assert gregor(b, "describe-producers", "--topic", "txcli", "--partition", "0", "--broker-id",
                      str(NODE_ID))[0] == 0
        for bad, why in ((["--topic", "nope", "--partition", "0"], "UNKNOWN_TOPIC_OR_PARTITION"),
                         (["--topic", "txcli", "--partition", "7"], "UNKNOWN_TOPIC_OR_PARTITION")):
            rc, _, err = gregor(b, "describe-producers", *bad)
            assert rc == 1 and why in err and "Failed to describe producers" in err
    finally:
        open_.abort_transaction(30)


def test_abort_a_killed_producers_transaction_and_find_and_abort_a_hanging_one(broker_factory):
    broker = broker_factory(node_id=str(NODE_ID), transaction_partition_verification_enable="false")
    b = broker.bootstrap
    create_topic(b, "hang", 2)
    plain = Producer({"bootstrap.servers": b, "linger.ms": 0})

    # partition 1: a producer killed in its transaction; the coordinator still knows it (Ongoing)
    killed_in_a_transaction(b, "cli-killed", "hang", 1)                     # offset 0 of hang-1
    plain.produce("hang", b"after-killed", partition=1)                     # offset 1
    # partition 0: a transaction no coordinator knows, 20 minutes old
    start = raw_transactional_batch(b, "hang", 0, producer_id=987_654_321, age_ms=20 * 60_000)
    plain.produce("hang", b"after-hung", partition=0)
    assert plain.flush(10) == 0
    assert (start, lso(b, "hang", 0), lso(b, "hang", 1)) == (0, 0, 0)

    # find-hanging: only the transaction its coordinator cannot end; the killed producer's is not
    # even a candidate at 15 minutes, and with no timeout its coordinator still names the partition
    expected = {"topic": "hang", "partition": 0, "producer_id": 987_654_321, "producer_epoch": 0,
                "coordinator_epoch": -1, "start_offset": 0}
    for scope in (["--broker-id", str(NODE_ID)], ["--topic", "hang"], ["--topic", "hang", "--partition", "0"],
                  ["--broker-id", str(NODE_ID), "--max-transaction-timeout", "0"]):
        (found,) = gjson(b, "find-hanging", *scope)
        assert {k: found[k] for k in expected} == expected and found["duration_min"] >= 19
    rc, out, err = gregor(b, "find-hanging", "--broker-id", str(NODE_ID))
    assert rc == 0, err
    head, row = table(out)
    assert head == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                    "LastTimestamp", "Duration(min)"]
    assert row[:6] == ["hang", "0", "987654321", "0", "-1", "0"]
    assert gjson(b, "find-hanging", "--broker-id", str(NODE_ID), "--max-transaction-timeout", "30") == []
    assert gjson(b, "find-hanging", "--broker-id", str(NODE_ID + 1)) == []

    # abort the killed producer's transaction by its start offset: hang-1 becomes readable
    killed = {p["producer_id"]: p for p in gjson(b, "describe-producers", "--topic", "hang", "--partition", "1")}
    (victim,) = [p for p in killed.values() if p["current_transaction_start_offset"] == 0]
    rc, out, err = gregor(b, "abort", "--topic", "hang", "--partition", "1", "--start-offset", "0")
    assert rc == 0, err
    assert f"producer {victim['producer_id']}" in out
    assert lso(b, "hang", 1) == 3                                       # past the marker at 2
    assert read_committed(b, "hang", 1, 1) == [b"after-killed"]

    # abort the hanging one with its producer id, epoch and coordinator epoch (-1: written as 0)
    rc, _, err = gregor(b, "abort", "--topic", "hang", "--partition", "0", "--start-offset", "1")
    assert rc == 1 and "Could not find any open transactions starting at offset 1" in err
    done = gjson(b, "abort", "--topic", "hang", "--partition", "0", "--producer-id", "987654321",
                 "--producer-epoch", "0", "--coordinator-epoch", "-1")
    assert done == {"topic": "hang", "partition": 0, "producer_id": 987654321, "producer_epoch": 0,
                    "coordinator_epoch": 0, "result": "aborted"}
    assert lso(b, "hang", 0) == 3
    assert read_committed(b, "hang", 0, 1) == [b"after-hung"]
    assert gjson(b, "find-hanging", "--broker-id", str(NODE_ID), "--max-transaction-timeout", "0") == []
    (hung,) = [p for p in gjson(b, "describe-producers", "--topic", "hang", "--partition", "0")
               if p["producer_id"] == 987654321]
    assert hung["current_transaction_start_offset"] is None and hung["latest_coordinator_epoch"] == 0


@pytest.mark.parametrize(("args", "code", "message"), [
    (["find-hanging"], 2, "requires either --topic or --broker-id"),
    (["find-hanging", "--partition", "0", "--broker-id", "1"], 2, "--partition argument requires --topic"),
    (["abort", "--topic", "t", "--partition", "0"], 2, "must be identified either with --start-offset"),
    (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5"], 2, "--producer-epoch"),
    (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5", "--producer-epoch", "0"], 2,
     "--coordinator-epoch"),
    (["list", "--state", "Bogus"], 2, "invalid choice"),
    (["describe"], 2, "--transactional-id"),
])
def test_bad_arguments(args, code, message):
    rc, _, err = gregor("127.0.0.1:1", *args)
    assert rc == code and message in err


def test_an_unreachable_broker_is_an_error():
    from tests.support.broker_process import free_port

    rc, _, err = gregor(f"127.0.0.1:{free_port()}", "list")
    assert rc == 1 and "cannot connect" in err
