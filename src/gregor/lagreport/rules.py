"""Consumer status rules: Burrow's sliding-window evaluation, with what the coordinator knows.

A partition of a group is evaluated at every telemetry sample over a window of the last ``W``
samples (default 10: 100 s at the default ``telemetry.interval.ms`` of 10 s). Each sample holds
the committed offset, the log end offset, the lag, the number of live members of the group, and
the time of the newest commit for that partition (the coordinator's ``commit_ts``). In order,
the first rule that holds decides:

1. ``OK`` when the lag is zero in any sample of the window (the consumer caught up at some
   point), or when fewer than two samples exist (nothing to compare yet).
2. ``REWIND`` when the committed offset went down between two consecutive samples.
3. ``STOP`` when no commit happened during the window and the group has no live members:
   nobody is consuming. (Burrow infers this from commit timing alone; the coordinator also
   knows whether anyone is still in the group.)
4. ``STALL`` when the committed offset did not move over the window while there is lag: a
   consumer is there (it still heartbeats, or still commits) but makes no progress.
5. ``WARNING`` when offsets move but the lag never went down between two consecutive samples:
   the consumer is slower than its producers.
6. ``OK`` otherwise.

A group's status at a sample time is ``ERROR`` when any of its partitions is ``STALL``,
``STOP`` or ``REWIND``; ``WARNING`` when any is ``WARNING``; ``OK`` otherwise (Burrow's group
status). Partitions without a committed offset are not evaluated.

:func:`classify` is the plain-Python statement of these rules; the Spark job evaluates the
same rules over whole arrays with numpy (:mod:`gregor.lagreport.windows`) and the tests hold
the two to each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OK, WARNING, STALL, STOP, REWIND, ERROR = "OK", "WARNING", "STALL", "STOP", "REWIND", "ERROR"
PARTITION_STATUSES = (OK, WARNING, STALL, STOP, REWIND)
GROUP_STATUSES = (OK, WARNING, ERROR)
ERROR_STATUSES = (STALL, STOP, REWIND)
DEFAULT_WINDOW = 10


@dataclass(frozen=True, slots=True)
class Sample:
    ts: int  # epoch ms of the telemetry sample
    committed: int
    lag: int
    members: int
    last_commit_ts: int | None  # newest commit of this partition at or before ts, if known


def classify(window: Sequence[Sample]) -> str:
    """The status of a partition at the last sample of ``window`` (oldest first)."""
    if len(window) < 2 or any(s.lag == 0 for s in window):
        return OK
    pairs = list(zip(window, window[1:], strict=False))
    if any(b.committed < a.committed for a, b in pairs):
        return REWIND
    last = window[-1]
    committed_in_window = last.last_commit_ts is not None and last.last_commit_ts >= window[0].ts
    if not committed_in_window and last.members == 0:
        return STOP
    if all(s.committed == window[0].committed for s in window):
        return STALL
    if all(b.lag >= a.lag for a, b in pairs):
        return WARNING
    return OK


def group_status(partition_statuses: Sequence[str]) -> str:
    if any(s in ERROR_STATUSES for s in partition_statuses):
        return ERROR
    if WARNING in partition_statuses:
        return WARNING
    return OK
