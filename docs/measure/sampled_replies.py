"""Sampled replies against plain decoding, on questions no policy here was tuned on: the first turns of 20 Spec-Bench
questions (every 24th line of resources/spec_bench/question.jsonl, the first-reply set of docs/performance.md),
each sampled at `--temperature` with one seed for every mode, plain decoding (`none`) and prompt lookup (`pld`)
alternated question by question in one process. The figure is decode throughput (prompt reading excluded: the same
in both modes) summed over the questions, against `none`; the modes' samples differ (the same distribution, other
draws), so their lengths do too.

    .venv/bin/python docs/measure/sampled_replies.py [--target SRC] [--max-new-tokens 128] [--out FILE]

Run it from another tree with PYTHONPATH=that-tree to compare two versions side by side (docs/performance.md,
"Sampled replies price on the measured curve").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.sampling import SamplingParams
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource

QUESTIONS = Path(__file__).resolve().parents[2] / "resources" / "spec_bench" / "question.jsonl"
MODES = ("none", "pld")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--out")
    args = parser.parse_args()
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines()
    questions = [json.loads(line)["turns"][0] for line in lines[::24]][:20]
    pair = load_pair(ModelSource.parse(args.target))
    pair.target.native.settle()  # the kernel verdict and the cost curve, as an app that has idled has them
    tokenizer = pair.target.tokenizer
    engines = {mode: pair.engine(mode) for mode in MODES}
    for engine in engines.values():  # warm: the first generation of an engine measures its costs
        engine.generate(build_prompt_ids(tokenizer, [Message("user", questions[0])]), GenerationConfig(16))
    rows = []
    for number, question in enumerate(questions):
        ids = build_prompt_ids(tokenizer, [Message("user", question)])
        config = GenerationConfig(max_new_tokens=args.max_new_tokens, seed=2000 + number,
                                  sampling=SamplingParams(temperature=args.temperature))
        row = {}
        for mode in (MODES if number % 2 == 0 else MODES[::-1]):
            stats = engines[mode].generate(ids, config).stats
            row[mode] = {"tokens": stats.new_tokens, "decode_s": stats.wall_s - stats.prefill_s,
                         "proposed": stats.draft_proposed, "accepted": stats.draft_accepted}
        rows.append(row)
    speed = {m: sum(r[m]["tokens"] for r in rows) / sum(r[m]["decode_s"] for r in rows) for m in MODES}
    lowest = min((r["pld"]["tokens"] / r["pld"]["decode_s"]) / (r["none"]["tokens"] / r["none"]["decode_s"])
                 for r in rows)
    summary = {"pld_over_none": round(speed["pld"] / speed["none"], 3), "lowest": round(lowest, 3),
               "none_tok_s": round(speed["none"], 1), "drafted": sum(r["pld"]["proposed"] > 0 for r in rows),
               "accepted_share": round(sum(r["pld"]["accepted"] for r in rows) /
                                       max(sum(r["pld"]["tokens"] for r in rows), 1), 3)}
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(json.dumps({"settings": vars(args), "summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
