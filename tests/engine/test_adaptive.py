"""The draft-length policy: K is the size on the cost curve that yields the most expected tokens per pass, 0 when
none beats plain decoding; acceptance is learned per class; a free class is drafted only once it was seen right."""

import random

import pytest

from specchat.core.acceptance import expected_tokens
from specchat.engine.decoding.adaptive import (PAST_REPLIES, PROMPT, AcceptanceBook, AcceptanceClass,
                                               DraftLengthPolicy, StepCosts, cap, prior)
from specchat.engine.decoding.cost_curve import FIXED_CURVE, PASS_SIZES, CostCurve

ONE, SIX = AcceptanceClass(PROMPT, 1), AcceptanceClass(PROMPT, 6)  # prompt lookup's matches of 1 and 6 tokens
FLAT = CostCurve({n: 1.0 + 0.05 * (n - 1) for n in PASS_SIZES})  # a GPU's, or torch on a CPU
STEEP = CostCurve({n: 1.0 if n == 1 else 0.9 + 0.5 * n for n in PASS_SIZES})  # llama.cpp's: 2 tokens 1.9 passes


def test_expected_tokens():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert abs(expected_tokens(0.5, 2) - 1.75) < 1e-12


@pytest.mark.parametrize("curve", [FLAT, STEEP, FIXED_CURVE], ids=["flat", "steep", "fixed"])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.8, 0.95])
def test_k_is_the_measured_size_with_the_most_tokens_per_pass(curve, alpha):
    book = AcceptanceBook({SIX: (10 * alpha, 10.0)}, right={SIX})
    policy = DraftLengthPolicy(k_max=63, costs=StepCosts(curve), book=book)
    believed = min(alpha, cap(SIX))
    rates = {n - 1: expected_tokens(believed, n - 1) / curve.ratio(n) for n in curve.sizes}
    k = policy.choose(100, SIX, free=True)
    assert rates[k] == max(rates.values())
    assert (k == 0) == (max(rates.values()) <= 1.0)  # plain decoding unless a draft strictly pays


def test_k_is_zero_where_nothing_pays_and_grows_with_acceptance():
    ks = {}
    for curve, name in ((FLAT, "flat"), (STEEP, "steep")):
        for alpha in (0.0, 0.6, 0.9):
            book = AcceptanceBook({SIX: (10 * alpha, 10.0)}, right={SIX})
            ks[name, alpha] = DraftLengthPolicy(k_max=63, costs=StepCosts(curve), book=book).choose(100, SIX, True)
    assert ks["flat", 0.0] == ks["steep", 0.0] == ks["steep", 0.6] == 0
    assert 0 < ks["flat", 0.6] < ks["flat", 0.9] and ks["steep", 0.9] > 0


def test_a_draft_models_tokens_shorten_its_drafts():
    book = AcceptanceBook({None: (8.0, 10.0)})
    cheap = DraftLengthPolicy(k_max=63, costs=StepCosts(FLAT), book=book)
    costly = DraftLengthPolicy(k_max=63, costs=StepCosts(FLAT, draft_prior=0.2), book=book)
    assert 0 < costly.choose(100) < cheap.choose(100)


def test_fixed_k_never_changes_and_respects_the_limit():
    policy = DraftLengthPolicy(k=7, adaptive=False)
    assert [policy.choose(100, ONE, free=True) for _ in range(5)] == [7] * 5
    policy.observe(7, 0, verify_s=0.01, draft_s=0.0, acceptance_class=ONE, free=True)  # 8 tokens: not on the curve
    assert policy.choose(limit=2) == 2 and policy.choose(limit=0) == 0


def test_a_free_class_is_drafted_only_once_it_was_seen_right():
    """However likely its prior (a 16-token match in past replies), a class's proposals are trials at no cost until
    one's first token is the target's; a miss alone never starts drafting."""
    policy = DraftLengthPolicy(k_max=63, costs=StepCosts(FLAT))
    long_past = AcceptanceClass(PAST_REPLIES, 16)
    assert prior(long_past) > 0.85 and policy.choose(100, long_past, free=True) == 0
    policy.observe_shadow(long_past, hit=False)
    assert policy.choose(100, long_past, free=True) == 0
    policy.observe_shadow(long_past, hit=True)
    assert policy.choose(100, long_past, free=True) > 0


def test_acceptance_classes_are_learned_separately():
    policy = DraftLengthPolicy(k_max=63, costs=StepCosts(STEEP))
    rngs = {ONE: random.Random(1), SIX: random.Random(2)}  # each class's outcomes apart from the other's K
    for _ in range(80):
        for acceptance_class, alpha in ((ONE, 0.1), (SIX, 0.95)):
            k = policy.choose(limit=100, acceptance_class=acceptance_class, free=True)
            n = 0
            while n < k and rngs[acceptance_class].random() < alpha:
                n += 1
            policy.observe(k, n, verify_s=0.01, draft_s=0.0, acceptance_class=acceptance_class, free=True)
            if k == 0:
                policy.observe_shadow(acceptance_class, rngs[acceptance_class].random() < alpha)
    assert policy.book.alpha(ONE) < 0.3 < 0.8 < policy.book.alpha(SIX)
    assert policy.choose(limit=100, acceptance_class=SIX, free=True) >= 3
    assert policy.choose(limit=100, acceptance_class=ONE, free=True) == 0


def test_the_book_weighs_each_trial_decay_times_the_next():
    """A check of k drafts with n accepted is n hits in n + 1 trials (n in k), the rejected one last; each trial
    weighs DECAY times the next, so a class's record is about its last ten trials, however long its checks."""
    book, decay = AcceptanceBook(), AcceptanceBook.DECAY
    book.record(SIX, 4, 4)
    assert book.counts[SIX] == pytest.approx((decay ** 4 * 3 * prior(SIX) + 1 + decay + decay ** 2 + decay ** 3,
                                              decay ** 4 * 3 + 1 + decay + decay ** 2 + decay ** 3))
    book.record(SIX, 4, 1)  # a hit, then a miss weighing 1
    hits, trials = book.counts[SIX]
    previous_hits, previous_trials = decay ** 4 * 3 * prior(SIX) + 3.439, decay ** 4 * 3 + 3.439
    assert (hits, trials) == pytest.approx((decay ** 2 * previous_hits + decay, decay ** 2 * previous_trials + 1 + decay))
    for _ in range(60):
        book.record(SIX, 63, 63)  # a long copy: the record saturates at ten trials, not hundreds
    assert book.counts[SIX] == pytest.approx((10.0, 10.0), rel=1e-3)
    book.record(SIX, 63, 0)
    assert book.alpha(SIX) == pytest.approx(0.9, rel=1e-3) and SIX in book.right


def test_greedy_replies_start_from_the_acceptance_earlier_replies_measured(target, tokenizer, prompt_ids):
    from specchat.engine.decoding.sampling import SamplingParams
    from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
    from specchat.engine.drafting import PromptLookupDrafter

    engine = SpeculativeEngine(target, tokenizer, PromptLookupDrafter())
    engine.generate(prompt_ids, GenerationConfig(max_new_tokens=24, seed=0))
    learned = dict(engine.acceptance.counts)
    assert learned and any(trials != AcceptanceBook.PRIOR_TRIALS for _, trials in learned.values())
    sampled = GenerationConfig(max_new_tokens=24, seed=0, sampling=SamplingParams(temperature=1.0))
    engine.generate(prompt_ids, sampled)
    assert engine.acceptance.counts == learned  # a sample neither reads nor writes them
