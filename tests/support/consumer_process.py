"""A confluent-kafka group member in a process of its own, so that a test can SIGKILL it: it
records what it observes in a file, one line per fact, written before it acts on the fact
(a read offset before the commit that covers it), so nothing it did is missing after a kill.

    python -m tests.support.consumer_process BOOTSTRAP GROUP TOPIC OUT [consumer|classic]

Lines (times are ``time.monotonic()``, which all processes of the machine share):
``assign T p,p,...`` / ``revoke T ...`` / ``lost T ...``, ``read P OFFSET``, ``commit T P=O,...``,
``ready T`` once subscribed. ``records(path)`` reads the file back as a GroupConsumer-like view.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tests.support.group_load import Commit, GroupConsumer

COMMIT_INTERVAL_S = 1.0


def main(bootstrap: str, group: str, topic: str, out: str, protocol: str = "consumer") -> None:
    from confluent_kafka import Consumer, TopicPartition

    f = open(out, "a", buffering=1)  # noqa: SIM115 - open for the life of the process
    owned: set[int] = set()
    positions: dict[int, int] = {}

    def line(text: str) -> None:
        f.write(text + "\n")
        f.flush()

    def commit(consumer: Any, offsets: dict[int, int]) -> None:
        if offsets:
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
            line(f"commit {time.monotonic()} " + ",".join(f"{p}={o}" for p, o in offsets.items()))

    def on_assign(consumer: Any, parts: list[Any]) -> None:
        owned.update(tp.partition for tp in parts)
        line(f"assign {time.monotonic()} " + ",".join(str(tp.partition) for tp in parts))

    def on_revoke(consumer: Any, parts: list[Any]) -> None:
        gone = {tp.partition for tp in parts}
        commit(consumer, {p: o for p, o in positions.items() if p in gone})
        owned.difference_update(gone)
        for p in gone:
            positions.pop(p, None)
        line(f"revoke {time.monotonic()} " + ",".join(str(p) for p in sorted(gone)))

    def on_lost(consumer: Any, parts: list[Any]) -> None:
        gone = {tp.partition for tp in parts}
        owned.difference_update(gone)
        line(f"lost {time.monotonic()} " + ",".join(str(p) for p in sorted(gone)))

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": Path(out).stem,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    consumer = Consumer(conf)
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    line(f"ready {time.monotonic()}")
    last = time.monotonic()
    while True:
        batch = consumer.consume(500, 0.2)
        reads = [(m.partition(), m.offset()) for m in batch if m.error() is None]
        if reads:
            f.write("".join(f"read {p} {o}\n" for p, o in reads))
            f.flush()
            for p, o in reads:
                if p in owned:
                    positions[p] = o + 1
        if time.monotonic() - last >= COMMIT_INTERVAL_S:
            last = time.monotonic()
            commit(consumer, {p: o for p, o in positions.items() if p in owned})


def records(path: Path, name: str, killed_at: float) -> GroupConsumer:
    """What the process recorded, as a (not started) GroupConsumer whose life ended at ``killed_at``."""
    m = GroupConsumer(name, "", "", "")
    for raw in path.read_text().splitlines():
        kind, _, rest = raw.partition(" ")
        if kind in ("assign", "revoke", "lost"):
            t, _, parts = rest.partition(" ")
            m.events.append((float(t), kind, [int(p) for p in parts.split(",") if p]))
        elif kind == "read":
            p, o = rest.split()
            m.consumed.setdefault(int(p), set()).add(int(o))
        elif kind == "commit":
            t, _, offs = rest.partition(" ")
            offsets = {int(k): int(v) for k, v in (kv.split("=") for kv in offs.split(","))}
            m.commits.append(Commit(float(t), float(t), offsets, None))
    m.closed_at = killed_at
    return m


if __name__ == "__main__":
    main(*sys.argv[1:])
