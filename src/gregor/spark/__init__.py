"""Spark connector: ``spark.read/readStream/write/writeStream.format("gregor")`` with the option
names and row schema of Spark's built-in Kafka source, for Gregor and any Kafka-compatible
cluster. Call ``gregor.spark.register(spark)`` once per session."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``gregor`` format and the listener that commits streaming progress to
    consumer groups (option ``groupId``)."""
    from gregor.spark.progress import GroupCommitListener
    from gregor.spark.source import GregorDataSource

    spark.dataSource.register(GregorDataSource)
    if not getattr(spark, "_gregor_listener", None):
        listener = GroupCommitListener()
        spark.streams.addListener(listener)
        spark._gregor_listener = listener


__all__ = ["register"]
