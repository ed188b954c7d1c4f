"""The floor of the draft-length policy: never slower than plain decoding, whatever drafting costs on the machine.

The policy is driven here by injected step-cost models in plain-step units (UNIT seconds each): verify(n) is a
verification of n tokens, a draft token costs `draft`, and each draft token is accepted with probability alpha.
Expected tokens per second with K drafts: expected_tokens(alpha, K) / (K * draft + verify(K + 1)), against
1 / verify(1) for plain decoding. The last tests run the real engine on the tiny models, by the fixed cost model
of conftest.py and by the clock.
"""

import random
import time

import pytest

from specchat.engine.decoding.adaptive import (CONTEXT, HISTORY, AcceptanceClass, DraftLengthPolicy, StepCosts,
                                               expected_tokens)
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import NoDrafter
from specchat.engine.drafting.base import Capabilities, Draft, Drafter

UNIT = 0.010  # seconds of one plain step in the cost models below
ONE, SIX = AcceptanceClass(CONTEXT, 1), AcceptanceClass(CONTEXT, 6)  # prompt lookup's matches of 1 and 6 tokens
LONG_PAST_MATCH = AcceptanceClass(HISTORY, 16)  # a match of 16 tokens or more in past replies


def losing(n: int) -> float:
    """A verification of n tokens: 1 + 0.5 (n - 1) plain steps (llama.cpp on a slow CPU is steeper still)."""
    return 1.0 + 0.5 * (n - 1)


def cheap(n: int) -> float:
    return 1.0 + 0.05 * (n - 1)


def simulate(policy: DraftLengthPolicy, alphas, verify, draft: float = 0.0, free: bool = False,
             classes=(None,), seed: int = 0) -> tuple[list[int], float]:
    """Runs the policy for len(alphas) steps (alphas[i]: the acceptance at step i) as the engine does: a free
    proposal only where the policy wants one looked up, choose, verify, observe, and for a free proposal left
    unused the trial of its first token. Returns the K of each step and the speed relative to plain decoding
    (tokens per second times verify(1))."""
    rng = random.Random(seed)
    chosen, seconds, tokens = [], 0.0, 0
    for i, alpha in enumerate(alphas):
        acceptance_class = classes[i % len(classes)]
        looked = not free or policy.wants_lookup()
        k = policy.choose(limit=100, acceptance_class=acceptance_class, free=free) if looked else 0
        n = 0
        while n < k and rng.random() < alpha:
            n += 1
        verify_s, draft_s = UNIT * verify(k + 1), 0.0 if free else UNIT * draft * k
        policy.observe(k, n, verify_s=verify_s, draft_s=draft_s, acceptance_class=acceptance_class, free=free)
        if free and looked and k == 0:
            policy.observe_shadow(acceptance_class, rng.random() < alpha)
        chosen.append(k)
        seconds += verify_s + draft_s
        tokens += n + 1
    return chosen, tokens * UNIT * verify(1) / seconds


def test_the_cost_models_are_what_they_claim():
    """(a)'s model loses at every K (the best K = 1 gives 0.68x), (c)'s wins (about 4x at K = 16)."""
    assert max(expected_tokens(0.3, k) / (0.4 * k + losing(k + 1)) for k in range(1, 17)) < 0.7
    assert max(expected_tokens(0.0, k) / losing(k + 1) for k in range(1, 17)) < 0.7
    assert expected_tokens(0.9, 16) / (0.02 * 16 + cheap(17)) > 3.5


def middling(n: int) -> float:
    """Drafting pays at a high acceptance and loses at a low one: with a draft token at 0.2, 1.74x at K = 4 and
    alpha 0.95, 0.93x at best (K = 1) at alpha 0.3."""
    return 1.0 + 0.2 * (n - 1)


@pytest.mark.parametrize("seed", range(5))
def test_a_losing_draft_model_converges_to_plain_decoding_with_rare_decaying_probes(seed):
    """(a): verify(n) = 1 + 0.5 (n - 1), a draft token 0.4, acceptance 0.3. The bound: two plain steps measure the
    baseline, the third drafts once with the cost of drafting still unknown, and from the fourth step on K = 0
    but for K = 1 probes. A probe costs at most 1.9 - 1 = 0.9 plain steps more than a plain step, so probes come at
    least 0.9 / probe_budget = 90 steps apart (1% of the time at most); 70% of them are rejected, each doubling
    the wait (to 8x; an accepted one halves it), so they come on average less than half as often: fewer than one
    step in 180, and the run within 0.5% of plain decoding."""
    steps = 3000
    chosen, speed = simulate(DraftLengthPolicy(), [0.3] * steps, losing, draft=0.4, seed=seed)
    assert chosen[:2] == [0, 0]
    probes = [i for i, k in enumerate(chosen) if k and i >= 3]
    assert all(chosen[i] == 1 for i in probes)
    assert all(b - a >= 90 for a, b in zip(probes, probes[1:]))
    assert len(probes) < steps / 180
    assert speed >= 0.995


def test_a_draft_model_whose_acceptance_drops_stops_within_a_few_steps():
    """Drafting pays while every draft is accepted; when the acceptance falls to 0.3 it stops within 15 steps,
    then probes, which near the break-even cost little: the rest of the run within 2% of plain decoding."""
    chosen, _ = simulate(DraftLengthPolicy(), [1.0] * 60 + [0.3] * 400, middling, draft=0.2)
    assert sum(k > 0 for k in chosen[20:60]) >= 35  # drafting while it pays
    assert 0 in chosen[60:75]
    tail = chosen[75:]
    assert sum(k > 0 for k in tail) <= len(tail) // 10


def test_free_proposals_that_are_never_accepted_cost_at_most_one_check():
    """(b): a free drafter (prompt lookup over the context and past replies: 16 acceptance classes) whose
    proposals are never accepted. Each rejected check costs 0.5 plain steps per draft token; the old policy tried
    every class on its prior and ran a first reply of 46 steps at 0.66x plain. Now: at most one drafting step in
    all (the first check, before any trial of a proposal; each later class starts from its prior discounted by
    how the drafter's proposals have fared, and unused proposals are checked against the target's tokens)."""
    classes = (tuple(AcceptanceClass(CONTEXT, c) for c in range(1, 7))
               + tuple(AcceptanceClass(HISTORY, c) for c in (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)))
    for steps in (46, 1000):
        chosen, speed = simulate(DraftLengthPolicy(), [0.0] * steps, losing, free=True, classes=classes)
        assert sum(k > 0 for k in chosen) <= 1
        assert speed >= 0.98 if steps == 46 else speed >= 0.998


def test_a_free_class_on_an_optimistic_prior_backs_off_after_one_check():
    """A long match in past replies starts at a prior of 0.89 (most often the same request again); when the reply
    goes elsewhere, one rejected check brings it to K = 0."""
    chosen, _ = simulate(DraftLengthPolicy(), [0.0] * 200, losing, free=True, classes=(AcceptanceClass(HISTORY, 8),))
    assert sum(k > 0 for k in chosen) == 1


def llama_cpp_like(n: int) -> float:
    """Checking 2 tokens costs just over 2 plain steps, each token after that 0.45 (llama.cpp on a slow CPU)."""
    return 1.0 if n == 1 else 2.1 + 0.45 * (n - 2)


@pytest.mark.parametrize("seed", range(3))
def test_the_same_request_again_drafts_within_a_few_steps_after_many_failures(seed):
    """300 steps in which 15 lookup classes were never accepted (one check in all), then a reply that matches a
    past one (a 16-token match in past replies, the same request again, acceptance 0.95) on a curve where only
    long checks pay: its class starts from a prior cut down by those failures, the lookup (idle all that time)
    looks once in LOOKUP_EVERY steps until a proposal's first token is right, and its unused proposals' trials
    then bring it to drafting: within 16 steps, and the 100 steps run at 1.25x plain or better."""
    classes = (tuple(AcceptanceClass(CONTEXT, c) for c in range(1, 7))
               + tuple(AcceptanceClass(HISTORY, c) for c in (1, 2, 3, 4, 5, 6, 7, 8, 12)))
    policy = DraftLengthPolicy()
    failing, _ = simulate(policy, [0.0] * 300, llama_cpp_like, free=True, classes=classes, seed=seed)
    assert sum(k > 0 for k in failing) <= 1
    repeat, speed = simulate(policy, [0.95] * 100, llama_cpp_like, free=True, classes=(LONG_PAST_MATCH,), seed=seed)
    assert any(repeat[:16]) and speed >= 1.25


def test_free_proposals_that_start_being_copied_are_drafted_at_once():
    """After 300 steps of rejected proposals the text starts copying (acceptance 0.95): the trials of the unused
    proposals bring drafting back within 10 steps, at no cost before."""
    chosen, _ = simulate(DraftLengthPolicy(), [0.0] * 300 + [0.95] * 100, losing, free=True, classes=(SIX,))
    assert sum(k > 0 for k in chosen[:300]) <= 1
    assert any(chosen[300:310]) and sum(k > 0 for k in chosen[310:]) >= 80


@pytest.mark.parametrize("seed", range(5))
def test_a_draft_model_recovers_when_its_drafts_become_good(seed):
    """Probes are how a model's class comes back: 300 steps of drafts that lose (acceptance 0.3), then every draft
    accepted. Probes come sooner as alpha nears the break-even and each fully accepted one halves the wait: the
    model drafts again within 300 steps (here the longest wait for a probe is 8 x 40 steps)."""
    chosen, _ = simulate(DraftLengthPolicy(), [0.3] * 300 + [1.0] * 600, middling, draft=0.2, seed=seed)
    assert sum(k > 0 for k in chosen[600:]) >= 0.9 * 300


@pytest.mark.parametrize("free", [False, True])
def test_drafting_that_pays_keeps_drafting(free):
    """(c): cheap verification (1 + 0.05 (n - 1)), a draft token 0.02, acceptance 0.9: K > 0 at all but the plain
    steps that measure the baseline (2 at first, then one in StepCosts.PLAIN_REFRESH)."""
    steps = 400
    chosen, speed = simulate(DraftLengthPolicy(), [0.9] * steps, cheap, draft=0.02, free=free, classes=(SIX,))
    assert chosen[:2] == [0, 0]
    plain_steps = chosen[10:].count(0)
    assert plain_steps <= (steps - 10) // StepCosts.PLAIN_REFRESH + 1
    assert sum(chosen[10:]) / (steps - 10) >= 5
    assert speed >= 3.0


def test_the_baseline_is_the_plain_step_measured_here_not_its_first_outlier():
    """The first plain step after loading was 3x slower than the rest. A baseline from it alone made every draft
    look cheap; two plain steps come before any draft, the lower one is the baseline, and a drafting policy measures
    it again every PLAIN_REFRESH steps."""
    policy = DraftLengthPolicy()
    policy.observe(0, 0, verify_s=3 * UNIT, draft_s=0.0)
    assert policy.choose(limit=100, acceptance_class=LONG_PAST_MATCH, free=True) == 0
    policy.observe(0, 0, verify_s=UNIT, draft_s=0.0)
    assert policy.costs.plain() == UNIT
    chosen = [policy.choose(limit=100, acceptance_class=LONG_PAST_MATCH, free=True)]
    for _ in range(2 * StepCosts.PLAIN_REFRESH):
        k = chosen[-1]
        policy.observe(k, k, verify_s=UNIT * cheap(k + 1), draft_s=0.0, acceptance_class=LONG_PAST_MATCH, free=True)
        chosen.append(policy.choose(limit=100, acceptance_class=LONG_PAST_MATCH, free=True))
    assert chosen[0] > 0 and 1 <= chosen[1:].count(0) <= 2


def test_checks_measured_while_the_machine_was_slow_are_measured_again():
    """The first steps of an engine run slower (llama.cpp here: twice as slow over the first 10-20 steps). A check
    measured then, at 4.4 plain steps of today, would price drafting out for good; it is guessed from today's plain
    step instead until it is measured again, and the new measurement counts."""
    costs = StepCosts()
    for _ in range(2):
        costs.record(0, 2 * UNIT, None)
    costs.record(1, 4.4 * UNIT, None)  # a 2-token check: 2.2 plain steps of its time
    for _ in range(16):
        costs.record(0, UNIT, None)
    assert costs.plain() == UNIT
    assert costs.verify_estimate(2) == pytest.approx(1.1 * UNIT)  # a guess from the plain step alone
    costs.record(1, 2.1 * UNIT, None)
    assert costs.verify_estimate(2) == pytest.approx(2.1 * UNIT)


def test_a_check_cheaper_than_the_baseline_has_it_measured_again():
    """Plain steps measured while another program took the cores (here 10 units each), then a 4-token check at 3:
    checking 4 tokens cannot cost less than checking one, so the baseline is out of date, and the next steps are
    plain ones that measure it again before anything more is drafted."""
    policy = DraftLengthPolicy()
    for _ in range(2):
        policy.observe(0, 0, verify_s=10 * UNIT, draft_s=0.0)
    policy.observe(3, 3, verify_s=3 * UNIT, draft_s=0.0, acceptance_class=SIX, free=True)
    assert [policy.choose(limit=100, acceptance_class=SIX, free=True) for _ in range(1)] == [0]
    for _ in range(2):
        policy.observe(0, 0, verify_s=UNIT, draft_s=0.0)
    assert policy.costs.plain() == UNIT


def test_a_one_off_slow_check_is_measured_again_rather_than_trusted():
    """A first pass of its size that cost 40 plain steps (more than 1.5 x 5 times a plain step) neither prices
    5-token checks out nor, alone, puts the class in the red; the next check of that size is the measurement."""
    policy = DraftLengthPolicy()
    for _ in range(2):
        policy.observe(0, 0, verify_s=UNIT, draft_s=0.0)
    policy.observe(4, 4, verify_s=40 * UNIT, draft_s=0.0, acceptance_class=SIX, free=True)
    assert policy.costs.verify_estimate(5) < 2 * UNIT  # guessed from the plain step
    assert policy.choose(limit=100, acceptance_class=SIX, free=True) > 0
    policy.observe(4, 4, verify_s=1.2 * UNIT, draft_s=0.0, acceptance_class=SIX, free=True)
    assert policy.costs.verify_estimate(5) == pytest.approx(1.2 * UNIT)


def test_an_idle_lookup_looks_one_step_in_four_until_a_proposal_is_right():
    """A lookup costs every step, drafted or not; after LOOKUP_IDLE steps with no proposal drafted or right, the
    policy asks for one only every LOOKUP_EVERY steps, and a right first token (a shadow hit) restores every step."""
    policy = DraftLengthPolicy()
    looked = []
    for _ in range(40):
        looked.append(policy.wants_lookup())
        policy.observe(0, 0, verify_s=UNIT, draft_s=0.0, free=True)
        if looked[-1]:
            policy.observe_shadow(ONE, hit=False)
    assert all(looked[:DraftLengthPolicy.LOOKUP_IDLE])
    tail = looked[DraftLengthPolicy.LOOKUP_IDLE:]
    assert sum(tail) == len(tail) // DraftLengthPolicy.LOOKUP_EVERY
    policy.observe_shadow(ONE, hit=True)
    assert policy.wants_lookup()
    fixed = DraftLengthPolicy(adaptive=False, acceptance=policy.acceptance)
    for _ in range(DraftLengthPolicy.LOOKUP_IDLE + 1):
        fixed.observe(0, 0, verify_s=UNIT, draft_s=0.0, free=True)
    assert fixed.wants_lookup()  # a fixed K drafts at every step: it always looks


def test_step_overheads_count_with_the_pass():
    """The step's own work (a lookup, acceptance, rollback) is paid by a plain step too: it is part of the baseline,
    and of every check's cost."""
    policy = DraftLengthPolicy()
    for _ in range(2):
        policy.observe(0, 0, verify_s=UNIT, draft_s=0.0, overhead_s=UNIT / 2)
    assert policy.costs.plain() == pytest.approx(1.5 * UNIT)


# --- end to end, by the clock -------------------------------------------------------------------------------


class _Wrong(Drafter):
    """Proposes k copies of a token the target never produces here; with `seconds_per_token`, as slowly as a
    draft model that costs that much per token."""

    name = "wrong"

    def __init__(self, token: int, seconds_per_token: float = 0.0):
        self.token = token
        self.seconds_per_token = seconds_per_token
        self.capabilities = Capabilities(uses_model=seconds_per_token > 0)

    def propose(self, context, k):
        time.sleep(self.seconds_per_token * k)
        return Draft(tokens=[self.token] * k, acceptance_class=ONE if not self.capabilities.uses_model else None)


class _Oracle(Drafter):
    """Proposes the plain reply's next tokens: free and always right."""

    name = "oracle"

    def __init__(self, prompt_length: int, reply: tuple[int, ...]):
        self.prompt_length = prompt_length
        self.reply = reply

    def propose(self, context, k):
        done = len(context) - self.prompt_length
        return Draft(tokens=list(self.reply[done: done + k]), acceptance_class=SIX) if done < len(self.reply) else None


@pytest.fixture
def reference(target, tokenizer, prompt_ids):
    return SpeculativeEngine(target, tokenizer, NoDrafter()).generate(prompt_ids,
                                                                      GenerationConfig(max_new_tokens=64))


def unused_token(reference, vocab_size: int) -> int:
    return next(t for t in range(3, vocab_size) if t not in reference.token_ids)


@pytest.mark.clock
@pytest.mark.parametrize("seconds_per_token", [0.0, 0.02])
def test_the_engine_stops_drafting_that_loses_and_stays_token_identical(target, tokenizer, prompt_ids, reference,
                                                                        seconds_per_token):
    """(d): drafts that are never accepted, free (a lookup) or slow (a draft model costing 20 ms a token, many
    times the tiny target's pass): the reply is the plain one token for token. The slow drafter drafts at most
    twice (the first check, at an unknown draft cost, and a retry of a check whose pass was a one-off); a
    rejected free check costs the tiny model little (checking 2 tokens about 1.1 plain steps), so its probes may
    come as often as every probe_every steps."""
    drafter = _Wrong(unused_token(reference, len(tokenizer)), seconds_per_token)
    engine = SpeculativeEngine(target, tokenizer, drafter)
    result = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=64))
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_steps <= (2 if seconds_per_token else 64 // DraftLengthPolicy.probe_every)
    assert engine.step_costs.verify[1] > 0  # the baseline was measured, by this engine


def test_the_engine_keeps_drafting_that_pays_and_stays_token_identical(target, tokenizer, prompt_ids, reference):
    """(d): free drafts that are always right, priced by the fixed cost model (conftest.py), where checking
    2 tokens costs 1.1 plain steps: the engine drafts nearly every token, and the reply is the plain one."""
    engine = SpeculativeEngine(target, tokenizer, _Oracle(len(prompt_ids), reference.token_ids))
    result = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=64))
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_accepted >= 40
    assert result.stats.target_passes < 30


@pytest.mark.clock
def test_by_the_clock_the_engine_drafts_what_pays_here_and_stays_token_identical(target, tokenizer, prompt_ids,
                                                                                 reference):
    """(d) by the clock: the same drafter, priced by what the passes cost on this machine now. Whether more than
    the first checks pay depends on the machine (on a busy one a check of 3 tokens can cost ten plain steps, and
    the ledger then stops it); the reply is the plain one either way."""
    engine = SpeculativeEngine(target, tokenizer, _Oracle(len(prompt_ids), reference.token_ids))
    result = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=64))
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_accepted >= 1  # the first check comes before any multi-token pass is measured
    assert engine.step_costs.needs_plain_step() is False  # the baseline was measured on this machine
