"""The draft-length policy: for each proposal, the K that yields the most expected tokens per unit of cost.

K drafts checked yield expected_tokens(alpha, K) tokens (core/acceptance.py) for curve(K + 1) one-token passes
(cost_curve.py), plus K draft tokens for a draft model or a head; plain decoding yields one a pass, so K = 0 unless
a K beats that (as llama.cpp's common/speculative.cpp, vLLM's n-gram proposer and transformers'
candidate_generator.py choose K). Three rules more, each against a measured loss: alpha per acceptance class, capped
(AcceptanceBook, `cap`); a free proposal drafted only once its class was seen right (`choose`); a losing draft model
probed within PROBE_BUDGET of the time (`_probe`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ...core.acceptance import expected_tokens
from .cost_curve import FIXED_CURVE, CostCurve

PROMPT = "prompt"  # an AcceptanceClass source: prompt lookup in the context (the prompt and the reply so far)
PAST_REPLIES = "past_replies"  # an AcceptanceClass source: lookup in the user's past replies (drafting/past_replies)
RESUMED = "resumed"  # an AcceptanceClass source: prompt lookup taking up a copy an edit interrupted (drafting/lookup)


@dataclass(frozen=True)
class AcceptanceClass:
    """Proposals of similar acceptance: `source` (PROMPT, PAST_REPLIES or RESUMED) and `length`, the tokens of the
    context's end the lookup matched. A draft model's or a head's proposals have no class (None in the book)."""

    source: str
    length: int | None = None


def prior(key: AcceptanceClass | None) -> float:
    """The acceptance a class starts from: 0.5 for a model's drafts; c / (c + 4) for a context match of c tokens
    (0.2 for one, 0.67 for eight: most short matches do not go on) and c / (c + 2) for one in past replies (0.8 for
    eight: that long, most often the same request again); a resumed copy's as a context match's (0.2 where the copy
    was found again, 0 where a replaced token is assumed). Low on purpose: live counts soon outweigh it."""
    if key is None or key.length is None:
        return 0.5
    return key.length / (key.length + (2 if key.source == PAST_REPLIES else 4))


def cap(key: AcceptanceClass | None) -> float:
    """The most a class's alpha may count for (a short match's luck never buys a long check): 0.99 for 16+ tokens
    (a copy in progress: only then does a 32- or 64-token check pay on a steep curve), 0.97 for 8-15, else 0.9."""
    length = (key.length or 0) if key is not None else 0
    return 0.9 if length < 8 else 0.97 if length < 16 else 0.99


@dataclass
class AcceptanceBook:
    """Per class: (hits, trials) of its draft tokens, a check of k with n accepted being n hits in n + 1 trials (n
    in k). Each trial weighs DECAY times the next: about the last ten count, however long the checks (simulated on
    steep curves, a decay per step lost 2-4% to runs of luck, this 0-1.5%). A class not in it has its prior."""

    counts: dict[AcceptanceClass | None, tuple[float, float]] = field(default_factory=dict)
    right: set = field(default_factory=set)  # the classes with a draft token accepted at least once

    DECAY, PRIOR_TRIALS = 0.9, 3.0  # PRIOR_TRIALS: the prior's weight in trials

    def alpha(self, key: AcceptanceClass | None) -> float:
        """The estimated acceptance of one draft token of `key`'s class."""
        hits, trials = self.counts.get(key, (prior(key), 1.0))
        return hits / trials

    def record(self, key: AcceptanceClass | None, k: int, n: int) -> None:
        """Adds a check of k drafts of `key`'s class, of which the first n were accepted."""
        hits, trials = self.counts.get(key, (self.PRIOR_TRIALS * prior(key), self.PRIOR_TRIALS))
        if n:
            self.right.add(key)
        new = n + (1 if n < k else 0)  # the trials in order, the rejected one (if any) last, weighing 1
        weight = (1 - self.DECAY ** new) / (1 - self.DECAY)
        new_hits = weight if n == k else self.DECAY * (1 - self.DECAY ** n) / (1 - self.DECAY)
        self.counts[key] = (self.DECAY ** new * hits + new_hits, self.DECAY ** new * trials + weight)


# A draft model's token in one-token passes of the target where neither its live timing nor its weights' size
# (ModelPair.engine) says more: a draft a tenth of its target's size.
DRAFT_PRIOR = 0.1


@dataclass
class StepCosts:
    """What a step costs, in one-token passes of the target: the curve's ratio for its pass, plus a draft model's
    (or head's) tokens at `draft_token_s` (seconds a token, from live steps) over a plain step's seconds now (the
    fastest of the last 16 steps, each its seconds over its pass's ratio: a pass that waited for a core, or the
    first of its size, is slow, never fast), else at `draft_prior` passes (ModelPair.engine: the draft's weights
    over the target's), else free. `frozen`: ignores the clock."""

    curve: CostCurve = FIXED_CURVE
    draft_prior: float | None = None
    frozen: bool = False
    draft_token_s: float | None = None
    _plain: deque = field(default_factory=lambda: deque(maxlen=16), repr=False, compare=False)

    @classmethod
    def fixed(cls, curve: CostCurve = FIXED_CURVE, draft_prior: float = 0.0) -> StepCosts:
        """Costs that do not depend on the clock, for sampling: with timings steering K, the same seed could draw
        its random numbers at other draft positions and give another sample. `curve`: the engine's, measured once
        and kept (so it stays put from reply to reply); `draft_prior`: a draft model's token in one-token passes."""
        return cls(curve, draft_prior=draft_prior, frozen=True)

    def draft_cost(self) -> float:
        """A draft model's token in one-token passes: measured, else its prior, else nothing."""
        if self.draft_token_s is None or not self._plain:
            return self.draft_prior or 0.0
        return self.draft_token_s / min(self._plain)

    def cost(self, k: int, free: bool) -> float:
        """One step of k drafts, in one-token passes; a free proposal's drafts cost nothing."""
        return self.curve.ratio(k + 1) + (0.0 if free else k * self.draft_cost())

    def record(self, k: int, verify_s: float, draft_s: float | None) -> None:
        """A step of k drafts that took verify_s seconds for all but its drafting, and draft_s for the draft model's
        passes (None: a free proposal, no sample of the model's cost)."""
        if self.frozen:
            return
        self._plain.append(verify_s / self.curve.ratio(k + 1))
        if k and draft_s is not None:
            previous, sample = self.draft_token_s, draft_s / k
            self.draft_token_s = sample if previous is None else 0.7 * previous + 0.3 * sample


@dataclass
class DraftLengthPolicy:
    """K for each step of one generation (`adaptive` off: always `k`, within the limit). `costs` and `book` may be
    the engine's, shared by its greedy replies (their output does not depend on K)."""

    k: int = 5
    k_max: int = 16
    adaptive: bool = True
    costs: StepCosts = field(default_factory=StepCosts)
    book: AcceptanceBook = field(default_factory=AcceptanceBook)
    _waited: int = 0  # plain steps since the paid class last drafted
    _misses: int = 0  # probes since it last drafted on its estimate, less two per fully accepted one
    _idle: int = 0  # steps since a free proposal was drafted or seen right (wants_lookup)

    PROBE_BUDGET, PROBE_EVERY, PROBE_BACKOFF = 0.01, 6, 3  # _probe
    LOOKUP_IDLE, LOOKUP_EVERY = 16, 4  # wants_lookup

    def choose(self, limit: int, acceptance_class: AcceptanceClass | None = None, free: bool = False) -> int:
        """The draft length for the next step, at most `limit` (the tokens left less the target's own). `free`: the
        proposal is made and cost nothing (prompt lookup); otherwise a draft model will run for K tokens."""
        if limit <= 0 or not self.adaptive:
            return min(self.k, limit) if limit > 0 else 0
        if free and acceptance_class not in self.book.right:
            return 0  # trials at no cost until one is right (observe_shadow): drafting on priors ran 0.92x plain
        k, _ = self._best(limit, self.book.alpha(acceptance_class), acceptance_class, free)
        if k and not free:  # the model drafts on its estimate: no probe owed
            self._waited = self._misses = 0
        return k if k or free else self._probe(limit)

    def wants_lookup(self) -> bool:
        """Whether to look up a free proposal this step. A lookup costs the same drafted or not (2% of a step on the
        embedded model): after LOOKUP_IDLE steps with none drafted or seen right, one in LOOKUP_EVERY, until one is."""
        return not self.adaptive or self._idle < self.LOOKUP_IDLE or self._idle % self.LOOKUP_EVERY == 0

    def _probe(self, limit: int) -> int:
        """K for a paid class whose estimate says 0 (only drafting shows if its drafts got better): its best K >= 1
        once the plain steps since make the probe's extra cost PROBE_BUDGET of their time (at least PROBE_EVERY,
        doubled per miss up to 2^PROBE_BACKOFF times), else 0; 0 for a model that could not pay even at `cap`."""
        if self._best(limit, cap(None), None, free=False)[0] == 0:
            return 0
        k, _ = self._best(limit, self.book.alpha(None), None, free=False, smallest=1)
        wait = max(self.PROBE_EVERY, math.ceil((self.costs.cost(k, False) - 1.0) / self.PROBE_BUDGET))
        self._waited += 1
        if self._waited < wait * 2 ** min(self._misses, self.PROBE_BACKOFF):
            return 0
        self._waited, self._misses = 0, self._misses + 1
        return k

    def _best(self, limit: int, alpha: float, key: AcceptanceClass | None, free: bool,
              smallest: int = 0) -> tuple[int, float]:
        """(K, expected tokens per one-token pass) for the best K >= smallest among the curve's sizes within the
        limit and k_max; on a tie the shorter K, so that K = 0 wins unless a draft strictly pays."""
        alpha, most = min(alpha, cap(key)), min(self.k_max, limit)
        sizes = [n - 1 for n in self.costs.curve.sizes if smallest <= n - 1 <= most] or [smallest]
        rate, k = max((expected_tokens(alpha, k) / self.costs.cost(k, free), -k) for k in sizes)
        return -k, rate

    def free_beats_model(self, limit: int, acceptance_class: AcceptanceClass | None) -> bool:
        """For a drafter with both: whether a free proposal of this class is worth more tokens per pass than the
        draft model's (a class never seen right: no; with a fixed K, a match of 3 tokens or more)."""
        if not self.adaptive:
            return acceptance_class is not None and (acceptance_class.length or 0) >= 3
        if limit <= 0 or acceptance_class not in self.book.right:
            return False
        free_k, free_rate = self._best(limit, self.book.alpha(acceptance_class), acceptance_class, free=True)
        return free_k > 0 and free_rate >= self._best(limit, self.book.alpha(None), None, free=False)[1]

    def observe(self, k: int, n_accepted: int, verify_s: float, draft_s: float,
                acceptance_class: AcceptanceClass | None = None, free: bool = False) -> None:
        """One verified step: k drafted, n accepted; verify_s the step's seconds but the draft model's (or head's),
        draft_s the draft model's. A plain step measures the plain step's seconds only."""
        self.costs.record(k, verify_s, None if free else draft_s)
        self._idle = 0 if k and free else self._idle + 1
        if k:
            self.book.record(acceptance_class, k, n_accepted)
        if k and not free and n_accepted == k:
            self._misses = max(self._misses - 2, 0)

    def observe_shadow(self, acceptance_class: AcceptanceClass | None, hit: bool) -> None:
        """A free proposal left undrafted, its first token against the one the target produced: a trial at no cost.
        For sampling the target's token is drawn from p, so it matches with p(x), a point-mass draft's acceptance."""
        self.book.record(acceptance_class, 1, int(hit))
        if hit:
            self._idle = 0
