#!/usr/bin/env bash
# Runs one benchmark on an earlier revision and on this checkout, alternately, RUNS times each
# (default 3), so that before/after figures come from one run on the same machine.
#   bench/before_after.sh REV SCRIPT [ARGS...]
#   e.g. bench/before_after.sh 4ae9387 coordinator.py --only gregor --seconds 3
set -euo pipefail
rev=$1; script=$2; shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
py="$here/.venv/bin/python"
old=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$old" >/dev/null 2>&1 || true' EXIT
git -C "$here" worktree add --detach "$old" "$rev" >/dev/null
for i in $(seq "${RUNS:-3}"); do
  for side in before after; do
    dir=$here; [ "$side" = before ] && dir=$old
    echo "=== $side ($i)"
    (cd "$dir" && PYTHONPATH="$dir/src:$dir" "$py" "bench/$script" "$@")
  done
done
