"""The history drafter on repeated requests: a question asked again (a regenerated reply, the same e-mail fixed
twice) and a question like the ones before it.

For each question of the Spec-Bench sample (first turns only; `--per-task N`, the bench's seeded sample), in one
prompt-major run on the embedded target:

- `none`: plain decoding;
- `pld`: prompt lookup alone;
- `history`: prompt lookup + past replies, the index holding the replies to every earlier question of the run
  (what `specchat bench --modes history` measures: a user who asked those first);
- `again`: the same, after this question's own reply joined the index (the user asks it a second time).

Greedy, 128 new tokens; every output is checked identical to plain decoding. Prints ratios of decode throughput
(prompt processing excluded: it is the same in every mode) per task.

    .venv/bin/python docs/measure/history_repeat.py --per-task 10 --out bench-report-history-repeat.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

from specchat import bench
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.drafting.past_replies import SuffixIndex
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource
from specchat.resources import spec_bench_questions

MODES = ("none", "pld", "history", "again")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-task", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out")
    args = parser.parse_args()

    prompts = bench.load_prompts(spec_bench_questions().read_text(encoding="utf-8").splitlines(), "Spec-Bench")
    prompts = bench.spec_bench_sample(prompts, args.per_task)
    pair = load_pair(ModelSource.parse("embedded"))
    tokenizer = pair.target.tokenizer
    history = SuffixIndex()
    engines = {"none": pair.engine("none"), "pld": pair.engine("pld"),
               "history": pair.engine("history", history=history)}
    engines["again"] = engines["history"]  # one engine: what it learned carries over, as in the app
    config = GenerationConfig(max_new_tokens=args.max_new_tokens)
    warm = build_prompt_ids(tokenizer, [Message("user", prompts[0].turns[0])])
    for mode in ("none", "pld", "history"):
        engines[mode].generate(warm, GenerationConfig(max_new_tokens=16))

    rows = []
    for number, prompt in enumerate(prompts, 1):
        ids = build_prompt_ids(tokenizer, [Message("user", prompt.turns[0])])
        row = {"question_id": prompt.question_id, "category": prompt.category}
        for mode in MODES:
            result = engines[mode].generate(ids, config)
            stats = result.stats
            row[mode] = {"tokens": len(result.token_ids), "decode_s": stats.wall_s - stats.prefill_s,
                         "proposed": stats.draft_proposed, "accepted": stats.draft_accepted,
                         "passes": stats.target_passes, "token_ids": list(result.token_ids)}
            if mode == "history":
                history.add(result.token_ids)  # the reply is written: from now on it is history
        row["identical"] = all(row[m]["token_ids"] == row["none"]["token_ids"] for m in MODES)
        rows.append(row)
        print(f"[{number}/{len(prompts)}] {prompt.category:15s} q{prompt.question_id} "
              + " ".join(f"{m} {row[m]['decode_s'] * 1000:.0f} ms" for m in MODES), flush=True)

    summary = summarize(rows)
    print(f"\n{'task':15s} " + " ".join(f"{m:>9s}" for m in MODES[1:]) + "   tau(again)  identical")
    for task, figures in summary.items():
        print(f"{task:15s} " + " ".join(f"{figures[m]:8.2f}x" for m in MODES[1:])
              + f"   {figures['tau_again']:10.2f}  {figures['identical']}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump({"command": "docs/measure/history_repeat.py", "settings": vars(args), "summary": summary,
                       "rows": rows}, file, indent=1)


def summarize(rows: list[dict]) -> dict:
    """Per task and overall: decode throughput of each mode over plain decoding (total tokens / total decode
    seconds), tokens per target pass of `again`, and how many outputs were identical."""
    groups = defaultdict(list)
    for row in rows:
        groups[row["category"]].append(row)
        groups["overall"].append(row)
    summary = {}
    for task, members in groups.items():
        rate = {m: sum(r[m]["tokens"] for r in members) / max(sum(r[m]["decode_s"] for r in members), 1e-9)
                for m in MODES}
        summary[task] = {**{m: rate[m] / rate["none"] for m in MODES[1:]},  # tau: tokens per target pass
                         "tau_again": sum(r["again"]["tokens"] for r in members) / sum(r["again"]["passes"]
                                                                                       for r in members),
                         "identical": f"{sum(r['identical'] for r in members)}/{len(members)}"}
    return summary


if __name__ == "__main__":
    main()
