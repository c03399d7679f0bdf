"""Size-prefixed frames (int32 big-endian length + payload), bytes in, frames out.

The decoder never buffers more than one frame's worth of data: a size prefix larger than
``max_frame_bytes`` is reported as soon as the four prefix bytes arrive, before any of the
payload is read, so an oversized request costs no memory.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The peer sent something that cannot be a Kafka frame; the connection must be closed."""


class FrameDecoder:
    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need: int | None = None  # payload size of the frame being read

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every complete frame payload they finish."""
        self._buf += data
        frames: list[bytes] = []
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
                self._need = size
                pos += 4
            if end - pos < self._need:
                break
            frames.append(bytes(buf[pos : pos + self._need]))
            pos += self._need
            self._need = None
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
