"""Waiting for a condition in tests with real processes: poll until it holds, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(cond: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    """Poll ``cond`` every 0.1 s until it returns something true, and return that; AssertionError
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
