"""On llama.cpp's fastest kernels, where do drafted greedy replies part from plain decoding, and how close were
plain decoding's top two tokens there (docs/exactness.md, "When replies are not bit-identical")?

    .venv/bin/python docs/measure/divergence_margins.py --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
        --per-task 2 --max-new-tokens 64 --k 4 --modes pld,model

Each Spec-Bench question of the seeded sample (its first turn) is answered by plain decoding and by each mode with
K fixed (every check a pass of K+1 rows, where the repacked kernels round differently); for each reply that differs,
plain decoding's top-2 logit margin at the first differing token is printed, with how often plain decoding's steps
have a margin that small at all.
"""

import argparse
import json

from specchat.bench import load_prompts, spec_bench_sample
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.divergence import divergence_margin, plain_margins
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.load import LoadOptions
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource
from specchat.resources import spec_bench_questions

NEAR_TIE = 1.0  # logits: as tests/engine/test_llama_kernels.py


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft")
    parser.add_argument("--per-task", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--modes", default="pld,model")
    parser.add_argument("--out")
    args = parser.parse_args()
    pair = load_pair(ModelSource.parse(args.target), ModelSource.parse(args.draft) if args.draft else None,
                     LoadOptions(exactness="distribution"))
    runner = pair.target.native.runner()
    lines = spec_bench_questions().read_text(encoding="utf-8").splitlines()
    prompts = spec_bench_sample(load_prompts(lines, "Spec-Bench"), args.per_task)
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k, adaptive_k=False)
    modes = args.modes.split(",")
    plain_engine, engines = pair.engine("none"), {mode: pair.engine(mode) for mode in modes}
    rows, all_margins = [], []
    for prompt in prompts:
        ids = build_prompt_ids(pair.target.tokenizer, [Message("user", prompt.turns[0])])
        plain = list(plain_engine.generate(ids, config).token_ids)
        all_margins += plain_margins(runner, ids, plain)
        for mode, engine in engines.items():
            reply = list(engine.generate(ids, config).token_ids)
            margin = divergence_margin(runner, ids, plain, reply)
            rows.append({"question_id": prompt.question_id, "category": prompt.category, "mode": mode,
                         "identical": margin is None, "margin": margin})
            print(f"{prompt.category:15s} q{prompt.question_id:<4} {mode:6s} "
                  + ("identical" if margin is None else f"parts at a margin of {margin:.3f}"), flush=True)
    near = sum(m < NEAR_TIE for m in all_margins) / max(len(all_margins), 1)
    print(f"\nplain decoding's steps with a top-2 margin under {NEAR_TIE}: {near:.1%} of {len(all_margins)}")
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        margins = [r["margin"] for r in mine if not r["identical"]]
        print(f"{mode}: {sum(r['identical'] for r in mine)} of {len(mine)} identical; divergences at margins "
              + (", ".join(f"{m:.3f}" for m in sorted(margins)) or "(none)")
              + (f"; all under {NEAR_TIE}" if all(m < NEAR_TIE for m in margins) else "; NOT all near-ties"))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump({"rows": rows, "plain_near_tie_share": near, "plain_steps": len(all_margins)}, out, indent=1)


if __name__ == "__main__":
    main()
