"""A Spark session for the tests: local mode by default, everything on loopback, the Gregor data
sources registered."""

from __future__ import annotations

import os
import sys
from typing import Any

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # everything on loopback


def new_session(master: str = "local[2]") -> Any:
    from pyspark.sql import SparkSession

    import gregor.spark

    spark = (SparkSession.builder.master(master).appName("gregor-tests")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             # a Python worker starting on a loaded 2-core machine may take longer than the 15 s
             # Spark waits for it by default ("Python worker failed to connect back")
             .config("spark.python.authenticate.socketTimeout", "120s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    gregor.spark.register(spark)
    return spark
