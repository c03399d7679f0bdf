"""The consumption telemetry topic's layout, shared by the broker that writes it
(``gregor.metrics.telemetry``, where the record fields are described) and the lag report that
reads it (``gregor.lagreport``).

Every record of a group goes to partition ``murmur2(group) % partitions`` (Kafka's default
partitioner on the group name), so one partition holds whole groups in time order; the key is
``group/topic/partition`` and the value one compact JSON object.
"""

from __future__ import annotations

from gregor.protocol.partitioner import partition_for_key

TELEMETRY_TOPIC = "__gregor_telemetry"


def home_partition(group_id: str, partitions: int) -> int:
    """The telemetry partition holding every record of ``group_id``."""
    return partition_for_key(group_id.encode(), partitions)


def record_key(group_id: str, topic: str, partition: int) -> bytes:
    return f"{group_id}/{topic}/{partition}".encode()
