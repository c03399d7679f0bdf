"""Size-prefixed frames (int32 big-endian length + payload), bytes in, frames out.

The decoder never buffers more than one frame's worth of data: a size prefix larger than
``max_frame_bytes`` is reported as soon as the four prefix bytes arrive, before any of the
payload is read, so an oversized request costs no memory.

With a ``reserve`` callback (the broker's queued.max.request.bytes pool), every frame's size is
reserved when its prefix is read, before its payload is taken in; if the reservation is refused the
decoder stops there (``blocked``), keeps what it has, and carries on at the next ``feed`` call.
The payload is buffered as it arrives, never preallocated from the prefix: the chunks received are
kept as they are (a list) and a frame is made with one join of exactly its size once all of it has
arrived. Growing one buffer chunk by chunk instead cost a reallocation per chunk and a copy of the
frame out of it, on freshly faulted pages for every 1 MB produce request (bench: about 0.14 s of
broker CPU per GB produced).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The peer sent something that cannot be a Kafka frame; the connection must be closed."""


class FrameDecoder:
    def __init__(self, max_frame_bytes: int, reserve: Callable[[int], bool] | None = None) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.reserve = reserve
        self.blocked = False  # the last frame's reservation was refused; feed again to retry
        self._parts: list[bytes | memoryview] = []  # received and not yet framed, in order
        self._len = 0  # bytes in ``_parts``
        self._need: int | None = None  # payload size of the frame being read (its prefix taken)

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every complete frame payload they finish."""
        frames: list[bytes] = []
        self.blocked = False
        if not self._parts and self._need is None:
            # fast path: nothing pending, slice frames straight out of what arrived
            pos = self._split(data, frames)
            if pos == len(data):
                return frames
            self._append(memoryview(data)[pos:] if pos else data)
        else:
            self._append(data)
        while True:
            if self._need is None:
                if self._len < 4:
                    break
                (size,) = _SIZE.unpack(self._peek(4))
                if size < 0:
                    raise FrameError(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameError(
                        f"frame of {size} bytes exceeds socket.request.max.bytes={self.max_frame_bytes}"
                    )
                if self.reserve is not None and not self.reserve(size):
                    self.blocked = True
                    break
                self._take(4)
                self._need = size
            if self._len < self._need:
                break
            frames.append(self._take(self._need))
            self._need = None
        return frames

    def _append(self, data: bytes | memoryview) -> None:
        if len(data):
            self._parts.append(data)
            self._len += len(data)

    def _peek(self, n: int) -> bytes:
        """The first ``n`` buffered bytes, left in place (``n`` <= what is buffered)."""
        first = self._parts[0]
        if len(first) >= n:
            return bytes(first[:n])
        out = bytearray()
        for part in self._parts:
            out += part[: n - len(out)]
            if len(out) >= n:
                break
        return bytes(out)

    def _take(self, n: int) -> bytes:
        """The first ``n`` buffered bytes as one bytes object, removed (``n`` <= what is
        buffered): the chunk itself when a frame is exactly one chunk, else one copy."""
        if n == 0:
            return b""
        self._len -= n
        parts = self._parts
        first = parts[0]
        if len(first) == n:
            del parts[0]
            return first if isinstance(first, bytes) else bytes(first)
        if len(first) > n:
            view = first if isinstance(first, memoryview) else memoryview(first)
            parts[0] = view[n:]
            return bytes(view[:n])
        got = 0
        whole = 0  # chunks wholly in the frame
        while got + len(parts[whole]) <= n:
            got += len(parts[whole])
            whole += 1
            if got == n:
                break
        pieces = parts[:whole]
        if got < n:
            last = parts[whole]
            view = last if isinstance(last, memoryview) else memoryview(last)
            pieces.append(view[: n - got])
            parts[whole] = view[n - got:]
        del parts[:whole]
        return b"".join(pieces)

    def _split(self, data: bytes, frames: list[bytes]) -> int:
        """Whole frames at the start of ``data``; returns where the first incomplete one starts."""
        pos = 0
        end = len(data)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if size < 0 or size > self.max_frame_bytes or end - pos - 4 < size:
                break  # errors are raised by the buffered path, which sees the same prefix
            if self.reserve is not None and not self.reserve(size):
                break  # the buffered path asks again and reports it
            frames.append(data[pos + 4 : pos + 4 + size])
            pos += 4 + size
        return pos

    @property
    def buffered(self) -> int:
        return self._len


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
