"""``gregor groups`` and ``gregor topics`` against a real broker (and a few against librdkafka's
mock cluster: they speak plain Kafka protocol)."""

import json
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer


def gregor(bootstrap, *args):
    r = subprocess.run([sys.executable, "-m", "gregor", *args[:1], "--bootstrap-server", bootstrap, *args[1:]],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def gjson(bootstrap, *args):
    rc, out, err = gregor(bootstrap, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_topics_commands(broker):
    b = broker.bootstrap
    rc, out, _ = gregor(b, "topics", "create", "cli-t", "--partitions", "3", "--config", "retention.ms=60000")
    assert rc == 0 and "created" in out
    rc, _, err = gregor(b, "topics", "create", "cli-t")
    assert rc == 1 and "TOPIC_ALREADY_EXISTS" in err
    assert "cli-t" in gjson(b, "topics", "list")
    assert "__consumer_offsets" not in gjson(b, "topics", "list", "--exclude-internal")
    (desc,) = gjson(b, "topics", "describe", "cli-t")
    assert desc["partitions"] == 3 and desc["configs"] == {"retention.ms": "60000"}
    assert [p["log_end_offset"] for p in desc["partition_details"]] == [0, 0, 0]
    rc, out, _ = gregor(b, "topics", "describe", "cli-t")
    assert "PartitionCount: 3" in out and "LOG_END_OFFSET" in out
    assert gregor(b, "topics", "delete", "cli-t")[0] == 0
    rc, _, err = gregor(b, "topics", "delete", "cli-t")
    assert rc == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err


def test_groups_describe_reset_delete(broker):
    b = broker.bootstrap
    gregor(b, "topics", "create", "g-t", "--partitions", "2")
    p = Producer({"bootstrap.servers": b})
    for i in range(20):
        p.produce("g-t", value=b"%d" % i, partition=i % 2)
    p.flush(10)
    c = Consumer({"bootstrap.servers": b, "group.id": "ops", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "client.id": "ops-client"})
    c.subscribe(["g-t"])
    got = 0
    # a fresh broker loads its 50 __consumer_offsets partitions first: on a loaded machine the
    # group forms late (a full run took 30 s once); the records are there, waiting for it
    deadline = time.monotonic() + 90
    while got < 16 and time.monotonic() < deadline:
        got += len(c.consume(16 - got, 0.5))
    assert got == 16, f"consumed {got} of 16 records in 90 s"
    c.commit(asynchronous=False)
    for _ in range(5):  # more data after the commit: lag
        p.produce("g-t", value=b"x", partition=0)
    p.flush(10)

    d = gjson(b, "groups", "describe", "ops")
    assert d["state"] == "Stable" and len(d["members"]) == 1
    assert d["members"][0]["client_id"] == "ops-client" and sorted(d["members"][0]["assignment"]) == ["g-t-0", "g-t-1"]
    lag = {r["partition"]: r["lag"] for r in d["offsets"]}
    committed = {r["partition"]: r["current_offset"] for r in d["offsets"]}
    assert sum(committed.values()) == 16 and lag[0] == 10 + 5 - committed[0]
    assert all(r["consumer_id"] == d["members"][0]["member_id"] for r in d["offsets"])

    rc, _, err = gregor(b, "groups", "reset-offsets", "ops", "--topic", "g-t", "--to-earliest", "--execute")
    assert rc == 1 and "inactive" in err and "Stable" in err
    rc, _, err = gregor(b, "groups", "delete", "ops")
    assert rc == 1 and "NON_EMPTY_GROUP" in err
    c.close()

    plan = gjson(b, "groups", "reset-offsets", "ops", "--topic", "g-t", "--to-earliest")
    assert [r["new_offset"] for r in plan] == [0, 0]
    assert {r["partition"]: r["current_offset"] for r in gjson(b, "groups", "describe", "ops")["offsets"]} == committed
    done = gjson(b, "groups", "reset-offsets", "ops", "--topic", "g-t:0", "--shift-by", "-3", "--execute")
    assert done == [{"group": "ops", "topic": "g-t", "partition": 0, "previous_offset": committed[0],
                     "new_offset": committed[0] - 3}]
    latest = gjson(b, "groups", "reset-offsets", "ops", "--topic", "g-t", "--to-latest", "--execute")
    assert [r["new_offset"] for r in latest] == [15, 10]
    shifted = gjson(b, "groups", "reset-offsets", "ops", "--topic", "g-t", "--shift-by", "100", "--execute")
    assert [r["new_offset"] for r in shifted] == [15, 10]  # clamped to the log end

    out = gjson(b, "groups", "delete-offsets", "ops", "--topic", "g-t:1")
    assert out == [{"topic": "g-t", "partition": 1, "result": "deleted"}]
    assert [r["partition"] for r in gjson(b, "groups", "describe", "ops")["offsets"]] == [0]
    assert gregor(b, "groups", "delete", "ops")[0] == 0
    assert "ops" not in [g["group"] for g in gjson(b, "groups", "list")]


def test_groups_coordinator_explains_placement(broker):
    b = broker.bootstrap
    c = Consumer({"bootstrap.servers": b, "group.id": "polygenelubricants"})
    from confluent_kafka import TopicPartition

    gregor(b, "topics", "create", "pl")
    c.commit(offsets=[TopicPartition("pl", 0, 1)], asynchronous=False)
    c.close()
    info = gjson(b, "groups", "coordinator", "polygenelubricants")
    assert info["java_hashcode"] == -(2**31) and info["abs_hashcode"] == 0  # Utils.abs(MIN_VALUE) = 0
    assert info["partition"] == 0 and info["partition_leader"] == 0 and info["coordinator"] == 0
    assert info["status"] == "loaded" and info["group_state"] == "Empty"
    rc, out, _ = gregor(b, "groups", "coordinator", "polygenelubricants")
    assert rc == 0 and "status" in out and "loaded" in out


def test_cli_against_librdkafka_mock_cluster():
    host = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    b = next(iter(host.list_topics(timeout=10).brokers.values()))
    bootstrap = f"{b.host}:{b.port}"
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce("mocked", value=b"x")
    p.flush(10)
    assert "mocked" in gjson(bootstrap, "topics", "list")
    (desc,) = gjson(bootstrap, "topics", "describe", "mocked")
    assert desc["partitions"] >= 1
    info = gjson(bootstrap, "groups", "coordinator", "some-group")
    assert info["status"] in ("loaded", "coordinator found") and info["coordinator"] is not None
    del host


def test_bad_arguments():
    r = subprocess.run([sys.executable, "-m", "gregor", "groups", "reset-offsets", "g", "--topic", "t"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "one of the arguments" in r.stderr
    r = subprocess.run([sys.executable, "-m", "gregor", "groups", "--bootstrap-server", "nonsense", "list"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "host:port" in r.stderr


def test_lag_report_bad_input_fails_before_spark(broker_factory, tmp_path):
    """Bad arguments exit 2; an unreachable cluster or a broker without telemetry exit 1 with the
    reason, before any Spark job starts, and nothing is written."""
    out = tmp_path / "report"
    for args, says in ((["--window", "1"], "at least 2"), (["--since", "yesterday"], "not a time"),
                       (["--conf", "nokey"], "KEY=VALUE")):
        rc, _, err = gregor("127.0.0.1:9", "lag-report", "--out", str(out), *args)
        assert rc == 2 and says in err, err
    rc, _, err = gregor("127.0.0.1:9", "lag-report", "--out", str(out))
    assert rc == 1 and "cannot reach 127.0.0.1:9" in err, err
    b = broker_factory(**{"telemetry.interval.ms": "0"})
    rc, _, err = gregor(b.bootstrap, "lag-report", "--out", str(out))
    assert rc == 1 and "no topic __gregor_telemetry" in err, err
    assert not out.exists()
    assert b.alive()


def test_options_in_any_order_like_kafkas_scripts(broker):
    """Issue 10: the tool's options after the action and its arguments, as operators type them."""
    b = broker.bootstrap
    p = Producer({"bootstrap.servers": b})
    p.produce("anyorder", value=b"x")
    p.flush(10)
    c = Consumer({"bootstrap.servers": b, "group.id": "billing", "auto.offset.reset": "earliest"})
    c.subscribe(["anyorder"])
    assert c.consume(1, 20)
    c.commit(asynchronous=False)
    c.close()
    for argv in (["groups", "describe", "billing", "--bootstrap-server", b, "--json"],
                 ["groups", "describe", "--json", "billing", "--bootstrap-server", b],
                 ["groups", "--bootstrap-server", b, "describe", "billing", "--json"],
                 ["groups", "--json", "describe", "billing", "--bootstrap-server", b]):
        r = subprocess.run([sys.executable, "-m", "gregor", *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (argv, r.stderr)
        assert json.loads(r.stdout)["group"] == "billing", argv
    r = subprocess.run([sys.executable, "-m", "gregor", "topics", "list", "--bootstrap-server", b, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "anyorder" in json.loads(r.stdout)
