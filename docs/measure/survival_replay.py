"""An acceptance model tried and not kept: per class, the chance that a draft's j-th token is right given the ones
before it (a hazard per span of positions, learned from the checks), in place of one alpha per class with
expected_tokens' independent tokens. Replays the plain replies of `specchat bench` reports through the real lookup
and policy (docs/measure/lookup_replay.py) with the book as it is and with this one over a grid of its two
settings, and prints each suite's decoding speedup, share of the oracle's gain and worst reply. No model runs.

    .venv/bin/python docs/measure/survival_replay.py proofread=P.json humanevalfix=H.json quixbugs=Q.json ...

Why it was tried: a proofread copy runs on until the next correction, so once a check of it is rejected one
alpha says a long draft will fail where the copy most often goes on. docs/performance.md, "The suites on the EPYC
again (sixth session)".
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # lookup_replay, beside this file
import lookup_replay as lr  # noqa: E402
from specchat.engine.decoding import adaptive  # noqa: E402
from specchat.engine.decoding.adaptive import AcceptanceBook, DraftLengthPolicy  # noqa: E402

EDGES = (1, 2, 3, 5, 9, 17, 33, 65)  # span b holds draft positions EDGES[b] .. EDGES[b + 1] - 1
SPANS = len(EDGES) - 1


def span(j: int) -> int:
    return next((b for b in range(SPANS) if j < EDGES[b + 1]), SPANS - 1)


@dataclass
class SurvivalBook(AcceptanceBook):
    """Per class and span: (rejections, positions checked), each check weighing `decay` times the next; a span's
    hazard is its counts with `weight` checks of the span before it (the first: 1 - the class's prior)."""

    decay: float = 0.95
    weight: float = 2.0
    spans: dict = field(default_factory=dict)

    def record(self, key, k, n):
        super().record(key, k, n)
        fails, risk = self.spans.setdefault(key, ([0.0] * SPANS, [0.0] * SPANS))
        for b in range(SPANS):
            fails[b] *= self.decay
            risk[b] *= self.decay
        for j in range(1, min(n + 1, k) + 1):
            risk[span(j)] += 1
        if n < k:
            fails[span(n + 1)] += 1

    def expected(self, key, most: int) -> list[float]:
        """expected[k]: the tokens a check of k drafts of this class yields, the target's own included."""
        fails, risk = self.spans.get(key, ([0.0] * SPANS, [0.0] * SPANS))
        hazard, q = [], 1 - adaptive.prior(key)
        for b in range(SPANS):
            q = max((fails[b] + self.weight * q) / (risk[b] + self.weight), 0.005)
            hazard.append(q)
        out, alive = [1.0], 1.0
        for j in range(1, most + 1):
            alive *= 1 - hazard[span(j)]
            out.append(out[-1] + alive)
        return out


def best_on_survival(self, limit, alpha, key, free, smallest=0):
    """DraftLengthPolicy._best with the survival book's expected tokens."""
    most = min(self.k_max, limit)
    sizes = [n - 1 for n in self.costs.curve.sizes if smallest <= n - 1 <= most] or [smallest]
    expected = self.book.expected(key, max(sizes))
    rate, k = max((expected[k] / self.costs.cost(k, free), -k) for k in sizes)
    return -k, rate


def main() -> None:
    reports = dict(arg.split("=", 1) for arg in sys.argv[1:])
    target, curve = lr.target_and_curve("qwen2.5-coder-1.5b")
    suites = {cat: lr.plain_replies(path, cat, target.tokenizer) for cat, path in reports.items()}
    original = DraftLengthPolicy._best
    variants = [("as it is", AcceptanceBook)] + [
        (f"survival decay {d} weight {w}", lambda d=d, w=w: SurvivalBook(decay=d, weight=w))
        for d in (0.9, 0.95, 0.97) for w in (1.0, 2.0, 4.0)]
    for label, make_book in variants:
        DraftLengthPolicy._best = original if make_book is AcceptanceBook else best_on_survival
        cells = []
        for cat, replies in suites.items():
            speedup, share, worst = lr.replay_suite(replies, curve, lr.PromptLookupDrafter(), make_book())
            cells.append(f"{cat} {speedup:.3f}x {share:4.0%} worst {worst:.2f}x")
        print(f"{label:32}", " | ".join(cells), flush=True)
    DraftLengthPolicy._best = original


if __name__ == "__main__":
    main()
