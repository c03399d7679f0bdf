"""The aborted-transaction index (log/transaction_index.py): Kafka's .txnindex format and search."""

from __future__ import annotations

import struct

from gregor.log.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex


def test_file_format_is_kafkas_byte_for_byte(tmp_path):
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex", exists=False)
    idx.append(AbortedTxn(producer_id=7, first_offset=10, last_offset=15, last_stable_offset=16))
    idx.append(AbortedTxn(-2, 20, 30, 12))
    data = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert ENTRY_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 7, 10, 15, 16) + struct.pack(">hqqqq", 0, -2, 20, 30, 12)
    assert data[:34].hex() == "0000" "0000000000000007" "000000000000000a" "000000000000000f" "0000000000000010"
    again = TransactionIndex(idx.path)
    assert again.entries == [AbortedTxn(7, 10, 15, 16), AbortedTxn(-2, 20, 30, 12)]


def test_missing_file_is_empty_and_nothing_is_created(tmp_path):
    idx = TransactionIndex(tmp_path / "x.txnindex")
    assert len(idx) == 0 and not idx.path.exists()
    idx.flush()
    assert not idx.path.exists()


def test_torn_tail_is_ignored(tmp_path):
    path = tmp_path / "t.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 3, 4).encode() + b"\x00\x00\x01")
    assert TransactionIndex(path).entries == [AbortedTxn(1, 0, 3, 4)]


def test_truncate_to_drops_markers_at_or_after_the_offset(tmp_path):
    idx = TransactionIndex(tmp_path / "t.txnindex", exists=False)
    for i in range(3):
        idx.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10 + 6))
    idx.truncate_to(15)  # the second marker is at 15: gone
    assert [e.producer_id for e in TransactionIndex(idx.path).entries] == [0]
    idx.truncate_to(5)
    assert not idx.path.exists() and idx.entries == []


def test_collect_overlapping_and_completion(tmp_path):
    idx = TransactionIndex(tmp_path / "t.txnindex", exists=False)
    idx.append(AbortedTxn(1, 0, 5, 6))     # before the range
    idx.append(AbortedTxn(2, 3, 12, 4))    # overlaps [10, 20)
    idx.append(AbortedTxn(3, 19, 25, 19))  # overlaps: starts below 20
    idx.append(AbortedTxn(4, 20, 30, 31))  # starts at the bound: no; its LSO passes the bound: complete
    idx.append(AbortedTxn(5, 15, 40, 41))  # after completion: not looked at
    out: list[AbortedTxn] = []
    assert idx.collect(10, 20, out) is True
    assert [e.producer_id for e in out] == [2, 3]
    out = []
    assert idx.collect(100, 200, out) is False and out == []


def test_failed_append_is_written_at_flush(tmp_path, monkeypatch):
    import builtins

    idx = TransactionIndex(tmp_path / "t.txnindex", exists=False)
    real_open = builtins.open

    def failing(path, mode="r", *a, **kw):
        if str(path).endswith(".txnindex") and "a" in mode:
            raise OSError(28, "No space left on device")
        return real_open(path, mode, *a, **kw)

    monkeypatch.setattr(builtins, "open", failing)
    idx.append(AbortedTxn(1, 0, 1, 2))
    monkeypatch.setattr(builtins, "open", real_open)
    assert idx.entries == [AbortedTxn(1, 0, 1, 2)] and not idx.path.exists()
    idx.flush()
    assert TransactionIndex(idx.path).entries == [AbortedTxn(1, 0, 1, 2)]
