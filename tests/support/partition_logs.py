"""Reading a partition log back as a consumer would."""

from __future__ import annotations

from gregor.log.partition_log import PartitionLog
from gregor.protocol.records import Record, decode_records, iter_batches


def read_all(plog: PartitionLog, start: int | None = None) -> list[Record]:
    """Every record from ``start`` to the end, following reads as a consumer would."""
    offset = plog.log_start_offset if start is None else start
    out = []
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).records
        got = False
        for h in iter_batches(data):
            for r in decode_records(data, h):
                if r.offset >= offset:
                    out.append(r)
                    got = True
            offset = h.next_offset
        assert got or not data
        if not data:
            break
    return out
