"""A first launch answers at once (core/one_time.py, LlamaCppModel.owe_verdict and known_cost_curve): on a file never
checked here, the embedded model loads on provisional kernels, its first reply decodes plainly without waiting for
any measurement, and the kernel verdict and the cost curve are measured while no reply runs, kept, and then used."""

import functools
import time

import pytest

from specchat.core import one_time
from specchat.engine.backends.llamacpp import llama_runner
from specchat.engine.decoding import cost_curve
from specchat.core.vocabulary import BIT_IDENTICAL
from specchat.engine.backends.llamacpp.kernels import PROVISIONAL
from specchat.engine.backends.llamacpp.llama_runner import load_with_exactness
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import NoDrafter, PromptLookupDrafter

pytestmark = [pytest.mark.model, pytest.mark.clock]


def test_a_first_launch_answers_at_once_and_measures_while_idle(native_pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path))  # a fresh install: nothing measured here yet
    monkeypatch.setenv(one_time.MEASURE_NOW_ENV, "0")
    monkeypatch.setattr(one_time, "IDLE_S", 1e9)  # the first message comes before any idle spell
    # What is measured is cost_curve's and kernels' own tests' business: here, when and how often. A short curve
    # (five sizes, one round) keeps this test to the mechanism: owed, not waited for, measured while idle, kept.
    monkeypatch.setattr(llama_runner, "measure_curve",
                        functools.partial(cost_curve.measure_curve, sizes=(1, 2, 4, 8, 16), rounds=1))
    model = load_with_exactness(native_pair.target.native.path)
    assert model.kernels == PROVISIONAL and model.one_time.owes("kernel verdict")
    tokenizer = native_pair.target.tokenizer
    text = "Repeat exactly: " + "the library opens at nine and closes at six; loans last three weeks. " * 3
    ids = build_prompt_ids(tokenizer, [Message("user", text)])
    config = GenerationConfig(max_new_tokens=48)

    def engine(drafter):
        return SpeculativeEngine(model.runner(), tokenizer, drafter, eos_token_ids=[model.eos_token_id],
                                 cost_curve=model.known_cost_curve, one_time=model.one_time)

    drafting, plain = engine(PromptLookupDrafter()), engine(NoDrafter())
    with model.one_time.reply():  # the user's first message arrives as the model is ready
        first = drafting.generate(ids, config)
        assert model.one_time.owes("kernel verdict") and model.one_time.owes("cost curve")  # nothing waited for
    assert first.stats.draft_proposed == 0  # nothing is known to pay yet: decoded plainly
    assert first.stats.awaiting_costs  # and it says why (the footer: run_kind.AWAITING_COSTS)
    plain_first = plain.generate(ids, config)
    assert first.token_ids == plain_first.token_ids
    assert not plain_first.stats.awaiting_costs  # plain decoding holds nothing back
    monkeypatch.setattr(one_time, "IDLE_S", 0.3)  # then the user reads the reply
    with model.one_time.reply():  # a reply's end wakes the worker, which then waits for its idle spell
        pass
    deadline = time.monotonic() + 120
    while (model.one_time.owes("kernel verdict") or model.one_time.owes("cost curve")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert model.kernels.exactness == BIT_IDENTICAL and model.kernels.max_pass_rows == 16
    assert model.cost_curve is not None and (tmp_path / "kernels.json").exists() and (tmp_path / "costs.json").exists()
    later = drafting.generate(ids, config)  # the next reply drafts on what was measured, and says the same
    assert later.stats.draft_accepted > 0 and later.token_ids == first.token_ids
    assert not later.stats.awaiting_costs
    again = load_with_exactness(native_pair.target.native.path)  # a later launch reads both from the cache
    assert again.kernels == model.kernels and not again.one_time.owes("kernel verdict")
    assert again.known_cost_curve() is not None
    model.close(), again.close()
