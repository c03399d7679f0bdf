"""Kafka's offset checkpoint files (``recovery-point-offset-checkpoint`` and friends):

    0                 <- version
    2                 <- entry count
    orders 0 1234     <- topic partition offset
    orders 1 998

Written atomically (``gregor.atomic_file``).
"""

from __future__ import annotations

from pathlib import Path

from gregor.atomic_file import write_atomically


def write_checkpoint(path: Path, entries: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0].strip() != "0":
        raise ValueError(f"{path}: unsupported checkpoint format")
    count = int(lines[1])
    out: dict[tuple[str, int], int] = {}
    for line in lines[2 : 2 + count]:
        topic, part, off = line.rsplit(" ", 2)
        out[(topic, int(part))] = int(off)
    if len(out) != count:
        raise ValueError(f"{path}: expected {count} entries, found {len(out)}")
    return out
