"""Crash-safe file replacement: write a temporary file, fsync it, rename it over the target,
fsync the directory."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Two writers of the same file (the event loop and a worker thread) each use a temporary file
    of their own, so neither renames the other's away; the last rename wins whole."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
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
