"""Where ``gregor groups reset-offsets`` moves each partition, for consumer groups (committed
offsets) and share groups (start offsets) alike: the options of kafka-consumer-groups.sh and
kafka-share-groups.sh, clamped to the log as Kafka does."""

from __future__ import annotations

import argparse

TP = tuple[str, int]


def reset_targets(args: argparse.Namespace, tps: list[TP], earliest: dict[TP, int], latest: dict[TP, int],
                  at: dict[TP, int], current: dict[TP, int]) -> dict[TP, int]:
    """``--to-earliest``, ``--to-latest``, ``--to-offset N``, ``--shift-by N`` (from ``current``,
    the group's offset where it has one, else the log end) or ``--to-datetime`` (``at``: the
    offsets of that time, -1 past the end), each within [earliest, latest]."""
    target: dict[TP, int] = {}
    for tp in tps:
        if args.to_earliest:
            wanted = earliest[tp]
        elif args.to_latest:
            wanted = latest[tp]
        elif args.to_offset is not None:
            wanted = args.to_offset
        elif args.shift_by is not None:
            wanted = current.get(tp, latest[tp]) + args.shift_by
        else:
            wanted = at[tp] if at.get(tp, -1) >= 0 else latest[tp]
        target[tp] = max(earliest[tp], min(wanted, latest[tp]))
    return target
