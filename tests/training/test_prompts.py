"""Training prompts: reproducible, varied, and never overlapping the benchmark suite."""

from collections import Counter

from specchat.resources import default_prompt_suite
from specchat.training.prompts import (OVERLAP_WORDS, TrainingPrompt, drop_suite_overlap, first_round_prompts,
                                       second_round_prompts, suite_texts)

SUITE = suite_texts(default_prompt_suite().read_text(encoding="utf-8"))


def test_prompts_are_reproducible_and_distinct():
    a, b = first_round_prompts(500, seed=3), first_round_prompts(500, seed=3)
    assert a == b
    assert len({p.text for p in a}) == len(a) > 450
    assert first_round_prompts(500, seed=4) != a


def test_first_and_second_rounds_cover_the_suite_categories():
    first = first_round_prompts(300, seed=0)
    second = second_round_prompts([f"Passage {i} about tides. It has two sentences." for i in range(30)], 90, seed=0)
    categories = Counter(p.category for p in first + second)
    suite_categories = {"chat", "writing", "coding", "rewriting", "summarization", "extraction", "qa", "math"}
    assert set(categories) == suite_categories
    assert min(categories.values()) >= 20


def test_no_suite_prompt_survives_the_overlap_filter():
    planted = [TrainingPrompt("qa", SUITE[0]), TrainingPrompt("qa", "Tell me: " + SUITE[5] + " Thanks.")]
    kept, dropped = drop_suite_overlap(planted + first_round_prompts(200, seed=0), SUITE)
    assert dropped >= 2
    assert not any(p.text in (SUITE[0],) or SUITE[5] in p.text for p in kept)


def test_generated_prompts_share_no_long_word_run_with_the_suite():
    prompts = first_round_prompts(2000, seed=0) + second_round_prompts(["Some passage text here."], 500, seed=0)
    kept, dropped = drop_suite_overlap(prompts, SUITE)
    assert dropped < len(prompts) * 0.01, f"{dropped} prompts reuse {OVERLAP_WORDS}-word runs of the suite"
