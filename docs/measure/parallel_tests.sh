#!/usr/bin/env bash
# The test suite under load (docs/reliability.md): three runs in a row of what `make test` runs after its setup,
# with a second full run looping alongside. Both on a clone of one commit (edits to the working tree cannot reach
# them), both with OMP_NUM_THREADS=1 so that the two runs share the cores. Results: $OUT/summary.
# Usage: docs/measure/parallel_tests.sh [COMMIT]   (from the repository root, after `make setup`)
set -u
ROOT=$(pwd) OUT=${OUT:-/tmp/parallel-tests} PY=${PY:-$(pwd)/.venv/bin/python}
rm -rf "$OUT" && mkdir -p "$OUT" && git clone -q "$ROOT" "$OUT/tree" && git -C "$OUT/tree" checkout -q "${1:-HEAD}"
cd "$OUT/tree"
export OMP_NUM_THREADS=1 PYTHONPATH="$OUT/tree"  # child processes (tests/faults/test_kill.py) use the clone too
( n=0; while [ ! -f "$OUT/done" ]; do n=$((n + 1))
    "$PY" -m pytest -q -p no:cacheprovider > "$OUT/alongside-$n.log" 2>&1
    echo "alongside $n: rc=$? $(tail -1 "$OUT/alongside-$n.log")" >> "$OUT/summary"; done ) &
for i in 1 2 3; do
    "$PY" -m pytest -q -p no:cacheprovider > "$OUT/run-$i.log" 2>&1
    echo "run $i: rc=$? $(tail -1 "$OUT/run-$i.log")" >> "$OUT/summary"
done
touch "$OUT/done"; wait
