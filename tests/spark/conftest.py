"""A real Spark session in local mode (and a standalone cluster for one test), against real
brokers started by the integration fixtures."""

from __future__ import annotations

import os
import sys

import pytest

from tests.integration.conftest import broker, broker_factory  # noqa: F401 - fixtures

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # everything on loopback


def new_session(master: str = "local[2]"):
    from pyspark.sql import SparkSession

    import gregor.spark

    spark = (SparkSession.builder.master(master).appName("gregor-tests")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    gregor.spark.register(spark)
    return spark


@pytest.fixture(scope="session")
def spark():
    s = new_session()
    yield s
    s.stop()
