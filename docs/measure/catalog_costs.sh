#!/usr/bin/env bash
# The step costs behind the model catalog's predicted speedups (docs/catalog.md): `specchat costs` on random weights
# of each measured target shape, with its draft's shape, merged with the date, the commands, torch's version and the
# CPU into resources/catalog_costs.json. Random weights cost what real ones do; acceptance is not measured here.
# Usage: docs/measure/catalog_costs.sh [OUT.json]   (from the repository root, after `make setup`)
set -eu
PY=${PY:-.venv/bin/python}
OUT=${1:-resources/catalog_costs.json}
WORK=$(mktemp -d)  # kept if a step fails, so that finished measurements are not lost
# K up to 8 (verify passes of 1..9 tokens), 3 timed repeats after a warm-up, a short alpha = 1 ceiling run: a few
# minutes a shape on 2 cores instead of half an hour with the defaults.
COMMON="--max-n 9 --repeats 3 --context 256 --k 4 --tokens 16 --alphas 0.5,0.7,0.9 --json"
# One torch thread unless told otherwise: with another program on the cores, a two-thread op waits for its slower
# thread and the curve turns to noise (docs/catalog.md has what that looked like); one thread is slowed far less.
# OMP_NUM_THREADS=N measures with N threads (the cost table records the count).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

measure() {  # NAME ARGS...: one `specchat costs` run, its report in $WORK/NAME.json; beside it its command, its
    # time and the load average before and after (other work on the cores makes the curve noisy: judge it by these)
    local name=$1; shift
    local command="specchat costs $* $COMMON"
    echo "$name: $command" >&2
    local started=$SECONDS load_before
    load_before=$(cut -d' ' -f1 /proc/loadavg)
    "$PY" -m specchat costs "$@" $COMMON > "$WORK/$name.json"
    printf '%s\n%s\n%s\n%s\n' "$command" $((SECONDS - started)) "$load_before" "$(cut -d' ' -f1 /proc/loadavg)" \
        > "$WORK/$name.meta"
}

available_gib() { awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo; }

measure smollm2-360m --shape smollm2-360m --draft-shape smollm2-135m
measure smollm2-1.7b --shape smollm2-1.7b --draft-shape smollm2-135m
# The 7B class: Llama-3.1-8B is 32 GB at float32, more than a 24 GB machine has, so it runs at bfloat16 (16 GB, with
# its 1B draft 18.5 GB) and without packed weights (they would copy the weights), and only with 21 GiB free.
if [ "$(available_gib)" -ge 21 ]; then
    measure llama-3.1-8b --shape llama-3.1-8b --draft-shape llama-3.2-1b --dtype bfloat16 --no-packed-weights
else
    echo "llama-3.1-8b: skipped, $(available_gib) GiB available (needs 21)" | tee "$WORK/skipped" >&2
fi

"$PY" - "$WORK" "$OUT" <<'PYTHON'
import datetime, json, os, platform, sys
from pathlib import Path

import torch
import transformers

import specchat

work, out = Path(sys.argv[1]), Path(sys.argv[2])
cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")), platform.processor() or platform.machine())
runs = []
for report in sorted(work.glob("*.json"), key=lambda p: p.stat().st_mtime):
    command, seconds, load_before, load_after = (report.with_suffix(".meta")).read_text().split("\n")[:4]
    data = json.loads(report.read_text())
    runs.append({"shape": report.stem, "draft_shape": data.get("draft", "").removeprefix("random ") or None,
                 "command": command, "wall_s": int(seconds),
                 "load_average": {"before": float(load_before), "after": float(load_after)}, "report": data})
skipped = (work / "skipped").read_text().strip() if (work / "skipped").exists() else None
document = {
    "schema_version": 1,
    "measured": {"date": datetime.date.today().isoformat(), "script": "docs/measure/catalog_costs.sh",
                 "torch": torch.__version__, "transformers": transformers.__version__, "specchat": specchat.__version__,
                 "python": platform.python_version(), "cpu": cpu, "cores": os.cpu_count(),
                 "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                 "torch_threads": torch.get_num_threads(),
                 "skipped": [skipped] if skipped else []},
    "runs": runs,
}
out.write_text(json.dumps(document, indent=1) + "\n")
print(f"wrote {out}: {len(runs)} runs", file=sys.stderr)
PYTHON
rm -rf "$WORK"
