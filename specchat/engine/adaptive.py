"""Choosing the draft length K from live acceptance and measured costs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens produced by one verification of k draft tokens if each is accepted with probability alpha
    (independently): 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha); the +1 is the target's own token."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass
class StepCosts:
    """Measured costs of one step, shared by all generations of an engine: they belong to the hardware and the
    models, not to the prompt, so a new reply starts with the curve the previous ones measured."""

    verify: dict[int, float] = field(default_factory=dict)  # EMA seconds of a target pass over n tokens (record())
    draft_per_token: float | None = None  # EMA seconds per drafted token
    frozen: bool = False  # a fixed model that ignores timings
    # verify_estimate(n) until the next record(): the policy asks for every n up to K_max+1 two or three times a
    # step, and each estimate sorts the measurements (0.3 ms a step in a profile of eagle-hybrid)
    _estimates: dict[int, float] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def fixed(cls, model_drafter: bool) -> StepCosts:
        """Costs that do not depend on the clock, for seeded sampling: with timings steering K, the same seed
        could draw its random numbers at different draft positions and give another sample. Relative units:
        one target pass = 1, +10% per extra token verified, a draft model token 0.1."""
        return cls(verify={1: 1.0, 2: 1.1}, draft_per_token=0.1 if model_drafter else 0.0, frozen=True)

    def record(self, k: int, verify_s: float, draft_s: float | None) -> None:
        """draft_s None: a free proposal (prompt lookup inside a model drafter), not a sample of the model's cost."""
        if self.frozen:
            return
        self._estimates.clear()
        previous = self.verify.get(k + 1)
        self.verify[k + 1] = verify_s if previous is None else 0.5 * previous + 0.5 * verify_s
        if k and draft_s is not None:
            per_token = draft_s / k
            previous = self.draft_per_token
            self.draft_per_token = per_token if previous is None else 0.7 * previous + 0.3 * per_token

    def step(self, k: int, free: bool = False) -> float:
        return self.verify_estimate(k + 1) + (0.0 if free else k * (self.draft_per_token or 0.0))

    def verify_estimate(self, n: int) -> float:
        estimate = self._estimates.get(n)
        if estimate is None:
            estimate = self._estimates[n] = self._estimate(n)
        return estimate

    def _estimate(self, n: int) -> float:
        """The cost of verifying n tokens, never more than a measured cost for more tokens (checking fewer tokens
        cannot cost more; a higher measurement is noise, e.g. a pass that also timed the output head's layouts).

        Unmeasured sizes: between measured ones, a line through the two nearest; above them, that line's slope or
        +10% per token while only one size has been seen (a longer draft must earn its place); below them, 10% less
        per token than the cheapest measurement above. That last guess is optimistic on purpose: a policy that has
        only ever measured long drafts must believe short ones are cheaper, or it never tries one (from a single
        noisy measurement at 5 tokens it would otherwise keep proposing 5 at an acceptance of 0.16)."""
        points = sorted(self.verify.items())
        above = [cost for size, cost in points if size >= n]
        cap = min(above) if above else float("inf")
        if n in self.verify:
            return min(self.verify[n], cap)
        if n < points[0][0]:
            return max(min(cost * (1 - 0.1 * (size - n)) for size, cost in points), 0.25 * points[0][1])
        if len(points) == 1:
            (n0, c0), = points
            return c0 * (1 + 0.1 * (n - n0))
        (n0, c0), (n1, c1) = sorted(sorted(points, key=lambda point: abs(point[0] - n))[:2])
        slope = max((c1 - c0) / (n1 - n0), 0.0)
        return min(max(c0 + slope * (n - n0), 0.25 * points[0][1]), cap)  # a line may not reach zero cost


@dataclass
class _Acceptance:
    """Exponentially weighted Bernoulli counts; each step is k trials cut at the first failure (n successes and
    one failure if n < k). Starts from a prior with the weight of three trials."""

    successes: float
    trials: float = 3.0
    plain_streak: int = 0  # consecutive steps where K = 0 won

    @classmethod
    def with_prior(cls, confidence: int | None) -> _Acceptance:
        """Prior alpha: 0.5 without a confidence; c / (c + 2) for a confidence c (a longer n-gram match is
        likelier to continue: 0.33 for one token, 0.5 for two, 0.75 for six). Live counts soon outweigh it."""
        prior = 0.5 if confidence is None else confidence / (confidence + 2)
        return cls(successes=3.0 * prior)

    @property
    def alpha(self) -> float:
        return self.successes / self.trials

    def add(self, k: int, n: int, decay: float) -> None:
        self.successes = decay * self.successes + n
        self.trials = decay * self.trials + n + (1 if n < k else 0)


@dataclass
class DraftLengthPolicy:
    """Picks K per step to maximise expected tokens per second.

    throughput(K) = E[tokens | K, alpha] / (verify_cost(K+1) + K * draft_cost_per_token)

    alpha is estimated from recent steps, separately for each confidence class a drafter reports (prompt lookup:
    the length of the n-gram it matched; on this project's suite a 1-token match has its first token accepted about
    22% of the time and a 6-token match about 92%). verify_cost(n) is measured, not assumed flat: on a CPU checking
    8 tokens can cost twice as much as checking 1. K = 0 (plain decoding) wins when drafts keep failing, which is
    what keeps speculative decoding from being much slower than plain decoding. A K = 1 probe after a run of such
    steps lets alpha recover when drafts get good again; the run is long enough that probes cost at most
    `probe_budget` of the time (at least `probe_every` steps): where checking 2 tokens costs little more than 1
    (transformers on this CPU) that is every 6 steps, where it costs twice as much (llama.cpp here) every ~50.
    `acceptance` may be shared between generations (the engine does so for greedy decoding, whose output does not
    depend on K), so a reply starts from what earlier ones measured rather than from the prior. With adaptive off,
    K is fixed.
    """

    k: int = 5
    k_max: int = 16
    adaptive: bool = True
    decay: float = 0.7
    probe_every: int = 6
    probe_budget: float = 0.02
    acceptance: dict = field(default_factory=dict)  # confidence class -> _Acceptance
    costs: StepCosts = field(default_factory=StepCosts)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("K must be at least 1")
        self.k_max = max(self.k_max, self.k)

    def alpha(self, confidence: int | None = None) -> float:
        return self._class(confidence).alpha

    def choose(self, limit: int, confidence: int | None = None, free: bool = False) -> int:
        """Draft length for the next step, never more than `limit` (tokens left to generate minus the target's own).
        `free`: the proposal is already made and cost nothing (prompt lookup), so only verification is charged."""
        if limit <= 0:
            return 0
        if not self.adaptive or not self.costs.verify:
            return min(self.k, limit)
        acceptance = self._class(confidence)
        best_k, _ = self._best(limit, acceptance, free)
        if best_k == 0:
            acceptance.plain_streak += 1
            if acceptance.plain_streak >= self._probe_interval():
                acceptance.plain_streak = 0
                return 1
        else:
            acceptance.plain_streak = 0
        return best_k

    def _probe_interval(self) -> int:
        """Plain steps between probes: a probe costs verify(2) - verify(1) more than the plain step it replaces."""
        extra = self.costs.verify_estimate(2) / self.costs.verify_estimate(1) - 1.0
        return max(self.probe_every, math.ceil(extra / self.probe_budget))

    def free_beats_model(self, limit: int, confidence: int | None) -> bool:
        """For a drafter with both: is a free proposal of this confidence class worth more tokens per second than
        running the draft model? Compares the best expected rate of each (alpha per class, measured costs)."""
        if limit <= 0 or not self.adaptive or not self.costs.verify:
            return confidence is not None and confidence >= 3  # before any measurement: long matches only
        free_k, free_rate = self._best(limit, self._class(confidence), free=True)
        _, model_rate = self._best(limit, self._class(None), free=False)
        return free_k > 0 and free_rate >= model_rate

    def _best(self, limit: int, acceptance: _Acceptance, free: bool) -> tuple[int, float]:
        best_k, best_rate = 0, 0.0
        for k in range(0, min(self.k_max, limit) + 1):
            rate = expected_tokens(acceptance.alpha, k) / self.costs.step(k, free)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def observe(self, k: int, n_accepted: int, verify_s: float, draft_s: float,
                confidence: int | None = None, free: bool = False) -> None:
        """Record one verified step: k proposed, n accepted, and what it cost."""
        self.costs.record(k, verify_s, None if free else draft_s)
        if k:
            self._class(confidence).add(k, n_accepted, self.decay)

    def _class(self, confidence: int | None) -> _Acceptance:
        if confidence not in self.acceptance:
            self.acceptance[confidence] = _Acceptance.with_prior(confidence)
        return self.acceptance[confidence]
