"""A draft cut tried and not kept: a lookup draft ends before the first prompt token it copies that the target found
surprising when it read the prompt (log p(token | the text before) < log TAU), on the idea that a proofread copy
breaks at a misspelling and a code fix at its bug, where the text surprised the model. Replays the plain replies of
`specchat bench` reports through the real lookup and policy (docs/measure/lookup_replay.py), each draft cut as
above, and prints each suite's decoding speedup, share of the oracle's gain and worst reply, for a grid of TAU and
of how many tokens before the surprising one the draft ends (BACK). The prompts' token probabilities come from
llama-cpp-python on the target's file (one pass over each prompt with every row's logits); nothing else runs.

    .venv/bin/python docs/measure/surprise_replay.py proofread=P.json quixbugs=Q.json humanevalfix=H.json ...

docs/performance.md, "The suites on the EPYC again (sixth session)", and the note of the eighth session.
"""

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # lookup_replay, beside this file
import lookup_replay as lr  # noqa: E402
from specchat.bench.oracle import oracle_turn  # noqa: E402
from specchat.engine.decoding.adaptive import AcceptanceBook, DraftLengthPolicy, StepCosts  # noqa: E402
from specchat.engine.drafting import lookup  # noqa: E402

GRID = [(None, 0), (1e-2, 0), (1e-3, 0), (1e-4, 0), (1e-5, 0), (1e-3, 1), (1e-4, 1), (1e-5, 1)]
_copied_from = [None]  # where the last draft's text starts in the context: continuation's newest occurrence
_continuation = lookup.continuation


def _recording_continuation(ids, starts, k):
    _copied_from[0] = int(starts[-1])
    return _continuation(ids, starts, k)


def prompt_logprobs(gguf: str, prompts: list[list[int]]) -> dict[tuple, np.ndarray]:
    """log p(prompt[i] | prompt[:i]) for every position of each prompt (0 at the first), by the target's file."""
    import llama_cpp

    llm = llama_cpp.Llama(gguf, n_ctx=4096, n_threads=2, logits_all=True, verbose=False)
    found = {}
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        scores = np.asarray(llm.scores[:len(ids)], dtype=np.float64)
        top = scores.max(1, keepdims=True)
        log_total = top[:, 0] + np.log(np.exp(scores - top).sum(1))
        logprob = np.zeros(len(ids))
        logprob[1:] = scores[np.arange(len(ids) - 1), ids[1:]] - log_total[:-1]
        found[tuple(ids)] = logprob
    return found


def replay(prompt, reply, curve, book, logprob, tau, back) -> float:
    """The replay's passes for one reply, as lookup_replay.replay, with each draft cut before a surprising token."""
    drafter = lookup.PromptLookupDrafter()
    policy = DraftLengthPolicy(k_max=lr.K_MAX, costs=StepCosts(curve, frozen=True), book=book)
    context, at, passes = list(prompt) + reply[:1], 1, 0.0
    while at < len(reply):
        limit = min(len(reply) - at - 1, lr.K_MAX)
        _copied_from[0] = None
        draft = drafter.propose(context, limit) if limit > 0 and policy.wants_lookup() else None
        tokens = draft.tokens if draft else []
        if tokens and tau is not None and _copied_from[0] is not None:
            for j in range(len(tokens)):
                where = _copied_from[0] + j
                if where < len(prompt) and logprob[where] < math.log(tau):
                    tokens = tokens[:max(0, j - back)]
                    break
        k = policy.choose(min(limit, len(tokens)), draft.acceptance_class, free=True) if tokens else 0
        truth = reply[at:]
        n = 0
        while n < k and tokens[n] == truth[n]:
            n += 1
        passes += curve.ratio(k + 1)
        policy.observe(k, n, verify_s=curve.ratio(k + 1), draft_s=0.0,
                       acceptance_class=draft.acceptance_class if draft and k else None, free=True)
        if draft and draft.tokens and not k:
            policy.observe_shadow(draft.acceptance_class, draft.tokens[0] == truth[0])
        context.extend(reply[at:at + n + 1])
        at += n + 1
    return passes


def main() -> None:
    reports = dict(arg.split("=", 1) for arg in sys.argv[1:])
    target, curve = lr.target_and_curve("qwen2.5-coder-1.5b")
    suites = {cat: lr.plain_replies(path, cat, target.tokenizer) for cat, path in reports.items()}
    logprobs = prompt_logprobs(target.source.location, [p for replies in suites.values() for _, p, _ in replies])
    lookup.continuation = _recording_continuation
    for tau, back in GRID:
        cells = []
        for cat, replies in suites.items():
            book, plain, ours, oracle, worst = AcceptanceBook(), 0.0, 0.0, 0.0, float("inf")
            for _, prompt, reply in replies:
                passes = replay(prompt, reply, curve, book, logprobs[tuple(prompt)], tau, back)
                plain, ours = plain + len(reply) - 1, ours + passes
                oracle += oracle_turn(prompt, reply, curve, 0.0, 1.0).passes
                worst = min(worst, (len(reply) - 1) / passes)
            speedup, ceiling = plain / ours, plain / oracle
            cells.append(f"{cat} {speedup:.3f}x {(speedup - 1) / (ceiling - 1):4.0%} worst {worst:.2f}x")
        print(f"tau {tau!s:6} back {back}:", " | ".join(cells), flush=True)
    lookup.continuation = _continuation


if __name__ == "__main__":
    main()
