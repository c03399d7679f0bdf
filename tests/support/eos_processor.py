"""A consume-transform-produce loop with exactly-once semantics (KIP-447) in a process of its
own, so that a test can SIGKILL it and start it again with the same transactional id:

    python -m tests.support.eos_processor BOOTSTRAP GROUP IN_TOPIC OUT_TOPIC TRANSACTIONAL_ID

It subscribes to IN_TOPIC with read_committed, and for every poll of records begins a
transaction, produces ``out:<in partition>:<in offset>:<value>`` to OUT_TOPIC (same partition
number), sends the consumer's positions to the transaction and commits. Any transactional error
that is abortable aborts and rewinds to the committed offsets; a fatal one ends the process with
exit code 3 (the test starts it again). It prints ``ready`` once it owns partitions.
"""

from __future__ import annotations

import sys
import time
from typing import Any


def main(bootstrap: str, group: str, in_topic: str, out_topic: str, transactional_id: str) -> int:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         "transaction.timeout.ms": 10000})
    producer.init_transactions(60)
    announced = False

    def rewind() -> None:
        parts = consumer.assignment()
        if not parts:
            return
        for tp in consumer.committed(parts, 30):
            consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))

    consumer.subscribe([in_topic])
    while True:
        msgs = consumer.consume(200, 0.5)
        if not announced and consumer.assignment():
            print("ready", flush=True)
            announced = True
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        try:
            producer.begin_transaction()
            for m in msgs:
                value = f"out:{m.partition()}:{m.offset()}:{m.value().decode()}".encode()
                producer.produce(out_topic, value, partition=m.partition())
            positions: Any = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
        except KafkaException as e:
            err = e.args[0]
            if err.fatal():
                print(f"fatal {err}", flush=True)
                return 3
            print(f"aborting: {err}", flush=True)
            try:
                producer.abort_transaction(30)
            except KafkaException as e2:
                if e2.args[0].fatal():
                    return 3
            time.sleep(0.2)
            rewind()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
