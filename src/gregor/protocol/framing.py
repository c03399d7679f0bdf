"""Size-prefixed frames (int32 big-endian length + payload), bytes in, frames out.

The decoder never buffers more than one frame's worth of data: a size prefix larger than
``max_frame_bytes`` is reported as soon as the four prefix bytes arrive, before any of the
payload is read, so an oversized request costs no memory.

With a ``reserve`` callback (the broker's queued.max.request.bytes pool), every frame's size is
reserved when its prefix is read, before its payload is taken in; if the reservation is refused the
decoder stops there (``blocked``), keeps what it has, and carries on at the next ``feed`` call.
The payload is buffered as it arrives, never preallocated from the prefix.
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
        self._buf = bytearray()
        self._need: int | None = None  # payload size of the frame being read

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every complete frame payload they finish."""
        frames: list[bytes] = []
        self.blocked = False
        if not self._buf and self._need is None:
            # fast path: nothing pending, slice frames straight out of what arrived
            pos = self._split(data, frames)
            if pos == len(data):
                return frames
            data = data[pos:]
        self._buf += data
        buf = self._buf
        pos = 0
        end = len(buf)
        while True:
            if self._need is None:
                if end - pos < 4:
                    break
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0:
                    raise FrameError(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameError(
                        f"frame of {size} bytes exceeds socket.request.max.bytes={self.max_frame_bytes}"
                    )
                if self.reserve is not None and not self.reserve(size):
                    self.blocked = True
                    break
                self._need = size
                pos += 4
            if end - pos < self._need:
                break
            with memoryview(buf) as mv:
                frames.append(bytes(mv[pos : pos + self._need]))
            pos += self._need
            self._need = None
        if pos:
            del buf[:pos]
        return frames

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
        return len(self._buf)


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
