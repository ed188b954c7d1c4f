"""Integration tests on the real embedded SmolLM2-135M-Instruct (one model load shared by all of them)."""

import pytest

from specchat.engine import GenerationConfig, Message, build_prompt_ids

pytestmark = pytest.mark.model

PASSAGE = ("The library opens at nine in the morning and closes at six in the evening. Visitors may borrow up to "
           "five books at a time, and every loan lasts three weeks.")


def prompt(pair, text):
    return build_prompt_ids(pair.target.tokenizer, [Message("user", text)])


def test_chat_template_is_applied(embedded_pair):
    text = embedded_pair.target.tokenizer.decode(prompt(embedded_pair, "Hello"))
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("question", ["What is the capital of France?",
                                      f"Repeat exactly: {PASSAGE}"])
def test_greedy_outputs_are_identical_across_drafters(embedded_pair, question):
    ids = prompt(embedded_pair, question)
    config = GenerationConfig(max_new_tokens=40)
    plain = embedded_pair.engine("none").generate(ids, config)
    lookup = embedded_pair.engine("pld").generate(ids, config)
    assert lookup.token_ids == plain.token_ids
    assert lookup.text == plain.text and plain.text.strip()


def test_prompt_lookup_accepts_tokens_when_the_reply_copies_the_prompt(embedded_pair):
    result = embedded_pair.engine("pld").generate(prompt(embedded_pair, f"Repeat exactly: {PASSAGE}"),
                                                  GenerationConfig(max_new_tokens=40))
    assert result.stats.draft_accepted >= 10
    assert result.stats.tau > 1.5  # well over one token per target pass
    assert "Visitors may borrow" in result.text
