"""Producer ids (cluster/producer_ids.py): never handed out twice, even after a crash."""

from __future__ import annotations

from gregor.cluster.producer_ids import BLOCK, ProducerIdManager


def test_ids_continue_after_the_persisted_block_on_restart(tmp_path):
    ids = ProducerIdManager(tmp_path)
    ids.load()
    assert [ids.next_id() for _ in range(3)] == [0, 1, 2]
    assert (tmp_path / "producer-id-block").read_text() == f"{BLOCK}\n"
    again = ProducerIdManager(tmp_path)  # a restart, even without a clean shutdown
    again.load()
    assert again.next_id() == BLOCK
    assert [again.next_id() for _ in range(BLOCK)][-1] == 2 * BLOCK
    assert (tmp_path / "producer-id-block").read_text() == f"{3 * BLOCK}\n"
