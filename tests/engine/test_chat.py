"""Chat prompts that fit the context window: the oldest turns go first, the system prompt and the last turn stay."""

import pytest

from specchat.engine import Message, build_prompt_ids
from specchat.engine.chat import build_fitting_prompt
from specchat.engine.errors import PromptError

HISTORY = [Message("user", "first question " * 10), Message("assistant", "first answer " * 10),
           Message("user", "second question " * 10), Message("assistant", "second answer " * 10),
           Message("user", "third question")]


def test_a_conversation_that_fits_is_sent_whole(tokenizer):
    whole = build_prompt_ids(tokenizer, HISTORY, "Be brief.")
    assert build_fitting_prompt(tokenizer, HISTORY, "Be brief.", len(whole)) == (whole, 0)


def test_the_oldest_exchanges_are_left_out_until_it_fits(tokenizer):
    whole = build_prompt_ids(tokenizer, HISTORY, "Be brief.")
    prompt, left_out = build_fitting_prompt(tokenizer, HISTORY, "Be brief.", len(whole) - 1)
    assert left_out == 2 and prompt == build_prompt_ids(tokenizer, HISTORY[2:], "Be brief.")
    last = build_prompt_ids(tokenizer, HISTORY[4:], "Be brief.")
    assert build_fitting_prompt(tokenizer, HISTORY, "Be brief.", len(last)) == (last, 4)
    assert "Be brief." in tokenizer.decode(last)  # the system prompt always stays


def test_a_last_message_too_long_for_the_model_is_refused_with_a_clear_message(tokenizer):
    last = build_prompt_ids(tokenizer, HISTORY[4:], None)
    with pytest.raises(PromptError, match="shorten it"):
        build_fitting_prompt(tokenizer, HISTORY, None, len(last) - 1)
