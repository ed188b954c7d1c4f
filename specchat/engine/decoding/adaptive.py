"""Choosing the draft length K from live acceptance and measured costs."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ...core.acceptance import expected_tokens
from .cost_curve import CostCurve

CONTEXT = "context"  # an AcceptanceClass source: prompt lookup in the context (prompt + reply so far)
HISTORY = "history"  # an AcceptanceClass source: lookup in the user's past replies (engine/drafting/past_replies.py)


@dataclass(frozen=True)
class AcceptanceClass:
    """A class of proposals with similar acceptance, which the policy learns apart (its key in `acceptance`).

    `source`: where a model-free proposal came from (CONTEXT or HISTORY); `length`: how many tokens of the
    context's end it matched (a longer match is likelier to go on), None where the source has no such measure. A
    proposal with no class (Draft.acceptance_class None: a draft model's or head's) is in its drafter's one class.
    The priors of each class: _Acceptance.with_prior."""

    source: str
    length: int | None = None


@dataclass
class StepCosts:
    """Measured costs of one step, shared by all generations of an engine: they belong to the hardware and the
    models, not to the prompt, so a new reply starts with the curve the previous ones measured."""

    # Seconds of a step that verifies n tokens, all but the draft model's time: the target pass and the step's own
    # work (a lookup's proposal, acceptance, rollback, the policy), so that verify[1] is what a plain one-token step
    # costs on this machine, the baseline every draft must beat. The lower quartile of the last SAMPLES steps of
    # that size (record()). Not a mean: on a shared machine a pass that waits for a core costs several times its
    # usual time, and one such pass would lift a running mean of verify(1) enough to make long checks look cheap.
    verify: dict[int, float] = field(default_factory=dict)
    draft_per_token: float | None = None  # EMA seconds per drafted token: a draft model's or a head's own passes
    frozen: bool = False  # a fixed model that ignores timings
    # The verification cost curve measured while loading (cost_curve.py), or None (learned from live steps alone).
    # With a curve, K + 1 is always one of its measured sizes, each priced as a plain step's cost now (from every
    # live step: _record_on_curve) times its ratio.
    curve: CostCurve | None = None
    # A draft model's token in plain steps before its passes were timed (the ratio of its weights to the target's,
    # ModelPair.engine), or None: with a curve, a model that could not pay even if every draft were accepted is
    # never run, not even in a probe (DraftLengthPolicy.choose).
    draft_prior: float | None = None
    since_plain: int = 0  # drafting steps since the last plain one (the last fresh measurement of the baseline)
    # verify_estimate(n) until the next record(): the policy asks for every n up to K_max+1 two or three times a
    # step, and each estimate sorts the measurements, so each size is worked out once between measurements
    _estimates: dict[int, float] = field(default_factory=dict, repr=False, compare=False)
    # size -> the last SAMPLES (seconds, the baseline verify[1] when it was taken, None for a plain step or before
    # any): _trusted() leaves out a size measured only while the baseline was much higher than now
    _samples: dict[int, deque] = field(default_factory=dict, repr=False, compare=False)
    _anchor: float | None = field(default=None, repr=False, compare=False)  # with a curve: the last plain step's s

    SAMPLES = 16
    PLAIN_SAMPLES = 2  # plain steps measured before the first draft
    PLAIN_REFRESH = 50  # drafting steps after which one plain step measures the baseline again
    ONE_OFF = 1.5  # a single measurement above this times proportional to a smaller size's is retried (_trusted)
    SLOWER = 1.25  # checks measured while the plain step cost this many times what it costs now are measured again
    STALE = 0.9  # a check measured below this share of the baseline shows the baseline is out of date

    @classmethod
    def fixed(cls, model_drafter: bool) -> StepCosts:
        """Costs that do not depend on the clock, for seeded sampling: with timings steering K, the same seed
        could draw its random numbers at different draft positions and give another sample. Relative units:
        one target pass = 1, +10% per extra token verified, a draft model token 0.1."""
        return cls(verify={1: 1.0, 2: 1.1}, draft_per_token=0.1 if model_drafter else 0.0, frozen=True)

    CURVE_WEIGHT = 3  # a size's load-time ratio counts as this many of its live ratios (_curve_ratio)
    ANCHOR_STEPS = 10  # drafting steps after a plain one whose live ratios are taken against it (_record_on_curve)

    def record(self, k: int, verify_s: float, draft_s: float | None) -> None:
        """Adds one step of k drafts: verify_s, the seconds of all but its drafting (DraftLengthPolicy.observe);
        draft_s, the draft model's seconds, or None for a free proposal (prompt lookup inside a model drafter),
        which is not a sample of the model's cost. A check cheaper than STALE plain steps drops the plain steps
        measured so far, so that needs_plain_step() has the baseline measured again."""
        if self.frozen:
            return
        self._estimates.clear()
        if self.curve is not None:
            self._record_on_curve(k, verify_s, draft_s)
            return
        plain = self._samples.get(1)
        if k and plain and verify_s < self.STALE * self.verify[1]:
            # checking more tokens cannot cost less than one: the plain steps were measured in a slower spell (the
            # machine's other work), and must be measured again before the next draft (needs_plain_step)
            plain.clear()
            del self.verify[1]
        samples = self._samples.setdefault(k + 1, deque(maxlen=self.SAMPLES))
        samples.append((verify_s, self.verify[1] if k and plain else None))  # with the baseline of its time
        self.verify[k + 1] = sorted(s for s, _ in samples)[(len(samples) - 1) // 4]
        self.since_plain = self.since_plain + 1 if k else 0
        if k and draft_s is not None:
            self._record_draft(draft_s / k)

    def _record_on_curve(self, k: int, verify_s: float, draft_s: float | None) -> None:
        """record() with a measured curve. Every step is a sample of what a plain step costs now (its seconds over
        its size's ratio), so the machine's speed, which moves with its other work, is followed without spending
        plain steps on it. A size's ratio is kept current from its live steps, each against the plain steps of the
        time (the anchor: only a plain step can tell a dearer size from a slower machine): the latest plain step,
        for the ANCHOR_STEPS drafting steps after it (plain steps run first, then one every PLAIN_REFRESH drafting
        steps: needs_plain_step)."""
        n = k + 1
        if not k:
            self._anchor = verify_s
        elif self._anchor and self.since_plain < self.ANCHOR_STEPS:
            self._samples.setdefault(n, deque(maxlen=self.SAMPLES // 2)).append(verify_s / self._anchor)
        baseline = self._samples.setdefault(1, deque(maxlen=self.SAMPLES))
        baseline.append(verify_s / self._curve_ratio(n))
        self.verify[1] = sorted(baseline)[(len(baseline) - 1) // 4]
        self.since_plain = self.since_plain + 1 if k else 0
        if k and draft_s is not None:
            self._record_draft(draft_s / k)

    def _record_draft(self, per_token: float) -> None:
        """One drafting step's seconds per drafted token, into the draft model's running estimate."""
        previous = self.draft_per_token
        self.draft_per_token = per_token if previous is None else 0.7 * previous + 0.3 * per_token

    def _curve_ratio(self, n: int) -> float:
        """A measured size's cost in plain steps: the median of its load-time ratio (counted CURVE_WEIGHT times)
        and its live ratios (_record_on_curve), so that a size the live steps keep finding cheaper or dearer than
        at load moves there, and one slow pass does not move it. Sizes the curve lacks: _beyond."""
        if n not in self.curve.ratios:
            return self._beyond(n)
        if n == 1:
            return 1.0
        values = [self.curve.ratio(n)] * self.CURVE_WEIGHT + list(self._samples.get(n, ()))
        return sorted(values)[len(values) // 2]

    def sizes(self, most: int) -> list[int]:
        """The draft lengths K up to `most` whose pass (K + 1) the curve measured: the only ones the policy drafts
        when it has a curve."""
        return [n - 1 for n in self.curve.sizes if n - 1 <= most]

    def plain(self) -> float:
        """Seconds of a plain one-token step on this machine: what decoding without drafts costs a token."""
        return self.verify_estimate(1)

    def needs_plain_step(self) -> bool:
        """Whether the next step must be plain to measure the baseline: fewer than PLAIN_SAMPLES plain steps so far
        or since record() found them out of date (the first step after loading can be several times slower than
        the next; a baseline taken from it alone makes every draft look cheap, and a policy that then drafts at
        every step never measures it again), or PLAIN_REFRESH drafting steps since the last one (the machine's
        speed moves with its other work). A plain step is never slower than plain decoding, so this costs at most
        the gain of one drafting step in PLAIN_REFRESH. False for fixed costs, and for a curve given whole (a
        size-1 cost without samples)."""
        if self.frozen:
            return False
        samples = self._samples.get(1)
        if self.curve is not None:  # any step measures the baseline; plain steps anchor the live ratios
            return not samples or self.since_plain >= self.PLAIN_REFRESH
        if samples is None:
            return 1 not in self.verify
        return len(samples) < self.PLAIN_SAMPLES or self.since_plain >= self.PLAIN_REFRESH

    def step(self, k: int, free: bool = False) -> float:
        """Expected seconds of a step with k drafts: verify(k+1), plus k draft tokens unless the proposal was free
        (their measured cost, else draft_prior plain steps each)."""
        if free or not k:
            return self.verify_estimate(k + 1)
        per_token = self.draft_per_token
        if per_token is None:
            per_token = (self.draft_prior or 0.0) * self.verify_estimate(1)
        return self.verify_estimate(k + 1) + k * per_token

    def verify_estimate(self, n: int) -> float:
        estimate = self._estimates.get(n)
        if estimate is None:
            if self.curve is not None and not self.frozen:
                estimate = self.verify[1] * self._curve_ratio(n)
            else:
                estimate = self._estimate(n)
            self._estimates[n] = estimate
        return estimate

    def _beyond(self, n: int) -> float:
        """The price of a size the curve lacks (only a caller outside the policy asks: the policy drafts measured
        sizes only): that of the next larger measured size, or a line beyond the largest."""
        larger = [m for m in self.curve.sizes if m >= n]
        if larger:
            return self._curve_ratio(larger[0])
        top = self.curve.sizes[-1]
        return self._curve_ratio(top) * n / top

    def _estimate(self, n: int) -> float:
        """The cost of verifying n tokens, never more than a measured cost for more tokens (checking fewer tokens
        cannot cost more; a higher measurement is noise, e.g. a pass that also timed the output head's layouts).

        Unmeasured sizes: between measured ones, a line through the two nearest; above them, half the larger of
        that line's slope and the mean slope from the smallest measured size, or +10% per token while only one size
        has been seen. Above the measurements the guess is optimistic on purpose, because K grows only K_STRIDE past
        them (DraftLengthPolicy._best), so a wrong guess costs one step and is then measured: on a curve whose first
        extra token is its steepest step (llama.cpp: docs/performance.md, "The verification cost curve"), a straight
        line through 1 and 2 overprices every longer check and keeps even a reply whose drafts are all accepted at
        K = 0. Nor may two sizes that measured alike, or the wrong way round, make every longer check look free
        (hence the mean slope). Below them, 10% less per token than the cheapest measurement above. That last guess
        is optimistic on purpose: a policy that has only ever measured long drafts must believe short ones are
        cheaper, or it never tries one, and a single noisy measurement of a long check would keep it proposing that
        length at any acceptance."""
        points = self._trusted()
        above = [cost for size, cost in points if size >= n]
        cap = min(above) if above else float("inf")
        measured = dict(points)
        if n in measured:
            return min(measured[n], cap)
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

    def _trusted(self) -> list[tuple[int, float]]:
        """The measured sizes and costs the estimates rest on, by size. Left out until measured again, so that
        their size is guessed from the others and the next check of it gives the measurement:
        - a size measured only while a plain step cost more than SLOWER times what it costs now: an engine's first
          steps run slower, as does everything while another program takes the cores, and a check measured then
          would price drafting out for good (plain steps are measured again all the time, checks of a size only
          when the policy drafts that many);
        - a size n measured once at more than ONE_OFF times n / m times a smaller size m. Checking n tokens costs
          about n / m times checking m at most (n one-token passes could do it; on llama.cpp a 2-token check can
          cost a little more than two one-token passes, hence the margin), so such a pass paid for something else,
          most often the first pass of its size (which can cost many plain steps); trusted as it is, it would keep
          the policy from ever checking that many again."""
        trusted: list[tuple[int, float]] = []
        plain = self.verify.get(1) if self._samples.get(1) else None
        for size, cost in sorted(self.verify.items()):
            samples = self._samples.get(size)
            if samples and trusted:
                if plain and all(then is not None and then > self.SLOWER * plain for _, then in samples):
                    continue
                if len(samples) == 1 and any(cost > self.ONE_OFF * size / m * c for m, c in trusted):
                    continue
            trusted.append((size, cost))
        return trusted


@dataclass
class _Acceptance:
    """Exponentially weighted Bernoulli counts; each step is k trials cut at the first failure (n successes and
    one failure if n < k). Starts from a prior with the weight of three trials.

    `gain` is the ledger behind the floor: a decayed sum, over this class's drafting steps, of the plain steps each
    saved against plain decoding (the tokens it produced, less what the step cost in plain steps of the time: in
    those units a slower spell of the whole machine, another program taking the cores, changes nothing). The
    expected rate says whether drafting should pay; the ledger says whether it has, and drafting stops while it
    is in the red.
    """

    successes: float
    trials: float = 3.0
    prior: float = 0.5  # the prior alpha of the class (before the pool's factor)
    plain_streak: int = 0  # consecutive steps where K = 0 won
    misses: int = 0  # probes since the class last drafted on its own estimate, less two per fully accepted one
    gain: float = 0.0  # plain steps saved against plain decoding, decayed

    @classmethod
    def with_prior(cls, key: AcceptanceClass | None, factor: float = 1.0) -> _Acceptance:
        """Prior alpha: 0.5 without a class; for a match of length c, c / (c + 2) from the context (a longer
        n-gram match is likelier to continue: 0.33 for one token, 0.75 for six) and c / (c + 1) from past replies
        (0.89 for eight tokens). Where checking two tokens costs about two passes, only the latter starts above the
        break-even: a long match in an earlier reply is most often the same request again, whose whole reply then
        drafts at once, while a context match that optimistic loses time on tasks that copy little of their prompt
        (docs/performance.md, "The draft-length policy"). Live counts soon outweigh either. `factor` (_Pool.factor,
        at most 1) scales the prior by how this drafter's proposals have fared. That holds back even a long match
        in past replies after the short ones failed; if it is the same request again, its unused proposals' trials
        (DraftLengthPolicy.observe_shadow) bring it back within a few tokens."""
        if key is None or key.length is None:
            prior = 0.5
        elif key.source == HISTORY:
            prior = key.length / (key.length + 1)
        else:
            prior = key.length / (key.length + 2)
        return cls(successes=3.0 * prior * factor, prior=prior, cap=cls.cap_for(key))

    @staticmethod
    def cap_for(key: AcceptanceClass | None) -> float:
        """How far a class's alpha may be believed on a measured curve: 0.99 for a match of 16 tokens or more (a
        copy in progress, accepted 98-99% of the time, and only then does a 31- or 47-token check pay on a steep
        curve), 0.97 for 8-15, 0.9 for shorter matches and a model's drafts. A short match's run of hits is luck
        more often than a copy: believed at 0.99 it had checked 15 tokens at a time and lost 9 plain steps each
        time its copy ended (docs/performance.md)."""
        length = key.length if key is not None else None
        if length is None or length < 8:
            return 0.9
        return 0.97 if length < 16 else 0.99

    cap: float = 0.99  # the most alpha may count for on a measured curve (with_prior: by match length)

    @property
    def alpha(self) -> float:
        return self.successes / self.trials

    # The most trials the estimate weighs: a long copy checked 31 tokens at a time would otherwise pile up so many
    # successes that, once the copy ends, its class went on checking long drafts for many steps, each all rejected.
    MAX_TRIALS = 20.0

    def add(self, k: int, n: int, decay: float) -> None:
        self.successes = decay * self.successes + n
        self.trials = decay * self.trials + n + (1 if n < k else 0)
        if self.trials > self.MAX_TRIALS:
            scale = self.MAX_TRIALS / self.trials
            self.successes *= scale
            self.trials = self.MAX_TRIALS


@dataclass
class _Pool:
    """All classes' trials together, against their priors: `factor`, (hits + 1) / (expected + 1) at most 1, is how
    a class seen for the first time discounts its prior. Prompt lookup has a class per match length and source (16
    for the history drafter); without this, after every proposal so far is rejected, each new class would still
    draft on its prior alone, and a reply with no accepted token would pay one losing check per class."""

    hits: float = 0.0
    expected: float = 0.0  # hits the classes' priors predicted
    trials: float = 0.0
    idle: int = 0  # steps since a free proposal was drafted or had its first token right (wants_lookup)

    DECAY = 0.9

    @property
    def factor(self) -> float:
        return min(1.0, (self.hits + 1.0) / (self.expected + 1.0))

    def add(self, prior: float, trials: int, hits: int) -> None:
        self.hits = self.DECAY * self.hits + hits
        self.expected = self.DECAY * self.expected + prior * trials
        self.trials = self.DECAY * self.trials + trials


POOL = "pool"  # the key of the _Pool in a policy's acceptance dict (class keys are AcceptanceClass and None)


@dataclass
class DraftLengthPolicy:
    """Picks K per step to maximise expected tokens per second.

    throughput(K) = E[tokens | K, alpha] / (step(K+1) + K * draft_cost_per_token)

    against throughput(0) = 1 / plain step, all measured on this machine (StepCosts): the step costs include the
    step's own work, a draft model's or a head's passes are timed as they ran, and the baseline is the plain steps
    this policy itself ran (it runs some before drafting at all, and one every StepCosts.PLAIN_REFRESH drafting
    steps). alpha is estimated from recent steps, separately for each acceptance class a drafter reports (prompt
    lookup: the length of the n-gram it matched, since a longer match is far likelier to continue); a class seen for
    the first time starts from its prior discounted by how all classes' proposals have fared (_Pool). K = 0 (plain
    decoding) wins when drafts keep failing. A free proposal that was not drafted still counts as a trial of its
    first token (observe_shadow: the engine compares it with the token the target produced), so a lookup class
    learns at no cost while K = 0, and copying that starts mid-reply is drafted as soon as its matches are right. A
    class whose proposals cost something (a model) instead probes with K >= 1 after a run of plain steps long enough
    that probes cost at most `probe_budget` of the time (at least `probe_every` steps; _probe_interval): where
    checking 2 tokens costs little more than 1 (a flat verification curve) that is every `probe_every` steps, where
    it costs about twice as much (a steep one, as on llama.cpp) far less often. Each probe with a draft rejected
    doubles the wait, up to 2^probe_backoff, so the probes' cost decays while drafting does not pay. `acceptance`
    may be shared between generations (the engine does so for greedy decoding, whose output does not depend on K),
    so a reply starts from what earlier ones measured rather than from the prior. With adaptive off, K is fixed.

    The floor: estimates can be wrong in ways the model above cannot see (acceptance that is not independent from
    position to position, a class whose text changed, a noisy clock), so each class also keeps a ledger of what its
    drafting steps actually saved or lost against plain decoding (_Acceptance.gain). While a class's ledger is more
    than `floor_tokens` plain steps in the red, it drafts only in budgeted probes, with the K the model picks, so
    that a good run can bring it back.
    """

    k: int = 5
    k_max: int = 16
    adaptive: bool = True
    decay: float = 0.7
    probe_every: int = 6
    probe_budget: float = 0.01
    probe_backoff: int = 3
    floor_tokens: float = 2.0
    gain_decay: float = 0.8
    acceptance: dict = field(default_factory=dict)  # AcceptanceClass (Draft.acceptance_class) or None -> _Acceptance
    costs: StepCosts = field(default_factory=StepCosts)

    ALPHA_CAP = 0.95  # without a measured curve; with one, each class's own cap (_Acceptance.cap_for)
    K_STRIDE = 2
    # A free class at K = 0 is probed (a paid check, to measure the costs again) only while its best check is
    # expected to reach this share of plain decoding's speed: closer than the costs' noise from paying.
    FREE_PROBE_RATE = 0.8
    LOOKUP_IDLE = 16  # steps without a useful free proposal after which only one step in LOOKUP_EVERY looks one up
    LOOKUP_EVERY = 4

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("K must be at least 1")
        self.k_max = max(self.k_max, self.k)

    def alpha(self, acceptance_class: AcceptanceClass | None = None) -> float:
        """The estimated acceptance rate of a draft token of this class (None: the drafter's one class)."""
        return self._class(acceptance_class).alpha

    def choose(self, limit: int, acceptance_class: AcceptanceClass | None = None, free: bool = False) -> int:
        """Draft length for the next step, never more than `limit` (tokens left to generate minus the target's own).
        `acceptance_class`: the proposal's (None: the drafter's one class). `free`: the proposal is already made and
        cost nothing (prompt lookup), so only verification is charged, and a trial of it comes from observe_shadow
        while K = 0."""
        if limit <= 0:
            return 0
        if not self.adaptive:
            return min(self.k, limit)
        if self.costs.needs_plain_step():
            return 0
        acceptance = self._class(acceptance_class)
        if not free and not self._could_pay(limit):
            return 0  # a model that would lose time even with every draft accepted: not even a probe
        best_k, _ = self._best(limit, acceptance, free)
        in_the_red = acceptance.gain < -self.floor_tokens
        if best_k and not in_the_red:
            acceptance.plain_streak = acceptance.misses = 0
            return best_k
        probe_k, rate = self._best(limit, acceptance, free, smallest=1)
        if free and not in_the_red and rate * self.costs.plain() < self.FREE_PROBE_RATE:
            return 0  # its trials come free (observe_shadow), and no likely error in the costs would make it pay
        acceptance.plain_streak += 1
        if acceptance.plain_streak >= self._probe_interval(probe_k, free, acceptance.misses):
            acceptance.plain_streak = 0
            acceptance.misses += 1
            return probe_k
        return 0

    def _could_pay(self, limit: int) -> bool:
        """Whether a paid proposal (a draft model's) could beat plain decoding on the measured curve if its drafts
        were accepted as often as a model's drafts may be believed to be (its alpha cap). Without a curve it is
        assumed it could: the costs are then learned by trying."""
        if self.costs.curve is None or self.costs.frozen:
            return True
        certain = _Acceptance(successes=1.0, trials=1.0, cap=_Acceptance.cap_for(None))
        best_k, _ = self._best(limit, certain, free=False)
        return best_k > 0

    def wants_lookup(self) -> bool:
        """Whether to look up a free proposal (prompt lookup) this step. A lookup costs the same whether or not it
        is drafted (the history drafter's is a small but steady share of a plain step), which no choice of K
        saves: after LOOKUP_IDLE steps in which none was drafted or had its first token right, only one step in
        LOOKUP_EVERY looks one up, until one is (so copying that starts is seen within LOOKUP_EVERY steps)."""
        idle = self._pool().idle
        return not self.adaptive or idle < self.LOOKUP_IDLE or idle % self.LOOKUP_EVERY == 0

    def _probe_interval(self, k: int, free: bool, misses: int) -> int:
        """Plain steps between probes of k tokens. A probe costs at most step(k) - plain() more than the plain
        step it replaces (all its drafts rejected; for a model, its drafting included), so probing every that /
        probe_budget steps spends at most the budget, whatever alpha really is. Each probe with a draft rejected
        doubles the wait (up to 2^probe_backoff) and each one fully accepted halves it (`misses`), so the probes of
        a class that keeps failing cost less and less, and those of a class whose drafts got good come sooner."""
        extra = self.costs.step(k, free) / self.costs.plain() - 1.0
        wait = max(self.probe_every, math.ceil(extra / self.probe_budget))
        return wait * 2 ** min(misses, self.probe_backoff)

    def free_beats_model(self, limit: int, acceptance_class: AcceptanceClass | None) -> bool:
        """For a drafter with both: is a free proposal of this acceptance class worth more tokens per second than
        running the draft model? Compares the best expected rate of each (alpha per class, measured costs)."""
        if limit <= 0 or not self.adaptive or not self.costs.verify:
            length = acceptance_class.length if acceptance_class is not None else None
            return length is not None and length >= 3  # before any measurement: long matches only
        free_k, free_rate = self._best(limit, self._class(acceptance_class), free=True)
        _, model_rate = self._best(limit, self._class(None), free=False)
        return free_k > 0 and free_rate >= model_rate

    def _best(self, limit: int, acceptance: _Acceptance, free: bool, smallest: int = 0) -> tuple[int, float]:
        """The K (at least `smallest`) with the highest expected rate, and that rate (tokens per second). Two guards
        against trusting too little data: alpha counts as at most ALPHA_CAP (a run of copied tokens can drive a match
        class's estimate close to 1, and with it K to the longest checks), and without a measured curve K grows at
        most K_STRIDE past the largest size measured so far, so the cost of a longer check is measured before it is
        relied on. With a curve (StepCosts.curve) K + 1 is one of its measured sizes, and alpha may reach the class's
        own cap (_Acceptance.cap_for): a long copy is worth its long check only if a near-certain match may be
        believed, and a short one is not near-certain."""
        best_k, best_rate = smallest, 0.0
        on_curve = self.costs.curve is not None and not self.costs.frozen
        alpha = min(acceptance.alpha, acceptance.cap if on_curve else self.ALPHA_CAP)
        if on_curve:
            candidates = [k for k in self.costs.sizes(min(self.k_max, limit)) if k >= smallest] or [smallest]
        else:
            top = self.k_max if self.costs.frozen else max(self.costs.verify) - 1 + self.K_STRIDE
            candidates = range(smallest, max(min(self.k_max, limit, top), smallest) + 1)
        for k in candidates:
            rate = expected_tokens(alpha, k) / self.costs.step(k, free)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate

    def observe(self, k: int, n_accepted: int, verify_s: float, draft_s: float,
                acceptance_class: AcceptanceClass | None = None, free: bool = False, overhead_s: float = 0.0) -> None:
        """Record one verified step: k proposed, n accepted, and what it cost: the target pass, the draft model's
        (or head's) own time, and the rest of the step's work (overhead_s: a lookup, acceptance, rollback, the
        policy), which a plain step pays too and so belongs with the pass."""
        plain = self.costs.plain() if self.costs.verify else None
        self.costs.record(k, verify_s + overhead_s, None if free else draft_s)
        pool = self._pool()
        pool.idle = 0 if k and free else pool.idle + 1
        if not k:
            return
        acceptance = self._class(acceptance_class)
        pool.add(acceptance.prior, n_accepted + (1 if n_accepted < k else 0), n_accepted)
        acceptance.add(k, n_accepted, self.decay)
        if n_accepted == k:  # a probe with every draft accepted undoes a miss (choose() counted one for it)
            acceptance.misses = max(acceptance.misses - 2, 0)
        if plain is not None and not self.costs.frozen:
            # plain decoding would have spent one plain step per token this step produced. A loss counts for at most
            # floor_tokens plain steps: the first pass of each new size can cost many times the next ones, and
            # alone it must not stop a class.
            saved = n_accepted + 1 - (verify_s + overhead_s + (0.0 if free else draft_s)) / plain
            acceptance.gain = self.gain_decay * acceptance.gain + max(saved, -self.floor_tokens)

    def observe_shadow(self, acceptance_class: AcceptanceClass | None, hit: bool) -> None:
        """A free proposal that was not drafted, its first token compared with the token the target produced in its
        place: one trial of that class at no cost. For greedy decoding the token is the one a draft would have been
        checked against; for sampling, the token is drawn from p, so it matches with probability p(x), which is
        the acceptance probability of a point-mass draft x."""
        acceptance = self._class(acceptance_class)
        self._pool().add(acceptance.prior, 1, int(hit))
        acceptance.add(1, int(hit), self.decay)
        if hit:
            self._pool().idle = 0

    def _class(self, acceptance_class: AcceptanceClass | None) -> _Acceptance:
        """The estimates of a class, made from its prior (discounted by the pool) the first time it is seen."""
        if acceptance_class not in self.acceptance:
            self.acceptance[acceptance_class] = _Acceptance.with_prior(acceptance_class, self._pool().factor)
        return self.acceptance[acceptance_class]

    def _pool(self) -> _Pool:
        pool = self.acceptance.get(POOL)
        if pool is None:
            pool = self.acceptance[POOL] = _Pool()
        return pool
