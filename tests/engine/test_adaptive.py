"""The draft-length policy: more K when drafts are accepted, none when they fail, respecting measured costs."""

import random

from specchat.engine.adaptive import DraftLengthPolicy, expected_tokens


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


def test_confidence_classes_are_learned_separately():
    policy = DraftLengthPolicy(k=4)
    rng = random.Random(1)
    for _ in range(80):
        for confidence, alpha in ((1, 0.1), (6, 0.95)):
            k = policy.choose(limit=100, confidence=confidence)
            n = 0
            while n < k and rng.random() < alpha:
                n += 1
            policy.observe(k, n, verify_s=0.040 + 0.004 * k, draft_s=0.0, confidence=confidence)
    assert policy.alpha(1) < 0.3 < 0.8 < policy.alpha(6)
    assert policy.choose(limit=100, confidence=6) >= 6
    assert policy.choose(limit=100, confidence=1) <= 1
