"""Choosing the draft length K from live acceptance and measured costs."""

from __future__ import annotations

import math
from collections import deque
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

    # Seconds of a target pass over n tokens: the lower quartile of the last SAMPLES passes of that size (record()).
    # Not a mean: on a shared machine one pass that waited for a core (several times its usual cost) lifted a running
    # mean of verify(1) enough to make long checks look cheap, and the policy then verified 10 and 16 tokens at once.
    verify: dict[int, float] = field(default_factory=dict)
    draft_per_token: float | None = None  # EMA seconds per drafted token
    frozen: bool = False  # a fixed model that ignores timings
    # verify_estimate(n) until the next record(): the policy asks for every n up to K_max+1 two or three times a
    # step, and each estimate sorts the measurements (which showed up in profiles of eagle-hybrid)
    _estimates: dict[int, float] = field(default_factory=dict, repr=False, compare=False)
    _samples: dict[int, deque] = field(default_factory=dict, repr=False, compare=False)

    SAMPLES = 16
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
        samples = self._samples.setdefault(k + 1, deque(maxlen=self.SAMPLES))
        samples.append(verify_s)
        self.verify[k + 1] = sorted(samples)[(len(samples) - 1) // 4]
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

        Unmeasured sizes: between measured ones, a line through the two nearest; above them, half the larger of
        that line's slope and the mean slope from the smallest measured size, or +10% per token while only one size
        has been seen. Above the measurements the guess is optimistic on purpose, because K grows only 2 past them
        (DraftLengthPolicy._best), so a wrong guess costs one step and is then measured: llama.cpp here costs 2x
        one pass for two tokens and about 0.5x more per token after that, and a straight line through 1 and 2 kept
        even a reply asked again (every draft accepted) at K = 0. Nor may two sizes that measured alike, or the
        wrong way round, make every longer check look free (hence the mean slope). Below them, 10% less
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
        if n > points[-1][0]:  # from the largest measurement on: half the slope, at least half the mean slope
            (first, c_first), (n0, c0) = points[0], points[-1]
            slope = 0.5 * max(slope, (c0 - c_first) / (n0 - first))
        return min(max(c0 + slope * (n - n0), 0.25 * points[0][1]), cap)  # a line may not reach zero cost


@dataclass
class _Acceptance:
    """Exponentially weighted Bernoulli counts; each step is k trials cut at the first failure (n successes and
    one failure if n < k). Starts from a prior with the weight of three trials.

    `gain` is the ledger behind the floor: a decayed sum, over this class's drafting steps, of the seconds each saved
    against plain decoding (the tokens it produced times a one-token pass, minus what the step cost). The expected
    rate says whether drafting should pay; the ledger says whether it has, and drafting stops while it is in the red.
    """

    successes: float
    trials: float = 3.0
    plain_streak: int = 0  # consecutive steps where K = 0 won
    gain: float = 0.0  # seconds saved against plain decoding, decayed

    @classmethod
    def with_prior(cls, key: int | tuple[str, int] | None) -> _Acceptance:
        """Prior alpha: 0.5 without a confidence; for a match of length c, c / (c + 2) from the context (a longer
        n-gram match is likelier to continue: 0.33 for one token, 0.75 for six) and c / (c + 1) from past replies
        (0.89 for eight tokens). Where checking two tokens costs two passes, only the latter starts above the
        break-even (about 0.85): a long match in an earlier reply is most often the same request again (its whole
        reply then drafts at once: 1.43x on Spec-Bench questions asked twice), while an optimistic context prior
        cost 4% on Spec-Bench's summarization and RAG (pld 0.99x -> 0.95x overall). Live counts soon outweigh
        either."""
        if isinstance(key, tuple):
            prior = key[1] / (key[1] + 1)
        else:
            prior = 0.5 if key is None else key / (key + 2)
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

    The floor: estimates can be wrong in ways the model above cannot see (acceptance that is not independent from
    position to position, a class whose text changed, a noisy clock), so each class also keeps a ledger of what its
    drafting steps actually saved or lost against plain decoding (_Acceptance.gain). While a class's ledger is more
    than `floor_tokens` one-token passes in the red, it drafts only in budgeted probes, with the K the model picks, so
    that a good run can bring it back. A fresh policy with no measured costs decodes plainly until it has measured a
    pass rather than drafting blind.
    """

    k: int = 5
    k_max: int = 16
    adaptive: bool = True
    decay: float = 0.7
    probe_every: int = 6
    probe_budget: float = 0.01
    floor_tokens: float = 2.0
    gain_decay: float = 0.8
    acceptance: dict = field(default_factory=dict)  # acceptance class (Draft.acceptance_class) -> _Acceptance
    costs: StepCosts = field(default_factory=StepCosts)

    ALPHA_CAP = 0.95
    K_STRIDE = 2

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("K must be at least 1")
        self.k_max = max(self.k_max, self.k)

    def alpha(self, confidence=None) -> float:
        return self._class(confidence).alpha

    def choose(self, limit: int, confidence=None, free: bool = False) -> int:
        """Draft length for the next step, never more than `limit` (tokens left to generate minus the target's own).
        `confidence`: the proposal's acceptance class. `free`: the proposal is already made and cost nothing (prompt
        lookup), so only verification is charged."""
        if limit <= 0:
            return 0
        if not self.adaptive:
            return min(self.k, limit)
        if not self.costs.verify:
            return 0  # measure a plain pass first: drafting blind on a steep cost curve can cost several passes
        acceptance = self._class(confidence)
        best_k, _ = self._best(limit, acceptance, free)
        in_the_red = acceptance.gain < -self.floor_tokens * self.costs.verify_estimate(1)
        if best_k == 0 or in_the_red:
            acceptance.plain_streak += 1
            if acceptance.plain_streak >= self._probe_interval(max(best_k, 1), free):
                acceptance.plain_streak = 0
                return max(best_k, 1)
            return 0
        acceptance.plain_streak = 0
        return best_k

    def _probe_interval(self, k: int, free: bool) -> int:
        """Plain steps between probes: a probe of k tokens costs verify(k+1) - verify(1) more than the plain step it
        replaces (plus drafting, for a model), so probing every that / probe_budget steps costs at most the budget."""
        extra = self.costs.step(k, free) / self.costs.verify_estimate(1) - 1.0
        return max(self.probe_every, math.ceil(extra / self.probe_budget))

    def free_beats_model(self, limit: int, confidence) -> bool:
        """For a drafter with both: is a free proposal of this confidence class worth more tokens per second than
        running the draft model? Compares the best expected rate of each (alpha per class, measured costs)."""
        if limit <= 0 or not self.adaptive or not self.costs.verify:
            length = confidence[1] if isinstance(confidence, tuple) else confidence
            return length is not None and length >= 3  # before any measurement: long matches only
        free_k, free_rate = self._best(limit, self._class(confidence), free=True)
        _, model_rate = self._best(limit, self._class(None), free=False)
        return free_k > 0 and free_rate >= model_rate

    def _best(self, limit: int, acceptance: _Acceptance, free: bool) -> tuple[int, float]:
        """The K with the highest expected rate. Two guards against trusting too little data: alpha counts as at
        most ALPHA_CAP (a run of copied tokens drove a 6-token match class to 0.99, and then 16-token checks), and K
        grows at most K_STRIDE past the largest size measured so far, so the cost of a longer check is measured
        before it is relied on."""
        best_k, best_rate = 0, 0.0
        alpha = min(acceptance.alpha, self.ALPHA_CAP)
        top = self.k_max if self.costs.frozen else max(self.costs.verify) - 1 + self.K_STRIDE
        for k in range(0, min(self.k_max, limit, top) + 1):
            rate = expected_tokens(alpha, k) / self.costs.step(k, free)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def observe(self, k: int, n_accepted: int, verify_s: float, draft_s: float,
                confidence=None, free: bool = False) -> None:
        """Record one verified step: k proposed, n accepted, and what it cost."""
        plain_pass = self.costs.verify_estimate(1) if self.costs.verify else None
        self.costs.record(k, verify_s, None if free else draft_s)
        if k:
            acceptance = self._class(confidence)
            acceptance.add(k, n_accepted, self.decay)
            if plain_pass is not None and not self.costs.frozen:
                # plain decoding would have spent one pass per token this step produced
                saved = (n_accepted + 1) * plain_pass - verify_s - (0.0 if free else draft_s)
                acceptance.gain = self.gain_decay * acceptance.gain + saved

    def _class(self, confidence) -> _Acceptance:
        if confidence not in self.acceptance:
            self.acceptance[confidence] = _Acceptance.with_prior(confidence)
        return self.acceptance[confidence]
