"""What share groups (KIP-932) cost, measured with confluent-kafka against one ``gregor serve``
(bench/peers.py's subprocess), side by side in one run:

1. Consumption throughput (``consume``): one topic of ``--partitions`` partitions filled with
   ``--records`` records of ``--size`` bytes, read to its end by a consumer group (classic
   protocol, auto commit off) and by a share group with implicit acknowledgement (each poll
   acknowledges the previous one; a final commit_sync; ``--max-poll-records`` per poll: librdkafka's
   share consumer fetches when the application polls, one ShareFetch per poll, where the classic
   consumer prefetches), ``--rounds`` times in alternating order with a fresh group each time.
   Records/s (median), and the share group's ratio to the consumer
   group (goal: >= 0.7x).
2. Acknowledgements (``ack``): a share consumer in explicit mode acknowledging every record
   (ACCEPT) and committing after each poll: acknowledged records per second, each commit answered
   once the state is written.
3. Dead letters (KIP-1191): the same explicit consumer REJECTing every record, once without a
   dead-letter topic and once with one (``errors.deadletterqueue.copy.record.enable=true``):
   rejections per second for each, and the dead letters written per second (from the first
   rejection until the dead-letter topic holds them all).
4. Scaling (``--scale 1,4,8``): that many share consumers of one group, each in a process of its
   own, read the topic to its end together: records/s for each count (Kafka's published figure:
   linear from 4 to 32 consumers on 4 partitions; here clients and broker share 2 cores).
5. Redelivery latency (``redeliver``): a consumer acquires records and never acknowledges them;
   with ``group.share.record.lock.duration.ms`` set to ``--lock-ms``, another consumer of the group
   receives them again: the time from the first acquisition to the redelivery, minus the lock
   (the broker's part), over ``--samples`` samples.

    .venv/bin/python bench/share_groups.py             # the full run (about a minute on 2 cores)
    .venv/bin/python bench/share_groups.py --quick     # a smoke run
    .venv/bin/python bench/share_groups.py --json      # figures as JSON on stdout

Client and broker share the machine: the figures compare modes within one run. Kafka's published
figure to set beside them: share groups scale linearly from 4 to 32 consumers on 4 partitions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

import peers  # noqa: E402

QUIET = {"log_level": 3}


def fill(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                     "queue.buffering.max.messages": 1_000_000, "compression.type": "none", **QUIET})
    payload = os.urandom(size)
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def earliest(bootstrap: str, group: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = {"share.auto.offset.reset": "earliest", **configs}
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in wanted.items()])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)


def consumer_group_rate(bootstrap: str, topic: str, records: int) -> float:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"cg-{uuid.uuid4()}", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100, **QUIET})
    c.subscribe([topic])
    got, started = 0, None
    deadline = time.monotonic() + 300
    while got < records and time.monotonic() < deadline:
        batch = c.consume(1000, 1.0)
        if batch and started is None:
            started = time.monotonic()
        got += sum(1 for m in batch if m.error() is None)
    elapsed = time.monotonic() - (started or time.monotonic())
    c.close()
    return got / elapsed if elapsed > 0 else 0.0


def share_group_rate(bootstrap: str, topic: str, records: int, explicit: bool = False,
                     max_poll_records: int = 5000, ack: ck.AcknowledgeType = ck.AcknowledgeType.ACCEPT,
                     dead_letters: str | None = None) -> tuple[float, float]:
    """(records/s, seconds from the first record on); with ``dead_letters``, the group's dead-letter
    topic."""
    group = f"sg-{uuid.uuid4()}"
    dlq = {"errors.deadletterqueue.topic.name": dead_letters,
           "errors.deadletterqueue.copy.record.enable": "true"} if dead_letters else {}
    earliest(bootstrap, group, **dlq)
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": max_poll_records, **QUIET}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ck.ShareConsumer(conf)
    c.subscribe([topic])
    got, started = 0, None
    deadline = time.monotonic() + 300
    while got < records and time.monotonic() < deadline:
        msgs = [m for m in c.poll(1.0) if m.error() is None]
        if msgs and started is None:
            started = time.monotonic()
        got += len(msgs)
        if explicit and msgs:
            for m in msgs:
                c.acknowledge(m, ack)
            c.commit_sync()
    c.commit_sync()
    elapsed = time.monotonic() - (started or time.monotonic())
    c.close()
    return (got / elapsed if elapsed > 0 else 0.0), time.monotonic() - (started or time.monotonic())


def dead_letter_rate(bootstrap: str, topic: str, records: int) -> tuple[float, float]:
    """(rejections/s, dead letters written/s) of a share group rejecting every record."""
    dlq = f"dlq.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(dlq, 1, 1, config={"errors.deadletterqueue.group.enable": "true"})])[dlq].result(30)
    rate, since_first = share_group_rate(bootstrap, topic, records, explicit=True, ack=ck.AcknowledgeType.REJECT,
                                         dead_letters=dlq)
    started = time.monotonic() - since_first
    probe = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "dlq-probe", **QUIET})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if probe.get_watermark_offsets(ck.TopicPartition(dlq, 0), timeout=10)[1] >= records:
            break
        time.sleep(0.05)
    written = time.monotonic() - started
    probe.close()
    return rate, records / written


def _scale_worker(bootstrap: str, topic: str, group: str, records: int, total: Any, go: Any) -> None:
    c = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 5000, **QUIET})
    c.subscribe([topic])
    go.wait()
    deadline = time.monotonic() + 300
    while total.value < records and time.monotonic() < deadline:
        n = sum(1 for m in c.poll(0.5) if m.error() is None)
        if n:
            with total.get_lock():
                total.value += n
    c.close()


def scaled_rate(bootstrap: str, topic: str, records: int, consumers: int) -> float:
    """Records/s of ``consumers`` share consumers (one process each) reading the topic together."""
    import multiprocessing as mp

    group = f"scale-{uuid.uuid4()}"
    earliest(bootstrap, group)
    ctx = mp.get_context("spawn")
    total, go = ctx.Value("q", 0), ctx.Event()
    procs = [ctx.Process(target=_scale_worker, args=(bootstrap, topic, group, records, total, go))
             for _ in range(consumers)]
    for p in procs:
        p.start()
    time.sleep(3 + consumers)  # all of them in the group before the clock starts
    started = time.monotonic()
    go.set()
    while total.value < records and time.monotonic() - started < 300:
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    for p in procs:
        p.join(30)
    return total.value / elapsed


def redelivery_latency(bootstrap: str, topic: str, lock_ms: int) -> float:
    """Seconds from the first acquisition to the redelivery, minus the lock duration."""
    group = f"rd-{uuid.uuid4()}"
    earliest(bootstrap, group)
    holder = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                               "share.acknowledgement.mode": "explicit", "max.poll.records": 10, **QUIET})
    holder.subscribe([topic])
    t0 = None
    while t0 is None:
        if [m for m in holder.poll(0.5) if m.error() is None]:
            t0 = time.monotonic()
    other = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    other.subscribe([topic])
    again = None
    deadline = time.monotonic() + 60
    while again is None and time.monotonic() < deadline:
        msgs = [m for m in other.poll(0.05) if m.error() is None and m.delivery_count() > 1]
        if msgs:
            again = time.monotonic()
    other.close()
    holder.close()
    return (again - t0) - lock_ms / 1000 if again is not None else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lock-ms", type=int, default=2000)
    ap.add_argument("--max-poll-records", type=int, default=5000,
                    help="the share consumer's max.poll.records (ShareFetch's MaxRecords; Kafka's default 500)")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--scale", default="1,4,8", help="share consumer counts for the scaling figure (empty: skip)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.records, args.rounds, args.samples = 20_000, 1, 1
    out = sys.stderr if args.json else sys.stdout
    figures: dict[str, Any] = {}
    with peers.gregor_process(f"group.share.record.lock.duration.ms={args.lock_ms}",
                              "group.share.min.record.lock.duration.ms=1000") as (bootstrap, _proc):
        topic = "share-bench"
        fill(bootstrap, topic, args.partitions, args.records, args.size)
        cg, sg = [], []
        for r in range(args.rounds):
            order = [("consumer", cg), ("share", sg)] if r % 2 == 0 else [("share", sg), ("consumer", cg)]
            for kind, into in order:
                if kind == "consumer":
                    rate = consumer_group_rate(bootstrap, topic, args.records)
                else:
                    rate = share_group_rate(bootstrap, topic, args.records, max_poll_records=args.max_poll_records)[0]
                into.append(rate)
                print(f"  round {r + 1}: {kind} group {rate:,.0f} rec/s", file=out)
        figures["consumer_group_rec_s"] = statistics.median(cg)
        figures["share_group_rec_s"] = statistics.median(sg)
        figures["share_to_consumer_ratio"] = figures["share_group_rec_s"] / figures["consumer_group_rec_s"]
        some = min(args.records, 50_000)
        figures["explicit_acks_per_s"] = share_group_rate(bootstrap, topic, some, explicit=True)[0]
        figures["explicit_rejects_per_s"] = share_group_rate(bootstrap, topic, some, explicit=True,
                                                             ack=ck.AcknowledgeType.REJECT)[0]
        rejects, written = dead_letter_rate(bootstrap, topic, some)
        figures["explicit_rejects_dead_lettered_per_s"] = rejects
        figures["dead_letters_written_per_s"] = written
        for n in [int(x) for x in args.scale.split(",") if x]:
            figures[f"scale_{n}_consumers_rec_s"] = scaled_rate(bootstrap, topic, args.records, n)
            print(f"  {n} share consumers: {figures[f'scale_{n}_consumers_rec_s']:,.0f} rec/s", file=out)
        fill(bootstrap, "share-redeliver", 1, 50, 100)
        lat = [redelivery_latency(bootstrap, "share-redeliver", args.lock_ms) for _ in range(args.samples)]
        figures["redelivery_after_lock_s_median"] = statistics.median(lat)
    print(f"consumer group: {figures['consumer_group_rec_s']:,.0f} rec/s; share group (implicit acks): "
          f"{figures['share_group_rec_s']:,.0f} rec/s; ratio {figures['share_to_consumer_ratio']:.2f}x (goal >= 0.7x)",
          file=out)
    print(f"explicit ACCEPT of every record, commit_sync per poll: {figures['explicit_acks_per_s']:,.0f} acks/s",
          file=out)
    print(f"explicit REJECT of every record: {figures['explicit_rejects_per_s']:,.0f}/s without a dead-letter topic, "
          f"{figures['explicit_rejects_dead_lettered_per_s']:,.0f}/s with one (copying key and value); dead letters "
          f"written {figures['dead_letters_written_per_s']:,.0f}/s", file=out)
    print(f"redelivery after a lock of {args.lock_ms} ms: {figures['redelivery_after_lock_s_median'] * 1000:.0f} ms "
          "past the lock (median)", file=out)
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
