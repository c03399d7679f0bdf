"""pytest-xdist's ``--dist loadgroup`` scheduling, made safe when a worker process dies.

pytest-xdist 3.8 deadlocks the whole run after a worker crash under loadgroup (its issues 1323,
1327 and 1378): the crashed worker's finished groups go back on the queue as empty work units, its
crashed test is queued again, and a replacement worker given a single test waits forever for a
second one. CI then ends on its overall timeout with no name for what crashed. Here a crash is
reported as the failure of the test that was running (xdist's own report), the rest of that
worker's unfinished work goes to the others, and the run ends.
"""

from __future__ import annotations

from xdist.scheduler.loadgroup import LoadGroupScheduling
from xdist.workermanage import WorkerController


class CrashSafeLoadGroupScheduling(LoadGroupScheduling):
    def remove_node(self, node: WorkerController) -> str | None:
        workload = self.assigned_work.pop(node)
        unfinished = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
        if not unfinished:
            return None
        # a worker runs its tests in the order they were sent: the first unfinished one crashed
        crashed = next(nodeid for unit in unfinished.values() for nodeid, done in unit.items() if not done)
        for unit in unfinished.values():
            if crashed in unit:
                unit[crashed] = True  # reported failed by xdist; run again it would take the next worker down
        for scope, unit in unfinished.items():
            if not all(unit.values()):
                self.workqueue[scope] = unit
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed

    def _reschedule(self, node: WorkerController) -> None:
        """A worker runs a test only once it knows the next one (or that there is none): give it
        at least two pending tests while there is work, and tell it to finish when there is none."""
        if node.shutting_down:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) < 2:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()
