"""write_atomically from several threads at once: every write completes whole, none fails because
another writer renamed its temporary file away (replication-offset-checkpoint is written from the
event loop and from a worker thread)."""

import threading
from pathlib import Path

from gregor.atomic_file import write_atomically


def test_concurrent_writers_of_one_file(tmp_path: Path):
    target = tmp_path / "replication-offset-checkpoint"
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(200):
                write_atomically(target, f"{n} {i}\n".encode() * 50)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    lines = set(target.read_text().splitlines())
    assert len(lines) == 1  # one writer's whole content
    assert not list(tmp_path.glob("*.tmp"))
