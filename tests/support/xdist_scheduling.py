"""pytest-xdist's ``--dist loadgroup`` scheduling, grouping by the groups the tests say and made
safe when a worker process dies.

Groups: pytest 9.2's structured node ids make xdist's way of passing a test's group (a suffix it
writes into the worker's node id) a silent no-op (xdist issue 1386): every test became a group of
its own, module fixtures started on every worker, and the Spark tests ran on all three at once.
Here each worker writes the groups of what it collected (tests/conftest.py) to a folder the
controller made, and the scheduler reads them.

pytest-xdist 3.8 deadlocks the whole run after a worker crash under loadgroup (its issues 1323,
1327 and 1378): the crashed worker's finished groups go back on the queue as empty work units, its
crashed test is queued again, and a replacement worker given a single test waits forever for a
second one. CI then ends on its overall timeout with no name for what crashed. Here the test that
was running when its worker died runs once more on a new worker (said on stderr); a second crash is
reported as its failure (xdist's own report); the rest of the worker's unfinished work goes to the
others, and the run ends.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from xdist.scheduler.loadgroup import LoadGroupScheduling
from xdist.workermanage import WorkerController

GROUPS_ENV = "GREGOR_TEST_GROUPS"


def prepare_group_folder() -> None:
    """In the controller, before the workers start (they inherit the environment)."""
    if GROUPS_ENV not in os.environ:
        os.environ[GROUPS_ENV] = tempfile.mkdtemp(prefix="gregor-test-groups-")


def write_groups(worker: str, groups: dict[str, str]) -> None:
    """In a worker: node id -> group of every test it collected (atomically: the controller may
    read as soon as the collection is reported)."""
    folder = os.environ.get(GROUPS_ENV)
    if not folder:
        return
    tmp = Path(folder) / f".{worker}.json"
    tmp.write_text(json.dumps(groups))
    tmp.replace(Path(folder) / f"{worker}.json")


def _read_groups() -> dict[str, str]:
    folder = os.environ.get(GROUPS_ENV)
    if folder:
        for f in sorted(Path(folder).glob("gw*.json")):
            groups: dict[str, str] = json.loads(f.read_text())
            return groups
    return {}


class CrashSafeLoadGroupScheduling(LoadGroupScheduling):
    _groups: dict[str, str] | None = None

    def __init__(self, config: object, log: object = None) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        self._crashed: set[str] = set()

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            self._groups = _read_groups()
        group = self._groups.get(nodeid)
        if group is None and "@" in nodeid:  # xdist's suffix, where it still works
            group = self._groups.get(nodeid.rsplit("@", 1)[0])
        if group is not None:
            return group
        return super()._split_scope(nodeid)
    def remove_node(self, node: WorkerController) -> str | None:
        workload = self.assigned_work.pop(node)
        unfinished = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
        if not unfinished:
            return None
        # a worker runs its tests in the order they were sent: the first unfinished one crashed
        crashed = next(nodeid for unit in unfinished.values() for nodeid, done in unit.items() if not done)
        again = crashed not in self._crashed
        self._crashed.add(crashed)
        if again:
            # once: the test runs again on a new worker (a client library dying under a loaded machine
            # is not the test's verdict); a second crash is its failure
            sys.stderr.write(f"\nworker {node.gateway.id} died while running {crashed}: running it again on a new "
                             "worker\n")
        else:
            for unit in unfinished.values():
                if crashed in unit:
                    unit[crashed] = True  # reported failed by xdist; run again it would take the next worker down
        for scope, unit in unfinished.items():
            if not all(unit.values()):
                self.workqueue[scope] = unit
        for other in self.assigned_work:
            self._reschedule(other)
        return None if again else crashed

    def _reschedule(self, node: WorkerController) -> None:
        """A worker runs a test only once it knows the next one (or that there is none): give it
        at least two pending tests while there is work, and tell it to finish when there is none."""
        if node.shutting_down:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) < 2:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()
