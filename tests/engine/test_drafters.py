"""Drafters on their own: prompt lookup proposals and the draft model's cache bookkeeping."""

import torch

from specchat.engine import ModelDrafter, PromptLookupDrafter
from specchat.engine.cache import new_cache, rollback
from specchat.engine.sampling import Sampler, SamplingParams


def test_prompt_lookup_proposes_what_followed_the_latest_match():
    drafter = PromptLookupDrafter(max_ngram=3)
    context = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3]
    assert drafter.propose(context, 2).tokens == [7, 8]  # the latest earlier "1 2 3" is followed by 7 8
    assert drafter.propose([4, 5, 6], 3) is None


def test_prompt_lookup_falls_back_to_shorter_ngrams():
    drafter = PromptLookupDrafter(max_ngram=3)
    assert drafter.propose([5, 6, 7, 1, 2, 9, 2], 2).tokens == [9, 2]


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


def test_draft_model_cache_follows_the_accepted_text(target, close_draft, prompt_ids):
    drafter = ModelDrafter(close_draft)
    drafter.begin(prompt_ids, Sampler(SamplingParams(), seed=0), target.config.vocab_size)
    context = list(prompt_ids)
    draft = drafter.propose(context, 4)
    assert len(draft.tokens) == 4 and drafter._cache.get_seq_length() == len(context) + 3
    context += draft.tokens[:1] + [0]  # one accepted, then the target's correction
    drafter.update(context, 1)
    assert drafter._cache.get_seq_length() == len(prompt_ids) + 1
    drafter.propose(context, 3)  # feeds only the unseen correction token, then drafts
    assert drafter._cache.get_seq_length() == len(context) + 2
