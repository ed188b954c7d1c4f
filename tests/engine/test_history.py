"""The history drafter: the suffix index against its brute-force definition, its limits, and losslessness."""

import random
from typing import Sequence

import pytest

from specchat.engine.decoding.adaptive import PAST_REPLIES, PROMPT, AcceptanceClass
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import NoDrafter, PromptLookupDrafter, make_drafter
from specchat.engine.drafting.past_replies import HistoryMatch, SuffixIndex


def brute_force_match(documents: Sequence[Sequence[int]], context: Sequence[int], k: int, max_ngram: int = 8,
                      min_ngram: int = 2) -> HistoryMatch | None:
    """The match, as past_replies.py's docstring defines it, spelled out naively: the longest n-gram of the
    context's end (min_ngram..max_ngram) followed by a token in some document, its newest occurrence (latest
    document, latest in it); the up to k tokens after it, or None."""
    for n in range(min(max_ngram, len(context)), min_ngram - 1, -1):
        gram = list(context[-n:])
        for document in reversed(documents):
            for end in range(len(document) - 2, n - 2, -1):  # end: index of the n-gram's last token
                if list(document[end - n + 1 : end + 1]) == gram:
                    return HistoryMatch(length=n, tokens=list(document[end + 1 : end + 1 + k]))
    return None


def random_documents(rng: random.Random, count: int, vocab: int, longest: int) -> list[list[int]]:
    return [[rng.randrange(vocab) for _ in range(rng.randrange(0, longest))] for _ in range(count)]


@pytest.mark.parametrize("seed", range(6))
def test_index_matches_the_brute_force_definition(seed):
    rng = random.Random(seed)
    vocab = 3 + seed  # small vocabularies: many and long matches, ties between documents
    documents = random_documents(rng, 25, vocab, 40)
    index = SuffixIndex(max_ngram=6)
    index.extend(documents)
    kept = [d for d in documents if len(d) >= 2]  # shorter ones hold no bigram: not indexed
    for _ in range(300):
        context = [rng.randrange(vocab) for _ in range(rng.randrange(2, 12))]
        if rng.random() < 0.5:  # often end the context with a piece of a document
            source = rng.choice(kept)
            start = rng.randrange(len(source))
            context += source[start : start + rng.randrange(1, 9)]
        k = rng.randrange(1, 8)
        assert index.match(context, k) == brute_force_match(kept, context, k, max_ngram=6)


def test_a_match_never_runs_across_two_replies():
    index = SuffixIndex()
    index.extend([[1, 2, 3], [4, 5, 6, 7]])
    assert index.match([9, 3, 4], 3) is None  # "3 4" only exists across the boundary
    assert index.match([9, 2, 3], 3) is None  # "2 3" ends its reply: nothing follows it there
    found = index.match([8, 4, 5], 5)
    assert (found.length, found.tokens) == (2, [6, 7])  # the continuation stops at the reply's end


def test_the_newest_occurrence_of_the_longest_match_wins():
    index = SuffixIndex()
    index.extend([[1, 2, 3, 10], [7, 2, 3, 11], [5, 1, 2, 3, 12], [2, 3, 13]])
    assert index.match([1, 2, 3], 1).tokens == [12]  # "1 2 3" (3 tokens) beats the newer "2 3"
    assert index.match([9, 2, 3], 1).tokens == [13]  # among "2 3" matches, the newest


def test_the_oldest_replies_are_forgotten_beyond_the_budget():
    index = SuffixIndex(max_tokens=100)
    for i in range(30):
        index.add([1000 + i, 1, 2, 3 + i])
    assert index.token_count <= 100
    assert index.match([5, 1000 + 29, 1], 1).tokens == [2]  # the newest is kept
    assert index.match([5, 1000, 1], 1) is None  # the oldest is gone


def test_bad_settings_and_tokens_are_refused():
    with pytest.raises(ValueError):
        SuffixIndex(min_ngram=1)
    with pytest.raises(ValueError):
        SuffixIndex().add([1, -1, 2])


def test_history_proposals_have_their_own_acceptance_class():
    index = SuffixIndex()
    index.add([5, 6, 7, 8, 9])
    drafter = PromptLookupDrafter(history=index)
    draft = drafter.propose([1, 2, 5, 6, 7], 3)
    assert (draft.tokens, draft.acceptance_class) == ([8, 9], AcceptanceClass(PAST_REPLIES, 3))
    # a longer match in the context itself wins, and keeps the plain lookup's class
    draft = drafter.propose([5, 6, 7, 1, 2, 3, 4, 5, 6, 7], 3)
    assert (draft.tokens, draft.acceptance_class) == ([1, 2, 3], AcceptanceClass(PROMPT, 3))


def test_the_history_drafter_is_lossless_even_with_misleading_history(target, tokenizer, prompt_ids):
    config = GenerationConfig(max_new_tokens=40)
    reference = SpeculativeEngine(target, tokenizer, NoDrafter()).generate(prompt_ids, config)
    reply = list(reference.token_ids)
    index = SuffixIndex()
    # the true reply, a corrupted copy of it (long matches that then go wrong) and noise
    corrupted = [t if i % 7 else (t + 1) % target.config.vocab_size for i, t in enumerate(reply)]
    index.extend([corrupted, list(prompt_ids[-6:]) + reply[:5] + [3, 3, 3], reply])
    result = SpeculativeEngine(target, tokenizer, make_drafter("history", history=index)).generate(prompt_ids, config)
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_accepted > 0  # the history really drafted


def test_the_history_kind_needs_an_index():
    with pytest.raises(ValueError):
        make_drafter("history")


def test_a_whole_reply_again_is_a_class_of_its_own():
    from specchat.engine.drafting import history_class

    reply = list(range(100, 140))
    index = SuffixIndex()
    index.add(reply)
    draft = PromptLookupDrafter(history=index).propose([1, 2] + reply[:20], 5)
    assert draft.tokens == reply[20:25] and draft.acceptance_class == AcceptanceClass(PAST_REPLIES, 16)  # 20 matched
    assert [history_class(n) for n in (2, 8, 9, 15, 16, 40)] == [AcceptanceClass(PAST_REPLIES, n)
                                                                 for n in (2, 8, 12, 12, 16, 16)]
