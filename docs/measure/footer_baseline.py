"""The chat footer's speedup against plain decoding, three ways, beside the speedup measured side by side.

For each prompt, on the embedded GGUF (greedy, prompt lookup, the app's default drafter), in one process:
plain decoding and prompt lookup alternated (plain, lookup, lookup, plain), then

- `measured`: lookup's decode speed over plain's on the same prompt (the two rounds' means): the truth;
- `calibrated`: lookup's over the app's load-time calibration (CALIBRATION_CHAT, 96 tokens), measured afresh before
  each prompt, so that the machine's drift does not count against it;
- `own steps`: lookup's over its own plain steps' speed (GenerationStats.plain_decode_tokens_per_s).

Prompts from public suites at several depths: Spec-Bench first turns (qa, summarization, rag), Spec-Bench's
multi-turn second turns after the target's own first reply, and the documents suite's proofreading texts
(ILCoWE). Prints each prompt's three ratios and, per group and overall, the mean absolute error of each against
`measured`.

    .venv/bin/python docs/measure/footer_baseline.py [--per-task N] [--max-new-tokens N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

from specchat import bench
from specchat.bench.suites import proofread_prompts
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource
from specchat.resources import spec_bench_questions

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = [Message("user", "Write three sentences about the sea.")]  # ui/session.py's CALIBRATION_CHAT


def prompts(per_task: int, tokenizer, plain) -> list[tuple[str, list[int]]]:
    """(group, prompt ids): first turns, second turns after the target's own greedy first reply, proofreading."""
    spec = bench.spec_bench_sample(bench.load_prompts(
        spec_bench_questions().read_text(encoding="utf-8").splitlines(), "Spec-Bench"), per_task)
    chosen = []
    for p in spec:
        if p.category in ("qa", "summarization", "rag"):
            chosen.append(("first turn", build_prompt_ids(tokenizer, [Message("user", p.turns[0])])))
        elif p.category == "multi_turn" and len(p.turns) > 1:
            first = plain.generate(build_prompt_ids(tokenizer, [Message("user", p.turns[0])]),
                                   GenerationConfig(max_new_tokens=256))
            chat = [Message("user", p.turns[0]), Message("assistant", first.text), Message("user", p.turns[1])]
            chosen.append(("second turn", build_prompt_ids(tokenizer, chat)))
    texts = gzip.open(ROOT / "resources" / "doc_suite" / "ilcowe-texts.jsonl.gz", "rt", encoding="utf-8").read()
    for p in proofread_prompts(texts)[:per_task]:
        chosen.append(("proofreading", build_prompt_ids(tokenizer, [Message("user", p.turns[0])])))
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-task", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--out", help="a JSON file for every run's statistics")
    args = parser.parse_args()
    pair = load_pair(ModelSource.parse("embedded"))
    pair.target.native.settle()  # the one-time measurements first, so that nothing runs beside the timings
    tokenizer = pair.target.tokenizer
    plain, lookup = pair.engine("none"), pair.engine("pld")
    config = GenerationConfig(max_new_tokens=args.max_new_tokens)
    calibration_ids = build_prompt_ids(tokenizer, CALIBRATION)
    plain.generate(calibration_ids, GenerationConfig(max_new_tokens=4))
    rows = []
    for group, ids in prompts(args.per_task, tokenizer, plain):
        calibrated = plain.generate(calibration_ids, GenerationConfig(max_new_tokens=96)).stats.decode_tokens_per_s
        runs = {"none": [], "pld": []}
        for mode in ("none", "pld", "pld", "none"):
            runs[mode].append((plain if mode == "none" else lookup).generate(ids, config).stats)
        speed = {m: statistics.mean(s.decode_tokens_per_s for s in runs[m]) for m in runs}
        own = [s.plain_decode_tokens_per_s for s in runs["pld"]]
        row = {"group": group, "prompt_tokens": len(ids), "new_tokens": runs["pld"][0].new_tokens,
               "plain_steps": runs["pld"][0].steps_by_k[0] if runs["pld"][0].steps_by_k else 0,
               "tau": runs["pld"][0].tau, "measured": speed["pld"] / speed["none"],
               "calibrated": speed["pld"] / calibrated,
               "own steps": (statistics.mean(s.decode_tokens_per_s / o for s, o in zip(runs["pld"], own))
                             if all(own) else None)}
        rows.append(row)
        row["runs"] = {m: [s.to_dict() for s in runs[m]] for m in runs}
        row["calibration"] = calibrated
        own_text = f"{row['own steps']:.2f}x" if row["own steps"] else "  -  "
        print(f"{group:12s} {len(ids):5d} tok  tau {row['tau']:.2f}  plain steps {row['plain_steps']:3d}  measured "
              f"{row['measured']:.2f}x  calibrated {row['calibrated']:.2f}x  own steps {own_text}", flush=True)
    print()
    for group in ("first turn", "second turn", "proofreading", "overall"):
        members = [r for r in rows if group in ("overall", r["group"])]
        with_own = [r for r in members if r["own steps"]]
        error = {way: statistics.mean(abs(r[way] - r["measured"]) for r in (with_own if way == "own steps"
                                                                             else members))
                 for way in ("calibrated", "own steps") if (with_own if way == "own steps" else members)}
        print(f"{group:12s} {len(members):2d} prompts  mean |error| calibrated {error.get('calibrated', 0):.3f}  "
              f"own steps {error.get('own steps', float('nan')):.3f} ({len(with_own)} with enough plain steps)")
    if args.out:
        Path(args.out).write_text(json.dumps({"command": "docs/measure/footer_baseline.py", "settings": vars(args),
                                              "rows": rows}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
