"""Crash-safe file replacement: write a temporary file, fsync it, rename it over the target,
fsync the directory."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Two writers of the same file (the event loop and a worker thread) each use a temporary file
    of their own, so neither renames the other's away; the last rename wins whole. ``mode``: the
    file's permissions from its creation on (0o600 for secrets: never readable by others, not even
    for a moment)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk must not keep a partial temporary file
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
