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


def test_a_short_prompt_inside_a_suite_prompt_is_dropped():
    short = [TrainingPrompt("qa", "What is the capital of Australia?"), TrainingPrompt("chat", "Now make it shorter.")]
    assert drop_suite_overlap(short, SUITE) == ([], 2)
    assert drop_suite_overlap([TrainingPrompt("qa", "What is the capital of Peru?")], SUITE)[1] == 0


def test_the_head_rounds_are_reproducible_varied_and_apart_from_the_suite():
    from specchat.training.varied import fourth_round_prompts, third_round_prompts

    third = third_round_prompts(1000, seed=0)
    assert third == third_round_prompts(1000, seed=0) and len(third) > 600
    conversations = [(p.text, f"Reply {i}: first, do this. Second, do that.") for i, p in enumerate(third[:50])]
    documents = [f"Document {i}. The Ashford library opened on Monday; readers came early." for i in range(40)]
    fourth = fourth_round_prompts(conversations, documents, 600, seed=0)
    assert Counter(p.category for p in third).keys() == {"qa", "chat", "writing"}
    assert Counter(p.category for p in fourth).keys() == {"chat", "summarization", "rewriting", "extraction"}
    assert sum(1 for p in fourth if p.history) > 150
    assert drop_suite_overlap(third + fourth, SUITE)[1] == 0  # written apart from the suite, not just filtered
