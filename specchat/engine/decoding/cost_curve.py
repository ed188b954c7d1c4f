"""The verification cost curve: what a target pass over n new tokens costs, in one-token passes, for n up to 64.

On a CPU the curve is steep and uneven (llama.cpp switches kernels by the rows of a pass: docs/performance.md, "The
verification cost curve"), so a draft pays only when it is long and right, and the draft length that pays most can
be read only off the measured curve. `measure_curve` times passes of every size in PASS_SIZES after a cached prefix,
each against one-token passes taken beside it (the machine's speed moves; a ratio measured side by side does not),
while the model loads, for a llama.cpp target and a torch one alike (ModelPair.engine). The policy (adaptive.py)
chooses only among those measured sizes. An engine given no curve prices on FIXED_CURVE; a sampled reply (whose K
must not follow the clock) prices on its engine's curve, frozen (StepCosts.fixed).

A curve is kept per file, llama.cpp build, CPU and placement, as the kernel verdict is (kernels.verdict_key),
in the user cache (`costs.json`), so it costs its seconds once. A GPU's static runner pads a pass to its compiled
length, so there each size is priced at the length it really runs (its curve is flat between those lengths).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ...core import paths
from ...core.fs import read_kept, write_kept

# The pass sizes measured (a pass verifies K drafts and the context's last token: K = n - 1). Every size up to 6, then
# the sizes where llama.cpp's CPU kernels change and a grid between them, up to 64: the policy never drafts a length
# whose pass it has not measured.
PASS_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64)
CURVE_PREFIX = 256  # cached positions before the measured passes (a reply's passes run after its prompt)
ROUNDS = 3  # each size is timed this many times, each beside one-token passes; the median counts
CURVES_FILE = "costs.json"


@dataclass(frozen=True)
class CostCurve:
    """`ratios[n]`: seconds of a pass over n new tokens (logits for every row, as a verification needs) divided by
    seconds of a one-token pass, for each measured n (1 among them, at 1.0). Never decreasing in n."""

    ratios: Mapping[int, float]

    def __post_init__(self) -> None:
        if 1 not in self.ratios or any(n < 1 or r <= 0 for n, r in self.ratios.items()):
            raise ValueError("a cost curve needs a one-token pass and positive costs")

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(sorted(self.ratios))

    def ratio(self, n: int) -> float:
        """The cost of a pass of n tokens in one-token passes: measured, else the next larger size's (fewer tokens
        never cost more), else a line through the largest (only a fixed K drafts a size the curve lacks)."""
        if n in self.ratios:
            return self.ratios[n]
        larger = [m for m in self.sizes if m >= n]
        top = self.sizes[-1]
        return self.ratios[larger[0]] if larger else self.ratios[top] * n / top

    def best_speedup(self, copied: int) -> float:
        """The most a draft of `copied` tokens, all accepted, can give over plain decoding on this curve: (K + 1)
        tokens for ratio(K + 1), over the measured sizes with K <= copied."""
        return max((n / r for n, r in self.ratios.items() if n - 1 <= copied), default=1.0)

    def to_json(self) -> dict[str, float]:
        return {str(n): round(r, 4) for n, r in sorted(self.ratios.items())}

    @classmethod
    def from_json(cls, data: object) -> CostCurve | None:
        """A kept curve, or None for anything that is not one (a damaged or foreign cache entry)."""
        if not isinstance(data, dict):
            return None
        try:
            ratios = {int(n): float(r) for n, r in data.items()}
            return cls(monotone(ratios))
        except (TypeError, ValueError):
            return None


# The curve of an engine given none (built outside ModelPair: tests, measurements) and of every sampled reply
# (StepCosts.fixed): +10% of a one-token pass per extra token verified, about the torch path's on a CPU
# (docs/performance-torch.md), at every size of PASS_SIZES.
FIXED_CURVE = CostCurve({n: round(1.0 + 0.1 * (n - 1), 4) for n in PASS_SIZES})


def monotone(ratios: Mapping[int, float]) -> dict[int, float]:
    """The curve with each size costing no more than any larger one (a pass over fewer tokens cannot cost more: a
    higher figure is noise) and none less than a one-token pass."""
    fixed: dict[int, float] = {}
    ceiling = float("inf")
    for n in sorted(ratios, reverse=True):
        ceiling = min(ceiling, ratios[n])
        fixed[n] = max(ceiling, 1.0) if n > 1 else 1.0
    return dict(sorted(fixed.items()))


def measure_curve(runner, sizes: Sequence[int] = PASS_SIZES, prefix: int = CURVE_PREFIX, rounds: int = ROUNDS,
                  clock: Callable[[], float] = time.perf_counter) -> CostCurve:
    """Times passes of each size after `prefix` cached tokens on `runner` (a TargetRunner: forward, new_cache,
    rollback), `rounds` times each, each time beside two one-token passes at the same position, and returns each
    size's median ratio to the faster of the two beside it. Sizes above the runner's room (its context window) are
    left out. Every pass keeps the logits of all its rows, as a verification does."""
    import torch

    window = getattr(runner, "context_window", 1 << 30)
    prefix = max(1, min(prefix, window // 2))
    sizes = sorted({1, *(n for n in sizes if 1 <= n and prefix + n < window)})
    vocab = runner.vocab_size
    tokens = [100 + (7919 * i) % max(vocab - 200, 1) for i in range(prefix + max(sizes))]
    device = getattr(runner, "device", None)  # a torch runner on a GPU reads its input there
    cache = runner.new_cache(len(tokens) + 1)
    runner.forward(torch.tensor([tokens[:prefix]], device=device), cache, keep=1, prefill=True)

    def timed(n: int) -> float:
        started = clock()
        logits = runner.forward(torch.tensor([tokens[prefix:prefix + n]], device=device), cache, keep=n)
        if logits.is_cuda:  # a GPU's pass is only queued: wait for it
            torch.cuda.synchronize(logits.device)
        seconds = clock() - started
        runner.rollback(cache, prefix)
        return seconds

    timed(max(sizes))  # the first pass of a size pays one-off work (buffers, kernel choice) on some backends
    ratios: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            one = min(timed(1), timed(1))
            ratios[n].append(timed(n) / one)
    runner.rollback(cache, 0)
    # Side by side, as the machine's speed moves with its other work; the median, as a pass that waited for a core
    # (or the first of its size) measures the wait. (The fastest pass of each size over the fastest one-token pass
    # of all gave the one-token pass 38 chances to be fast and each size 2: with tests running beside it, it read a
    # 2-token pass of the embedded model on torch at 3.1 one-token passes.)
    return CostCurve(monotone({n: statistics.median(r) if n > 1 else 1.0 for n, r in ratios.items()}))


def kept_curve(key: str, cache_file: Path | None = None) -> CostCurve | None:
    """The curve kept under `key`, or None."""
    return CostCurve.from_json(read_kept(cache_file or paths.cache_file(CURVES_FILE)).get(key))


def curve_for(key: str, measure: Callable[[], CostCurve], cache_file: Path | None = None) -> CostCurve:
    """The curve kept under `key` (kernels.verdict_key's parts: file, build, CPU, placement), else
    `measure()`d and kept."""
    cache_file = cache_file or paths.cache_file(CURVES_FILE)
    kept = read_kept(cache_file)
    curve = CostCurve.from_json(kept.get(key))
    if curve is not None:
        return curve
    curve = measure()
    kept[key] = curve.to_json()
    write_kept(cache_file, kept, "the verification cost curve")
    return curve
