"""The connector unchanged on a Spark standalone cluster: a master and a worker on 127.0.0.1,
started with the spark-class launcher shipped in the PySpark package. (Runs last: it replaces the
local session.)"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import free_port
from tests.support.spark_session import new_session


def wait_port(port, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"nothing listens on {port}")


@pytest.fixture
def standalone(tmp_path):
    import pyspark

    home = Path(pyspark.__file__).parent
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_LOG_DIR=str(tmp_path / "logs"))
    launcher = str(home / "bin" / "spark-class")
    port = free_port()
    logs = [open(tmp_path / "master.log", "w"), open(tmp_path / "worker.log", "w")]  # noqa: SIM115
    master = subprocess.Popen([launcher, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(free_port())],
                              env=env, stdout=subprocess.DEVNULL, stderr=logs[0])
    procs = [master]
    try:
        wait_port(port)
        url = f"spark://127.0.0.1:{port}"
        worker = subprocess.Popen([launcher, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                   "--webui-port", str(free_port()), "--cores", "2", "--memory", "1g", url],
                                  env=env, stdout=subprocess.DEVNULL, stderr=logs[1])
        procs.append(worker)
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def test_read_and_stream_on_a_standalone_cluster(broker, standalone, tmp_path):
    from pyspark.sql import SparkSession

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("sa", 2)])["sa"].result(10)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(500):
        p.produce("sa", value=b"%d" % i, partition=i % 2)
    p.flush(10)

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    spark = new_session(standalone)
    try:
        assert spark.sparkContext.master == standalone
        df = spark.read.format("gregor").option("bootstrap.servers", broker.bootstrap).option("subscribe", "sa").load()
        assert df.count() == 500
        out = str(tmp_path / "out")
        q = (spark.readStream.format("gregor").option("bootstrap.servers", broker.bootstrap)
             .option("subscribe", "sa").option("startingOffsets", "earliest").option("groupId", "sa-group").load()
             .selectExpr("CAST(value AS STRING) AS v").writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", str(tmp_path / "chk")).trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert q.exception() is None
        assert sorted(int(r.v) for r in spark.read.parquet(out).collect()) == list(range(500))
    finally:
        spark.stop()
