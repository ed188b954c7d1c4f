"""The draft-length policy: more K when drafts are accepted, none when they fail, respecting measured costs."""

import random

from specchat.engine.decoding.adaptive import CONTEXT, HISTORY, AcceptanceClass, DraftLengthPolicy, expected_tokens

ONE, SIX = AcceptanceClass(CONTEXT, 1), AcceptanceClass(CONTEXT, 6)  # prompt lookup's matches of 1 and 6 tokens


def run(policy, alpha: float, steps: int, cost=lambda n: 0.040 + 0.006 * (n - 1), draft_cost=0.0):
    """Simulated steps where each draft token is accepted with probability alpha; returns the chosen K's."""
    rng = random.Random(0)
    chosen = []
    for _ in range(steps):
        k = policy.choose(limit=100)
        chosen.append(k)
        n = 0
        while n < k and rng.random() < alpha:
            n += 1
        policy.observe(k, n, verify_s=cost(k + 1), draft_s=draft_cost * k)
    return chosen


def test_expected_tokens():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert abs(expected_tokens(0.5, 2) - 1.75) < 1e-12


def test_failing_drafts_fall_back_to_plain_decoding_with_rare_probes():
    chosen = run(DraftLengthPolicy(k=8), alpha=0.0, steps=60)
    tail = chosen[20:]
    assert tail.count(0) > 0.7 * len(tail)
    assert max(tail) <= 1  # only cheap probes


def test_good_drafts_grow_k():
    chosen = run(DraftLengthPolicy(k=2), alpha=1.0, steps=30)
    assert chosen[-1] >= 8


def test_steep_verify_cost_limits_k():
    cheap = run(DraftLengthPolicy(k=4), alpha=1.0, steps=30, cost=lambda n: 0.040 + 0.001 * n)
    steep = run(DraftLengthPolicy(k=4), alpha=1.0, steps=30, cost=lambda n: 0.040 * n)
    assert steep[-1] < cheap[-1]


def test_costly_draft_model_means_shorter_drafts():
    free = run(DraftLengthPolicy(k=4), alpha=0.8, steps=60)
    costly = run(DraftLengthPolicy(k=4), alpha=0.8, steps=60, draft_cost=0.020)
    assert sum(costly[20:]) < 0.7 * sum(free[20:])


def test_fixed_k_never_changes_and_respects_the_limit():
    policy = DraftLengthPolicy(k=5, adaptive=False)
    assert run(policy, alpha=0.0, steps=10) == [5] * 10
    assert policy.choose(limit=2) == 2 and policy.choose(limit=0) == 0


def test_acceptance_classes_are_learned_separately():
    policy = DraftLengthPolicy(k=4)
    rngs = {ONE: random.Random(1), SIX: random.Random(2)}  # each class's outcomes apart from the other's K
    for _ in range(80):
        for acceptance_class, alpha in ((ONE, 0.1), (SIX, 0.95)):
            k = policy.choose(limit=100, acceptance_class=acceptance_class)
            n = 0
            while n < k and rngs[acceptance_class].random() < alpha:
                n += 1
            policy.observe(k, n, verify_s=0.040 + 0.004 * k, draft_s=0.0, acceptance_class=acceptance_class)
    assert policy.alpha(ONE) < 0.3 < 0.8 < policy.alpha(SIX)
    assert policy.choose(limit=100, acceptance_class=SIX) >= 6
    assert policy.choose(limit=100, acceptance_class=ONE) <= 1


def test_a_policy_that_only_measured_long_drafts_still_tries_short_ones():
    """The trap seen on the real model: the first steps verified 5 and 6 tokens (the 5-token pass also timed the
    output head's layouts, so it measured high), a line through them said 1 token costs as much as 5, and the
    policy kept proposing 5 tokens at an acceptance of 0.16 without ever measuring a short step."""
    policy = DraftLengthPolicy(k=5)
    policy.costs.record(4, verify_s=0.1475, draft_s=None)
    policy.costs.record(5, verify_s=0.091, draft_s=None)
    assert policy.costs.verify_estimate(1) < policy.costs.verify_estimate(6)
    assert policy.costs.verify_estimate(5) <= policy.costs.verify_estimate(6)  # fewer tokens never cost more
    true_cost = lambda n: 0.040 + 0.010 * (n - 1)
    chosen = run(policy, alpha=0.16, steps=40, cost=true_cost)
    assert max(chosen[10:]) <= 2
    assert policy.costs.verify_estimate(1) < 0.05  # measured now


def test_measured_costs_are_kept_where_the_curve_rises():
    policy = DraftLengthPolicy()
    for n, cost in ((1, 0.040), (2, 0.045), (4, 0.067), (8, 0.070)):
        policy.costs.record(n - 1, verify_s=cost, draft_s=None)
    # beyond 8: half the larger of the 4-8 slope (0.75 ms a token) and the mean slope from 1 to 8 (4.3 ms a token)
    assert [round(policy.costs.verify_estimate(n), 4) for n in (1, 2, 3, 4, 6, 8, 10)] == [
        0.04, 0.045, 0.056, 0.067, 0.0685, 0.07, 0.0743]


def test_one_slow_pass_does_not_move_the_cost_curve():
    """A pass that waited for a core (a shared machine) must not make longer checks look cheap."""
    policy = DraftLengthPolicy()
    for _ in range(6):
        policy.costs.record(0, verify_s=0.017, draft_s=None)
    policy.costs.record(0, verify_s=0.055, draft_s=None)
    assert policy.costs.verify_estimate(1) == 0.017


def test_k_grows_only_a_little_past_the_sizes_measured():
    policy = DraftLengthPolicy(k=4)
    assert policy.choose(limit=100, acceptance_class=SIX) == 0  # nothing measured yet: a plain pass, not a blind draft
    policy.observe(0, 0, verify_s=0.040, draft_s=0.0)
    assert policy.choose(limit=100, acceptance_class=SIX) == 0  # one plain step is not a baseline yet (PLAIN_SAMPLES)
    policy.observe(0, 0, verify_s=0.040, draft_s=0.0)
    policy._class(SIX).successes = 3.0  # alpha 1 (three trials, all accepted)
    assert policy.choose(limit=100, acceptance_class=SIX) == 2  # at most 2 past the one size measured
    policy.observe(2, 2, verify_s=0.041, draft_s=0.0, acceptance_class=SIX)
    assert policy.choose(limit=100, acceptance_class=SIX) == 4


def test_a_class_whose_drafts_lose_time_stops_drafting_whatever_the_estimates_say():
    """The floor: drafting steps that cost more than plain decoding would have (here every drafting pass is slow,
    which the robust cost curve ignores as noise) put the class in the red; it then drafts only in rare probes."""
    policy = DraftLengthPolicy(k=4)
    for n in range(1, 9):
        for _ in range(8):
            policy.costs.record(n - 1, verify_s=0.010 + 0.0005 * (n - 1), draft_s=None)
    chosen = []
    for _ in range(200):
        k = policy.choose(limit=100, acceptance_class=SIX)
        chosen.append(k)
        policy.observe(k, k, verify_s=0.010 if k == 0 else 0.200, draft_s=0.0, acceptance_class=SIX)  # all accepted
    assert policy.alpha(SIX) > 0.9  # the estimate still says drafting pays...
    tail = chosen[20:]
    assert chosen[:3] != [0, 0, 0] and sum(k > 0 for k in tail) <= len(tail) // 30  # ...but it stopped, but probes


def test_probes_are_rare_where_checking_two_tokens_costs_twice_one():
    """llama.cpp on this CPU: verify(2) ~ 2 x verify(1), so a K = 1 probe costs a whole extra pass; probes must
    then stay within the probe budget (2% of the time) instead of coming every 6 steps."""
    steep = lambda n: 0.0056 * (1 if n == 1 else 0.6 + 0.45 * n)  # noqa: E731 (1: 5.6 ms, 2: 8.4, 4: 13.4)
    chosen = run(DraftLengthPolicy(k=4), alpha=0.0, steps=400, cost=steep)
    tail = chosen[50:]
    extra = sum(steep(k + 1) - steep(1) for k in tail)
    assert extra / (len(tail) * steep(1)) <= 0.02 + 1e-9
    assert 0 < tail.count(1) <= len(tail) // 20  # still probing, rarely (every 6 steps would be 58)


def test_greedy_replies_start_from_the_acceptance_earlier_replies_measured(target, tokenizer, prompt_ids):
    from specchat.engine.decoding.sampling import SamplingParams
    from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
    from specchat.engine.drafting import PromptLookupDrafter

    engine = SpeculativeEngine(target, tokenizer, PromptLookupDrafter())
    engine.generate(prompt_ids, GenerationConfig(max_new_tokens=24, seed=0))
    learned = {c: a.trials for c, a in engine.acceptance.items()}
    assert learned and any(trials > 3.0 for trials in learned.values())  # live counts beyond the prior's
    sampled = GenerationConfig(max_new_tokens=24, seed=0, sampling=SamplingParams(temperature=1.0))
    engine.generate(prompt_ids, sampled)
    assert {c: a.trials for c, a in engine.acceptance.items()} == learned  # a sample neither reads nor writes them


def test_a_long_match_in_past_replies_is_tried_at_once_where_a_context_match_is_not():
    """On a curve where checking two tokens costs two passes only acceptance above ~0.85 pays: a long match in an
    earlier reply (most often the same request again) starts above it, a context match of the same length not."""
    policy = DraftLengthPolicy()
    steep = lambda n: 0.0068 * (1 if n == 1 else 1.0 + 0.5 * n)  # noqa: E731 (2: 2x one pass, 8: 5x)
    for n in range(1, 10):
        for _ in range(4):
            policy.costs.record(n - 1, verify_s=steep(n), draft_s=None)
    assert policy.choose(limit=100, acceptance_class=AcceptanceClass(HISTORY, 8), free=True) >= 3
    assert policy.choose(limit=100, acceptance_class=SIX, free=True) == 0
