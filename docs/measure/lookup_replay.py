"""Prompt lookup replayed on the plain replies of a `specchat bench` report: each reply's steps through the real
lookup and draft-length policy (one acceptance book across the replies, as an engine keeps it), every draft checked
against the reply itself, priced on a kept cost curve. Prints each reply's decoding speedup (plain steps over the
replay's passes, the prompt left out) beside the hindsight oracle's on the same curve, and the share of the
oracle's gain. No model runs: a second, quick look at a drafter change on replies already measured.

    .venv/bin/python docs/measure/lookup_replay.py REPORT.json CATEGORY [--target SRC] [--before]

CATEGORY: proofread, humanevalfix, quixbugs or humaneval (the report's plain mode, "none", must have run it). The
curve is the one kept for the target's file on 2 threads (the bench's run measured it). --before: without taking up
interrupted copies (PromptLookupDrafter._resumed_copy), for a side by side.
docs/how-it-works.md, "Taking up an interrupted copy".
"""

import argparse
import gzip
import json
from pathlib import Path

from specchat import bench
from specchat.bench.oracle import oracle_turn
from specchat.engine.chat_prompt import Message, build_prompt_ids, reply_text_ids
from specchat.engine.decoding.adaptive import AcceptanceBook, DraftLengthPolicy, StepCosts
from specchat.engine.decoding.cost_curve import CostCurve
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.drafting.lookup import PromptLookupDrafter
from specchat.engine.loading.load import LoadOptions, load_model
from specchat.models.sources import ModelSource
from specchat.resources import doc_suite_texts, human_eval_fix_problems, human_eval_problems, quixbugs_programs

SUITES = {
    "proofread": lambda: bench.proofread_prompts(_text(doc_suite_texts())),
    "humanevalfix": lambda: bench.human_eval_fix_prompts(_text(human_eval_fix_problems())),
    "quixbugs": lambda: bench.quixbugs_prompts(_text(quixbugs_programs())),
    "humaneval": lambda: bench.human_eval_prompts(_text(human_eval_problems())),
}
K_MAX = GenerationConfig().k_max  # the longest draft the engine checks (63)


def _text(path) -> str:
    return gzip.decompress(Path(path).read_bytes()).decode("utf-8")


def replay(prompt: list[int], reply: list[int], drafter: PromptLookupDrafter, curve: CostCurve,
           book: AcceptanceBook) -> tuple[float, int, int]:
    """(passes, drafted, accepted) of the reply decoded with the lookup: each step proposes, the policy picks K,
    the draft is accepted as far as it agrees with the reply, and the policy learns it (as in speculative._step)."""
    policy = DraftLengthPolicy(k_max=K_MAX, costs=StepCosts(curve, frozen=True), book=book)
    context, at, passes, drafted, accepted = list(prompt) + reply[:1], 1, 0.0, 0, 0
    while at < len(reply):
        limit = min(len(reply) - at - 1, K_MAX)
        draft = drafter.propose(context, limit) if limit > 0 and policy.wants_lookup() else None
        k = policy.choose(min(limit, len(draft.tokens)), draft.acceptance_class, free=True) if draft else 0
        truth = reply[at:]
        n = 0
        while n < k and draft.tokens[n] == truth[n]:
            n += 1
        passes += curve.ratio(k + 1)
        policy.observe(k, n, verify_s=curve.ratio(k + 1), draft_s=0.0,
                       acceptance_class=draft.acceptance_class if draft and k else None, free=True)
        if draft and draft.tokens and not k:
            policy.observe_shadow(draft.acceptance_class, draft.tokens[0] == truth[0])
        context.extend(reply[at:at + n + 1])
        drafted, accepted, at = drafted + k, accepted + n, at + n + 1
    return passes, drafted, accepted


def target_and_curve(source: str):
    """(the target's loaded model, the cost curve kept for its file on 2 threads); exits where none is kept."""
    target = load_model(ModelSource.parse(source), LoadOptions(threads=2))
    curve = target.native.known_cost_curve()
    if curve is None:
        raise SystemExit(f"no cost curve is kept for {target.name} on 2 threads: run specchat bench on it first")
    return target, curve


def plain_replies(report_path: str, category: str, tokenizer) -> list[tuple[str, list[int], list[int]]]:
    """(question id, prompt ids, reply ids) of each reply of plain decoding (mode "none") of `category` in a
    `specchat bench` report."""
    report = json.loads(Path(report_path).read_text())
    prompts = {p.question_id: p for p in SUITES[category]()}
    return [(r["question_id"], build_prompt_ids(tokenizer, [Message("user", prompts[r["question_id"]].turns[0])]),
             reply_text_ids(tokenizer, r["text"]))
            for r in report["records"] if r["mode"] == "none" and r["category"] == category]


def replay_suite(replies, curve: CostCurve, drafter: PromptLookupDrafter, book: AcceptanceBook,
                 show: bool = False) -> tuple[float, float, float]:
    """(decoding speedup, share of the oracle's gain, worst reply's speedup) of the replies replayed in turn with
    one book, as an engine keeps it; `show`: a line per reply."""
    plain = ours = oracle = 0.0
    worst = float("inf")
    for question_id, prompt, reply in replies:
        passes, drafted, accepted = replay(prompt, reply, drafter, curve, book)
        best = oracle_turn(prompt, reply, curve, 0.0, 1.0)
        plain, ours, oracle = plain + len(reply) - 1, ours + passes, oracle + best.passes
        worst = min(worst, (len(reply) - 1) / passes)
        if show:
            print(f"{question_id:28} {len(reply):4} tokens  {(len(reply) - 1) / passes:5.2f}x  "
                  f"alpha {accepted / max(drafted, 1):.2f}  oracle {best.decode_speedup:5.2f}x")
    speedup, ceiling = plain / ours, plain / oracle
    return speedup, (speedup - 1) / (ceiling - 1), worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report")
    parser.add_argument("category", choices=sorted(SUITES))
    parser.add_argument("--target", default="qwen2.5-coder-1.5b")
    parser.add_argument("--before", action="store_true")
    args = parser.parse_args()
    target, curve = target_and_curve(args.target)
    drafter = PromptLookupDrafter()
    if args.before:
        drafter._resumed_copy = lambda ids, k: None
    replies = plain_replies(args.report, args.category, target.tokenizer)
    speedup, share, worst = replay_suite(replies, curve, drafter, AcceptanceBook(), show=True)
    print(f"overall: decoding {speedup:.3f}x, {share:.0%} of the oracle's gain, worst reply {worst:.2f}x")


if __name__ == "__main__":
    main()
