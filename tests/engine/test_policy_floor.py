"""The floor of the draft-length policy: never slower than plain decoding, whatever drafting costs on the machine.

The policy is driven here by cost curves in plain-step units (UNIT seconds each): verify(n) is a verification of
n tokens, a draft token costs `draft`, and each draft token is accepted with probability alpha. Expected tokens
per pass with K drafts: expected_tokens(alpha, K) / (K * draft + verify(K + 1)), against 1 for plain decoding.
The last tests run the real engine on the tiny models, on the fixed curve of conftest.py and by the clock.
"""

import random
import time

import pytest

from specchat.core.acceptance import expected_tokens
from specchat.engine.decoding.adaptive import PAST_REPLIES, PROMPT, AcceptanceClass, DraftLengthPolicy, StepCosts
from specchat.engine.decoding.cost_curve import PASS_SIZES, CostCurve
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import NoDrafter
from specchat.engine.drafting.base import Capabilities, Draft, Drafter

UNIT = 0.010  # seconds of one plain step in the cost models below
ONE, SIX = AcceptanceClass(PROMPT, 1), AcceptanceClass(PROMPT, 6)  # prompt lookup's matches of 1 and 6 tokens
LONG_PAST_MATCH = AcceptanceClass(PAST_REPLIES, 16)  # a match of 16 tokens or more in past replies
LOOKUP_CLASSES = (tuple(AcceptanceClass(PROMPT, c) for c in range(1, 7))
                  + tuple(AcceptanceClass(PAST_REPLIES, c) for c in (1, 2, 3, 4, 5, 6, 7, 8, 12)))


def losing(n: int) -> float:
    """A verification of n tokens: 1 + 0.5 (n - 1) plain steps (llama.cpp on a slow CPU is steeper still)."""
    return 1.0 + 0.5 * (n - 1)


def cheap(n: int) -> float:
    return 1.0 + 0.05 * (n - 1)


def middling(n: int) -> float:
    """Drafting pays at a high acceptance and loses at a low one: with a draft token at 0.2, 1.74x at K = 4 and
    alpha 0.95, 0.93x at best (K = 1) at alpha 0.3."""
    return 1.0 + 0.2 * (n - 1)


def llama_cpp_like(n: int) -> float:
    """Checking 2 tokens costs just over 2 plain steps, each token after that 0.45 (llama.cpp on a slow CPU)."""
    return 1.0 if n == 1 else 2.1 + 0.45 * (n - 2)


def policy_on(verify, draft_prior: float | None = None) -> DraftLengthPolicy:
    """A policy pricing on `verify` measured at every size of PASS_SIZES, as the engine's curve is."""
    return DraftLengthPolicy(k_max=63, costs=StepCosts(CostCurve({n: verify(n) for n in PASS_SIZES}),
                                                       draft_prior=draft_prior))


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


@pytest.mark.parametrize("seed", range(5))
def test_a_losing_draft_model_is_tried_once_and_then_never_again(seed):
    """(a): verify(n) = 1 + 0.5 (n - 1), a draft token 0.4, acceptance 0.3. At its prior (0.5) no K pays, so the
    model is not run blind; one probe (after 0.5 / PROBE_BUDGET = 50 plain steps, its cost still unknown) measures
    the draft token at 0.4 of a pass, and on this curve the model could not pay then even if always right: it is
    never run again. The run is within 0.5% of plain decoding."""
    chosen, speed = simulate(policy_on(losing), [0.3] * 3000, losing, draft=0.4, seed=seed)
    drafted = [i for i, k in enumerate(chosen) if k]
    assert len(drafted) == 1 and drafted[0] >= 49 and chosen[drafted[0]] == 1
    assert speed >= 0.995


def test_a_draft_model_whose_acceptance_drops_stops_within_a_few_steps():
    """Drafting pays while every draft is accepted; when the acceptance falls to 0.3 it stops within 20 steps,
    then probes within their budget: few drafting steps in the rest of the run."""
    chosen, _ = simulate(policy_on(middling), [1.0] * 60 + [0.3] * 400, middling, draft=0.2)
    assert sum(k > 0 for k in chosen[20:60]) >= 35  # drafting while it pays
    assert 0 in chosen[60:80]
    tail = chosen[80:]
    assert sum(k > 0 for k in tail) <= len(tail) // 10


@pytest.mark.parametrize("seed", range(5))
def test_a_draft_model_recovers_when_its_drafts_become_good(seed):
    """Probes are how a model's class comes back: 300 steps of drafts that lose (acceptance 0.3), then every draft
    accepted. Each missed probe doubles the wait, up to 8 x 40 steps here: the model drafts again within 300
    steps."""
    chosen, _ = simulate(policy_on(middling), [0.3] * 300 + [1.0] * 600, middling, draft=0.2, seed=seed)
    assert sum(k > 0 for k in chosen[600:]) >= 0.9 * 300


@pytest.mark.parametrize("steps", [46, 1000])
def test_free_proposals_that_are_never_accepted_are_never_checked_on_a_steep_curve(steps):
    """(b): a free drafter (prompt lookup over the context and past replies: 15 acceptance classes) whose
    proposals are never accepted, on a curve where checking 2 tokens costs 1.5 plain steps. The policy of issue 35
    ran a first reply of 46 steps at 0.66x plain checking every class on its prior. A class is checked only once
    one of its proposals was seen right (compared with the target's token, at no cost): nothing is drafted."""
    chosen, speed = simulate(policy_on(losing), [0.0] * steps, losing, free=True, classes=LOOKUP_CLASSES)
    assert chosen == [0] * steps and speed == pytest.approx(1.0)


def test_free_proposals_that_are_never_accepted_cost_little_on_a_flat_curve():
    """The same on a curve where a 2-token check costs 1.05 plain steps: there a class believed right one time in
    twenty pays, so each class is checked until its record says otherwise; all of that costs at most 8%, in
    exchange for 1.5-4x where the proposals are right (test_drafting_that_pays_keeps_drafting)."""
    _, speed = simulate(policy_on(cheap), [0.0] * 200, cheap, free=True, classes=LOOKUP_CLASSES)
    assert speed >= 0.92


@pytest.mark.parametrize("seed", range(3))
def test_the_same_request_again_drafts_within_a_few_steps_after_many_failures(seed):
    """300 steps in which 15 lookup classes were never accepted, then a reply that matches a past one (a 16-token
    match in past replies, the same request again, acceptance 0.95) on a curve where only long checks pay: its
    proposals are trials at no cost until one is right, then it drafts, within 8 steps; the 100 steps run at 1.2x
    plain or better (1.39x at best: K = 7 at every step; a record of the last ten trials chooses 3 to 23)."""
    policy = policy_on(llama_cpp_like)
    failing, _ = simulate(policy, [0.0] * 300, llama_cpp_like, free=True, classes=LOOKUP_CLASSES, seed=seed)
    assert not any(failing)
    repeat, speed = simulate(policy, [0.95] * 100, llama_cpp_like, free=True, classes=(LONG_PAST_MATCH,),
                             seed=seed)
    assert any(repeat[:8]) and speed >= 1.2


def test_free_proposals_that_start_being_copied_are_drafted_at_once():
    """After 300 steps of rejected proposals the text starts copying (acceptance 0.95): the trials of the unused
    proposals bring drafting back within 10 steps, at no cost before."""
    chosen, _ = simulate(policy_on(losing), [0.0] * 300 + [0.95] * 100, losing, free=True, classes=(SIX,))
    assert not any(chosen[:300])
    assert any(chosen[300:310]) and sum(k > 0 for k in chosen[310:]) >= 80


@pytest.mark.parametrize("free", [False, True])
def test_drafting_that_pays_keeps_drafting(free):
    """(c): cheap verification (1 + 0.05 (n - 1)), a draft token 0.02, acceptance 0.9: K > 0 at every step but a
    free class's first (its trial at no cost), at 3x plain or better."""
    steps = 400
    chosen, speed = simulate(policy_on(cheap), [0.9] * steps, cheap, draft=0.02, free=free, classes=(SIX,))
    assert chosen[1:].count(0) == 0 and (chosen[0] == 0) == free
    assert sum(chosen[10:]) / (steps - 10) >= 5
    assert speed >= 3.0


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
    fixed = DraftLengthPolicy(adaptive=False)
    for _ in range(DraftLengthPolicy.LOOKUP_IDLE + 1):
        fixed.observe(0, 0, verify_s=UNIT, draft_s=0.0, free=True)
    assert fixed.wants_lookup()  # a fixed K drafts at every step: it always looks


def test_a_draft_token_is_priced_against_the_fastest_recent_plain_step():
    """A draft token's cost in passes is its seconds over a plain step's now, the fastest of the recent steps: a
    pass that waited for a core, or the first of its size (which can cost a hundred plain steps), must not make
    drafting look cheap."""
    policy = policy_on(middling)
    for _ in range(10):
        policy.observe(4, 4, verify_s=UNIT * middling(5), draft_s=UNIT * 0.2 * 4)
    assert policy.costs.draft_cost() == pytest.approx(0.2)
    policy.observe(4, 4, verify_s=50 * UNIT, draft_s=UNIT * 0.2 * 4)
    assert policy.costs.draft_cost() == pytest.approx(0.2)


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
    times the tiny target's pass): the reply is the plain one token for token. The slow drafter drafts at its
    prior, its cost unknown (twice at most: the first passes after a prefill can be slow enough to hide it), is
    measured far too dear to pay even if always right, and is never run again; a free one is never seen right,
    so never checked."""
    drafter = _Wrong(unused_token(reference, len(tokenizer)), seconds_per_token)
    engine = SpeculativeEngine(target, tokenizer, drafter)
    result = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=64))
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_steps <= (2 if seconds_per_token else 0)
    if seconds_per_token:
        assert engine.step_costs.draft_cost() > 1  # measured, by this engine: a draft token costs more than a pass


def test_the_engine_keeps_drafting_that_pays_and_stays_token_identical(target, tokenizer, prompt_ids, reference):
    """(d): free drafts that are always right, priced by the fixed cost model (conftest.py), where checking
    2 tokens costs 1.1 plain steps: the engine drafts nearly every token, and the reply is the plain one."""
    engine = SpeculativeEngine(target, tokenizer, _Oracle(len(prompt_ids), reference.token_ids))
    result = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=64))
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_accepted >= 40
    assert result.stats.target_passes < 30
