"""Where a topic's replicas go: Kafka's placement (AdminUtils.assignReplicasToBrokers), as pure
functions over the live brokers, so that a topic created on a Gregor cluster is laid out as Kafka
would lay it out.

- Rack-unaware (no broker has a rack): the first replica of partition ``p`` is broker
  ``(p + start) % n`` of the brokers sorted by id; the others follow it with a shift that grows
  by one each time the partitions have gone once round the brokers, so that the followers of one
  broker's partitions are spread over the other brokers.
- Rack-aware (every broker has a rack): the same round-robin over a broker list that alternates
  the racks (first broker of each rack, then the second of each, ...); followers skip brokers
  whose rack already holds a replica until every rack holds one.
- Some brokers with a rack and some without: refused, as Kafka refuses it.

``start_index`` and ``replica_shift`` are random (as in Kafka) unless given; a seeded
``random.Random`` makes the choice repeatable in tests.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from gregor.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """What placement knows of a broker: its id and its rack (``broker.rack``), if any."""
    broker_id: int
    rack: str | None = None


def assign_replicas_to_brokers(brokers: Iterable[BrokerMetadata], partitions: int, replication_factor: int,
                               fixed_start_index: int = -1, start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """partition -> replicas (the first being the preferred leader) for ``partitions`` partitions
    numbered from ``max(0, start_partition_id)``. ``fixed_start_index >= 0`` fixes both the
    first broker and the follower shift, as Kafka's parameter of that name does."""
    if partitions <= 0:
        raise KafkaError(ErrorCode.invalid_partitions, "number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.invalid_replication_factor, "replication factor must be larger than 0")
    ordered = sorted(brokers, key=lambda b: b.broker_id)
    if replication_factor > len(ordered):
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"replication factor {replication_factor} larger than available brokers: {len(ordered)}")
    with_rack = [b for b in ordered if b.rack is not None]
    if not with_rack:
        return _rack_unaware([b.broker_id for b in ordered], partitions, replication_factor,
                             fixed_start_index, start_partition_id, rng or random.Random())
    if len(with_rack) < len(ordered):
        missing = [b.broker_id for b in ordered if b.rack is None]
        # Kafka's AdminOperationException, which reaches clients as UNKNOWN_SERVER_ERROR
        raise KafkaError(ErrorCode.unknown_server_error,
                         "not all brokers have rack information for rack-aware replica assignment"
                         f" (brokers without broker.rack: {missing})")
    return _rack_aware({b.broker_id: b.rack for b in with_rack if b.rack is not None}, partitions,
                       replication_factor, fixed_start_index, start_partition_id, rng or random.Random())


def _replica_index(first_index: int, shift: int, j: int, n: int) -> int:
    """Index of the (j+2)-th replica: never the first replica's broker (1 <= step <= n-1)."""
    return (first_index + 1 + (shift + j) % (n - 1)) % n


def _round_robin(n: int, partitions: int, fixed_start_index: int, start_partition_id: int,
                 rng: random.Random) -> Iterator[tuple[int, int, int]]:
    """Kafka's walk over ``n`` brokers: (partition, index of its first replica, shift of the
    others), the shift growing by one each time the first replicas have gone round once."""
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition = max(0, start_partition_id)
    for _ in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        yield partition, (partition + start) % n, shift
        partition += 1


def _rack_unaware(broker_ids: Sequence[int], partitions: int, rf: int, fixed_start_index: int,
                  start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    n = len(broker_ids)
    return {partition: [broker_ids[first]] + [broker_ids[_replica_index(first, shift, j, n)] for j in range(rf - 1)]
            for partition, first, shift in _round_robin(n, partitions, fixed_start_index, start_partition_id, rng)}


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """The brokers with racks alternating: the lowest id of each rack (racks in name order),
    then the second of each, ... (Kafka's getRackAlternatedBrokerList)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    queues = [sorted(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(racks):
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out


def _rack_aware(racks: Mapping[int, str], partitions: int, rf: int, fixed_start_index: int,
                start_partition_id: int, rng: random.Random) -> dict[int, list[int]]:
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    n_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    for partition, first, shift in _round_robin(n, partitions, fixed_start_index, start_partition_id, rng):
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * n_racks, k, n)]
                rack = racks[broker]
                k += 1
                # a rack already used while another has none, or a broker already used while
                # another has none: look further
                if (rack not in racks_used or len(racks_used) == n_racks) and \
                        (broker not in brokers_used or len(brokers_used) == n):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[partition] = replicas
    return out


def assign_new_partitions(brokers: Iterable[BrokerMetadata], existing: Mapping[int, Sequence[int]], total: int,
                          rng: random.Random | None = None) -> dict[int, list[int]]:
    """The assignment of the partitions CreatePartitions adds to reach ``total``: same replication
    factor as partition 0, continuing the round-robin where partition 0's leader sits (Kafka's
    createNewPartitionsAssignment). Only the new partitions are returned."""
    if 0 not in existing:
        raise KafkaError(ErrorCode.unknown_server_error, "the topic's assignment has no partition 0")
    adding = total - len(existing)
    if adding <= 0:
        raise KafkaError(ErrorCode.invalid_partitions,
                         f"topic has {len(existing)} partitions; {total} would not be an increase")
    ordered = sorted(brokers, key=lambda b: b.broker_id)
    first_leader = existing[0][0]
    start = next((i for i, b in enumerate(ordered) if b.broker_id >= first_leader), 0)
    return assign_replicas_to_brokers(ordered, adding, len(existing[0]), start, len(existing), rng)
