"""A branch's reply against plain decoding: Regenerate (sampled at 0.7) and Edit & resend of a code question, with
and without the earlier version's reply read first (issue 46, "Drafting from siblings").

For each of the first `--tasks` HumanEval problems (public, vendored in resources/human_eval) asked as the bench asks
them ("Complete this Python function..."), in one process on one target:

1. the first reply: greedy, plain decoding (what the user already has on screen; its text is the sibling);
2. Regenerate: the same question sampled at `--temperature` with one seed for every mode:
   - `none`: plain decoding;
   - `pld`: prompt lookup alone (no sibling: what a drafter that ignores the branch gets);
   - `siblings`: prompt lookup + the past-replies index holding the sibling only (the app's default drafter, with
     ReplyController's read_first: the earlier version is read first);
3. Edit & resend: the question with "Add type hints to the signature." appended, greedy, the same three modes
   (the greedy replies are checked identical to plain decoding).

The modes run alternated (the order rotates task by task), and every figure is a ratio of decode throughput (prompt
reading excluded: it is the same in every mode) summed over the tasks, against `none` in the same run.

    .venv/bin/python docs/measure/branch_drafting.py --tasks 10 --out /tmp/branch-embedded.json
    .venv/bin/python docs/measure/branch_drafting.py --target qwen2.5-coder-1.5b --tasks 10 --out /tmp/branch-qwen.json
"""

from __future__ import annotations

import argparse
import gzip
import json

from specchat import bench
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.sampling import SamplingParams
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.drafting.past_replies import SuffixIndex
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource
from specchat.resources import human_eval_problems

MODES = ("none", "pld", "siblings")
EDIT = "\n\nAdd type hints to the signature."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--out")
    args = parser.parse_args()

    questions = bench.human_eval_prompts(gzip.decompress(human_eval_problems().read_bytes()).decode("utf-8"))
    questions = [q.turns[0] for q in questions[:args.tasks]]
    pair = load_pair(ModelSource.parse(args.target))
    pair.target.native.settle()  # the kernel verdict and the cost curve, as an app that has idled has them
    tokenizer = pair.target.tokenizer
    siblings = SuffixIndex()
    engines = {"none": pair.engine("none"), "pld": pair.engine("pld"),
               "siblings": pair.engine("history", history=siblings)}
    greedy = GenerationConfig(max_new_tokens=args.max_new_tokens)
    for engine in engines.values():  # warm: the first generation of an engine measures its costs
        engine.generate(build_prompt_ids(tokenizer, [Message("user", questions[0])]), GenerationConfig(16))

    rows = []
    for number, question in enumerate(questions):
        ids = build_prompt_ids(tokenizer, [Message("user", question)])
        first = engines["none"].generate(ids, greedy)
        siblings._clear()
        siblings.add(first.token_ids)  # what read_first puts at the newest end of the index
        sampled = GenerationConfig(max_new_tokens=args.max_new_tokens, seed=1000 + number,
                                   sampling=SamplingParams(temperature=args.temperature))
        edited = build_prompt_ids(tokenizer, [Message("user", question + EDIT)])
        order = MODES[number % 3:] + MODES[:number % 3]
        row = {"task": number, "regenerate": {}, "edit": {}}
        for mode in order:
            row["regenerate"][mode] = figures(engines[mode].generate(ids, sampled))
            row["edit"][mode] = figures(engines[mode].generate(edited, greedy))
        row["edit_identical"] = all(row["edit"][m]["token_ids"] == row["edit"]["none"]["token_ids"] for m in MODES)
        rows.append(row)
        print(f"[{number + 1}/{len(questions)}] " + "  ".join(
            f"{kind} " + " ".join(f"{m} {row[kind][m]['decode_s'] * 1000:.0f}ms/{row[kind][m]['tokens']}"
                                  for m in MODES) for kind in ("regenerate", "edit")), flush=True)

    summary = {kind: {mode: ratio(rows, kind, mode) for mode in MODES[1:]} for kind in ("regenerate", "edit")}
    summary["edit_identical"] = all(row["edit_identical"] for row in rows)
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump({"command": "docs/measure/branch_drafting.py", "settings": vars(args), "summary": summary,
                       "rows": rows}, file, indent=1)


def figures(result) -> dict:
    stats = result.stats
    return {"tokens": len(result.token_ids), "decode_s": stats.wall_s - stats.prefill_s,
            "proposed": stats.draft_proposed, "accepted": stats.draft_accepted, "passes": stats.target_passes,
            "token_ids": list(result.token_ids)}


def ratio(rows: list[dict], kind: str, mode: str) -> dict:
    """Decode tokens per second of `mode` over plain decoding's, summed over the tasks, with the lowest task's."""
    def speed(row, m):
        return row[kind][m]["tokens"] / max(row[kind][m]["decode_s"], 1e-9)
    total = (sum(r[kind][mode]["tokens"] for r in rows) / sum(r[kind][mode]["decode_s"] for r in rows)) / \
        (sum(r[kind]["none"]["tokens"] for r in rows) / sum(r[kind]["none"]["decode_s"] for r in rows))
    accepted = sum(r[kind][mode]["accepted"] for r in rows)
    tokens = sum(r[kind][mode]["tokens"] for r in rows)
    return {"speedup": round(total, 3), "lowest": round(min(speed(r, mode) / speed(r, "none") for r in rows), 3),
            "accepted_share": round(accepted / max(tokens, 1), 3)}


if __name__ == "__main__":
    main()
