"""Integration tests on the real embedded SmolLM2-135M-Instruct (one model load shared by all of them)."""

import re

import pytest

from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig

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
    assert plain.text.strip()
    for drafter in ("pld", "model", "hybrid", "eagle", "eagle-hybrid"):
        drafted = embedded_pair.engine(drafter).generate(ids, config)
        assert drafted.token_ids == plain.token_ids, drafter
        assert drafted.text == plain.text


def test_the_lean_forward_replies_exactly_as_transformers_generate(embedded_pair):
    import torch

    ids = prompt(embedded_pair, "Write two sentences about the sea.")
    model = embedded_pair.target.model
    lean = embedded_pair.engine("none")
    assert lean.runner._lean is not None  # the default on this CPU
    ours = lean.generate(ids, GenerationConfig(max_new_tokens=48))
    with torch.inference_mode():
        theirs = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                do_sample=False, max_new_tokens=48, pad_token_id=2)
    assert list(ours.token_ids) == theirs[0, len(ids):].tolist()[: len(ours.token_ids)]


GARDEN_RUNS: dict = {}  # drafter -> the statistics of its reply below (greedy, a fixed K: the same every time)


def garden_stats(pair, drafter):
    """The statistics of the drafter's reply to one question, computed once for the tests that read them."""
    if drafter not in GARDEN_RUNS:
        ids = prompt(pair, "Give me three tips for keeping a small vegetable garden healthy.")
        config = GenerationConfig(max_new_tokens=48, k=3, adaptive_k=False)
        GARDEN_RUNS[drafter] = pair.engine(drafter).generate(ids, config).stats
    return GARDEN_RUNS[drafter]


def test_the_shipped_draft_agrees_with_the_target_often(embedded_pair):
    stats = garden_stats(embedded_pair, "model")
    # A random draft of this vocabulary would be right about 1 time in 49152 and give one token per pass.
    assert stats.acceptance_by_position[0] > 0.2
    assert stats.tau > 1.2


def test_the_shipped_head_agrees_with_the_target_more_often_than_the_draft(embedded_pair):
    head, draft = garden_stats(embedded_pair, "eagle"), garden_stats(embedded_pair, "model")
    assert head.acceptance_by_position[0] > 0.4
    assert head.tau > draft.tau


def test_the_shipped_head_is_small_and_fits_the_embedded_target(embedded_pair):
    from specchat.models.sources import default_head_for

    folder = default_head_for(embedded_pair.target.source)
    assert folder is not None and sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) <= 25_000_000
    head = embedded_pair.head()
    assert head.shape.hidden == embedded_pair.target.model.config.hidden_size
    assert next(head.parameters()).dtype == embedded_pair.target.model.dtype  # float16 file, computed as the target


def test_transformers_uses_the_shipped_draft_as_assistant_model(embedded_pair):
    import torch

    ids = prompt(embedded_pair, "What is the capital of France?")
    ours = embedded_pair.engine("model").generate(ids, GenerationConfig(max_new_tokens=24))
    with torch.inference_mode():
        theirs = embedded_pair.target.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                                     assistant_model=embedded_pair.draft.model, do_sample=False,
                                                     max_new_tokens=24, pad_token_id=2)
    assert list(ours.token_ids) == theirs[0, len(ids):].tolist()[: len(ours.token_ids)]


def test_the_shipped_draft_is_small_fp16_and_compatible():
    from specchat.engine.loading.pair import check_sources
    from specchat.models.sources import ModelSource, shipped_draft_folder

    folder = shipped_draft_folder()
    assert sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) <= 25_000_000
    import json
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float16"
    assert check_sources(ModelSource.parse("embedded"), ModelSource.parse("embedded-draft")).compatible


def test_prompt_lookup_accepts_tokens_when_the_reply_copies_the_prompt(embedded_pair):
    result = embedded_pair.engine("pld").generate(prompt(embedded_pair, f"Repeat exactly: {PASSAGE}"),
                                                  GenerationConfig(max_new_tokens=40))
    assert result.stats.draft_accepted >= 10
    assert result.stats.tau > 1.5  # well over one token per target pass
    assert "Visitors may borrow" in result.text


@pytest.mark.model
def test_self_test_passes_on_the_default_pair():
    import io

    from specchat.commands.selftest import run_self_test

    out = io.StringIO()
    assert run_self_test(out) == 0
    line = out.getvalue()
    assert line.count("\n") == 1 and line.startswith("specchat self-test: PASS: 24 tokens identical")
    accepted, proposed = map(int, re.search(r"(\d+)/(\d+) drafts accepted", line).groups())
    assert proposed > 0 and 0 < accepted <= proposed  # drafts were really checked, not plain against plain


def test_self_test_failure_is_one_line_and_exit_code_1(monkeypatch):
    import io

    from specchat.commands import selftest

    def broken():
        raise RuntimeError("no model here")

    monkeypatch.setattr(selftest, "_check", broken)
    out = io.StringIO()
    assert selftest.run_self_test(out) == 1
    assert out.getvalue() == "specchat self-test: FAIL: RuntimeError: no model here\n"
