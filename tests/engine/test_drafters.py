"""Drafters on their own: prompt lookup proposals and the draft model's cache bookkeeping."""

import random

import numpy as np
import pytest
import torch

from specchat.engine.backends.torch.kv_cache import new_cache, rollback
from specchat.engine.decoding.adaptive import PROMPT, RESUMED, AcceptanceClass
from specchat.engine.decoding.sampling import Sampler, SamplingParams
from specchat.engine.drafting import ModelDrafter, PromptLookupDrafter
from specchat.engine.drafting.lookup import COPY_MATCH, context_class


def cached_tokens(drafter) -> int:
    """The positions a draft-model drafter's cache holds: its backend's length."""
    return drafter._backend.length


def test_prompt_lookup_proposes_what_followed_the_latest_match():
    drafter = PromptLookupDrafter(max_ngram=3)
    context = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3]
    assert drafter.propose(context, 2).tokens == [7, 8]  # "1 2 3" went on two ways: the latest one's
    assert drafter.propose([4, 5, 6], 3) is None


def test_suffix_lookup_proposes_the_longest_supported_continuation():
    drafter = PromptLookupDrafter()
    # "0 1 2 3" was followed by "4 5 6 7" twice and by "4 5 8" once: the proposal follows the majority while more
    # than half of the occurrences still agree, and stops where they split evenly (after "7": "0" or "9")
    context = [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 9, 0, 1, 2, 3, 4, 5, 8, 0, 1, 2, 3]
    draft = drafter.propose(context, 10)
    assert draft.tokens == [4, 5, 6, 7] and draft.match_length == 4
    # the longest match wins over a more recent shorter one, and one occurrence is copied as far as it goes
    context = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 5, 13, 20, 21, 10, 11, 12, 13]
    assert drafter.propose(context, 6).tokens == [14, 15, 16, 17, 18, 19]
    # a copy that reaches the context's end runs on over what it proposed: the text repeats with its period
    assert drafter.propose([7, 1, 2, 3, 1, 2, 3, 1, 2], 7).tokens == [3, 1, 2, 3, 1, 2, 3]


def test_prompt_lookup_falls_back_to_shorter_ngrams():
    drafter = PromptLookupDrafter(max_ngram=3)
    assert drafter.propose([5, 6, 7, 1, 2, 9, 2], 2).tokens == [9, 2]


def _lookup_by_windows(context, k, max_ngram=64, min_ngram=1):
    """The definition, spelled out: for n from the longest down, every earlier window equal to the final n-gram
    (not the final one itself); their continuations followed token by token while more than half of those still
    agreeing continue alike (the latest occurrence's alone where they split at once); one occurrence left is copied
    on, over the proposal itself past the context's end."""
    for n in range(min(max_ngram, len(context) - 1), min_ngram - 1, -1):
        suffix = context[-n:]
        starts = [s + n for s in range(len(context) - n) if context[s:s + n] == suffix]
        if not starts:
            continue
        proposal = []
        read = lambda at: context[at] if at < len(context) else proposal[at - len(context)]
        alive = starts[::-1]
        while len(proposal) < k and len(alive) > 1:
            nexts = [read(a + len(proposal)) for a in alive]
            best = max(set(nexts), key=nexts.count)
            if 2 * nexts.count(best) <= len(alive):
                if not proposal:
                    alive = alive[:1]
                break
            proposal.append(best)
            alive = [a for a, t in zip(alive, nexts) if t == best]
        while len(alive) == 1 and len(proposal) < k:
            proposal.append(read(alive[0] + len(proposal)))
        return proposal, context_class(n)
    return None


def test_lookup_is_the_longest_match_by_its_definition():
    """Random short texts over a few tokens (many repeats, no copy in progress to take up): the lookup's proposal
    and class are what the window-by-window definition gives."""
    rng = random.Random(7)
    drafter = PromptLookupDrafter()
    checked = 0
    for _ in range(400):
        context = [rng.randrange(4) for _ in range(rng.randrange(2, 40))]
        expected = _lookup_by_windows(context, 6)
        draft = drafter._longest_match(np.asarray(context), 6)
        assert (draft.tokens, draft.acceptance_class) == expected if expected else draft is None
        if drafter._resumed_copy(np.asarray(context), 6) is None:  # nothing to take up: propose() is the same
            got = drafter.propose(context, 6)
            assert (got.tokens, got.acceptance_class) == expected if expected else got is None
            checked += 1
    assert checked > 50


SOURCE = list(range(100, 140))  # a text of distinct tokens, the one a reply copies with edits


def test_lookup_takes_a_copy_up_after_a_replaced_token():
    # the reply copies SOURCE, but writes 7 for SOURCE[12] (a correction): 7 occurs nowhere before, so the plain
    # lookup has nothing; the copy resumes after the token it replaced
    context = SOURCE + [1] + SOURCE[:12] + [7]
    draft = PromptLookupDrafter().propose(context, 5)
    assert draft.tokens == SOURCE[13:18] and draft.acceptance_class == AcceptanceClass(RESUMED, 0)


def test_lookup_takes_a_copy_up_where_it_is_found_again():
    # two source tokens became one (7), then the copy goes on with SOURCE[14]: that token is also in a later,
    # unrelated passage (2, SOURCE[14], 3, 4), which plain lookup (its latest occurrence) would follow
    text = SOURCE + [2, SOURCE[14], 3, 4]
    context = text + [1] + SOURCE[:12] + [7, SOURCE[14]]
    assert PromptLookupDrafter()._longest_match(np.asarray(context), 4).tokens == [3, 4, 1, 100]
    draft = PromptLookupDrafter().propose(context, 4)
    assert draft.tokens == SOURCE[15:19] and draft.acceptance_class == AcceptanceClass(RESUMED, 1)


def test_lookup_keeps_a_long_match_and_resumes_only_near_the_copy():
    # a match of COPY_MATCH tokens or more is a copy in progress: followed as it is
    context = SOURCE + [1] + SOURCE[:COPY_MATCH + 3]
    assert PromptLookupDrafter().propose(context, 3).acceptance_class == context_class(COPY_MATCH + 3)
    # a copy that broke off long ago (more tokens since than RESUME_WITHIN) is not taken up
    context = SOURCE + [1] + SOURCE[:12] + [7, 8, 9, 6, 5, 4]
    assert PromptLookupDrafter().propose(context, 3) is None


def test_rollback_restores_the_cache_exactly(target, prompt_ids):
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        cache = new_cache(target)
        target(input_ids=ids[:, :-1], past_key_values=cache, use_cache=True)
        target(input_ids=torch.tensor([[5, 6, 7, 8]]), past_key_values=cache, use_cache=True)  # a rejected draft
        rollback(cache, ids.shape[1] - 1)
        after_rollback = target(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True).logits[0, -1]
        fresh = target(input_ids=ids).logits[0, -1]
    assert torch.allclose(after_rollback, fresh, atol=1e-5)


@pytest.mark.parametrize("lean", [True, False])
def test_draft_model_cache_follows_the_accepted_text(target, close_draft, prompt_ids, lean):
    drafter = ModelDrafter(close_draft, lean=lean)
    drafter.begin(prompt_ids, Sampler(SamplingParams(), seed=0), target.config.vocab_size)
    context = list(prompt_ids)
    draft = drafter.propose(context, 4)
    assert len(draft.tokens) == 4 and cached_tokens(drafter) == len(context) + 3
    context += draft.tokens[:1] + [0]  # one accepted, then the target's correction
    drafter.update(context, 1)
    assert cached_tokens(drafter) == len(prompt_ids) + 1
    drafter.propose(context, 3)  # feeds only the unseen correction token, then drafts
    assert cached_tokens(drafter) == len(context) + 2


def test_hybrid_offers_lookup_for_free_and_keeps_its_model_cache_in_step(target, close_draft):
    from specchat.engine.decoding.sampling import Sampler, SamplingParams
    from specchat.engine.drafting import make_drafter

    drafter = make_drafter("hybrid", close_draft)
    context = [5, 6, 7, 8, 9, 5, 6, 7]
    drafter.begin(context, Sampler(SamplingParams(), 0), target.config.vocab_size)
    free = drafter.free_proposal(context, 2)
    assert free.tokens == [8, 9] and free.acceptance_class == AcceptanceClass(PROMPT, 3) and free.forwards == 0
    drafter.update(context + [8, 9, 4], 2)  # a lookup step: the model has not run
    assert cached_tokens(drafter.model_drafter) == 0
    context += [8, 9, 4]
    drafted = drafter.propose(context, 3)  # catches up on all 11 tokens in one pass, then drafts
    assert drafted.forwards == 3 and cached_tokens(drafter.model_drafter) == len(context) + 2
    drafter.update(context + [1, 2], 1)
    assert cached_tokens(drafter.model_drafter) == len(context) + 1  # the one accepted draft token stays cached


def test_policy_prefers_lookup_only_when_it_pays():
    from specchat.engine.decoding.adaptive import DraftLengthPolicy, StepCosts
    from specchat.engine.decoding.cost_curve import CostCurve

    costs = StepCosts(CostCurve({1: 1.0, 2: 1.05, 3: 1.1, 4: 1.5, 5: 1.8}), draft_prior=0.1)
    policy = DraftLengthPolicy(costs=costs)
    for _ in range(10):
        policy.observe(4, 4, 1.8, 0.0, acceptance_class=AcceptanceClass(PROMPT, 6), free=True)  # always right
        policy.observe(4, 0, 1.8, 0.0, acceptance_class=AcceptanceClass(PROMPT, 1), free=True)  # always wrong
        policy.observe(3, 2, 1.5, 0.3, acceptance_class=None)  # the model: two of three, 0.1 passes a token
    assert policy.free_beats_model(limit=16, acceptance_class=AcceptanceClass(PROMPT, 6))
    assert not policy.free_beats_model(limit=16, acceptance_class=AcceptanceClass(PROMPT, 1))
    assert costs.draft_token_s == pytest.approx(0.1)  # free steps never count as model drafting time
    assert costs.draft_cost() == pytest.approx(0.1)  # 0.1 s a token, against 1 s a plain step
    assert not policy.free_beats_model(limit=16, acceptance_class=AcceptanceClass(PROMPT, 2))  # not seen yet
