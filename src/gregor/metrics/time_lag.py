"""Time lag, estimated the way kafka-lag-exporter does: keep a short history of each partition's
log end offset over time, and read off when the log end passed the group's committed offset;
the time lag is how long ago that was (interpolated between samples). A group that has consumed
everything has no time lag."""

from __future__ import annotations

import bisect
from collections import deque

HISTORY = 600  # samples per partition (10 minutes at one sample a second)


class OffsetHistory:
    def __init__(self, size: int = HISTORY) -> None:
        self.size = size
        self._samples: dict[tuple[str, int], deque[tuple[int, float]]] = {}

    def sample(self, tp: tuple[str, int], end_offset: int, now_s: float) -> None:
        d = self._samples.get(tp)
        if d is None:
            d = self._samples[tp] = deque(maxlen=self.size)
        if len(d) >= 2 and d[-1][0] == end_offset and d[-2][0] == end_offset:
            d[-1] = (end_offset, now_s)  # idle: keep the first and the latest sample of a plateau
            return
        d.append((end_offset, now_s))

    def time_lag(self, tp: tuple[str, int], committed: int, end_offset: int, now_s: float) -> float:
        """Seconds since the log end offset passed ``committed`` (0 when nothing is left to read)."""
        if committed >= end_offset:
            return 0.0
        d = self._samples.get(tp)
        if not d:
            return 0.0
        offsets = [o for o, _t in d]
        i = bisect.bisect_right(offsets, committed)  # first sample whose end offset exceeds committed
        if i >= len(d):
            return 0.0
        o1, t1 = d[i]
        if i == 0:
            return max(now_s - t1, 0.0)  # older than the history: at least this old
        o0, t0 = d[i - 1]
        # the end offset moved from o0 to o1 between t0 and t1; committed + 1 was written in between
        frac = (committed + 1 - o0) / (o1 - o0) if o1 > o0 else 1.0
        written = t0 + min(max(frac, 0.0), 1.0) * (t1 - t0)
        return max(now_s - written, 0.0)
