"""A GGUF draft model on llama.cpp: rollback gives the logits of a fresh run, the context grows past its first size
without changing them, and the draft-model and universal drafters on it keep replies identical to plain decoding."""

import pytest
import torch

from specchat.engine.backends import draft_backends
from specchat.engine.backends.draft_backends import LlamaCppDraftBackend, draft_backend
from specchat.engine.backends.llamacpp import llama_runner
from specchat.engine.backends.llamacpp.llama_runner import CONTEXT_STEP
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig

pytestmark = pytest.mark.model

TOKENS = [100 + (7919 * i) % 40000 for i in range(CONTEXT_STEP + 80)]


@pytest.fixture(scope="module")
def draft_model(native_pair):
    return native_pair.target.native  # the embedded file, here in the draft's role


def test_rollback_gives_the_logits_of_a_fresh_run(draft_model):
    backend = draft_backend(draft_model)
    assert isinstance(backend, LlamaCppDraftBackend)
    backend.reset()
    backend.forward(TOKENS[:40])
    for token in TOKENS[40:46]:
        backend.forward([token])  # six drafted tokens
    backend.crop(42)  # two of them accepted
    assert backend.length == 42
    after = backend.forward([7, 8, 9])
    fresh = LlamaCppDraftBackend(draft_model)  # the same passes without the rejected ones
    fresh.reset()
    fresh.forward(TOKENS[:40])  # a prompt is read by the prompt reader, the rest in decoding passes
    fresh.forward([TOKENS[40]]), fresh.forward([TOKENS[41]])
    assert torch.equal(after, fresh.forward([7, 8, 9]))


def test_the_context_grows_past_its_first_size_with_the_same_logits(draft_model, monkeypatch):
    # Contexts in steps of 128 positions rather than 1024: the same growth (a larger context, the held positions
    # fed into it again), over an eighth of the tokens.
    step = 128
    monkeypatch.setattr(draft_backends, "CONTEXT_STEP", step)
    monkeypatch.setattr(llama_runner, "CONTEXT_STEP", step)
    backend = LlamaCppDraftBackend(draft_model)
    backend.reset()
    backend.forward(TOKENS[:step - 4])
    first_size = backend._runner._n_ctx
    for token in TOKENS[step - 4:step + 8]:  # across the context's first end
        last = backend.forward([token])
    assert backend.length == step + 8 and backend._runner._n_ctx > first_size == step
    fresh = LlamaCppDraftBackend(draft_model)  # the same passes in a context large enough from the start
    fresh._cache = fresh._runner.new_cache(4 * step)
    fresh.forward(TOKENS[:step - 4])
    for token in TOKENS[step - 4:step + 8]:
        expected = fresh.forward([token])
    # at least that large (it may take contexts its model made ahead: room_ahead.py), so it never grew meanwhile
    assert fresh._runner._n_ctx >= 4 * step and torch.equal(last, expected)


@pytest.mark.parametrize("drafter", ["model", "universal"])
def test_drafting_on_llama_cpp_keeps_replies_identical(native_pair, drafter):
    from specchat.engine.decoding.speculative import SpeculativeEngine
    from specchat.engine.drafting import make_drafter

    target = native_pair.target
    tokenizers = (target.tokenizer, target.tokenizer)
    made = make_drafter(drafter, draft_model=target.native, tokenizers=tokenizers)
    assert isinstance(made._backend, LlamaCppDraftBackend)
    ids = build_prompt_ids(target.tokenizer, [Message("user", "List the days of the week, one per line.")])
    config = GenerationConfig(max_new_tokens=40, k=4, adaptive_k=False)
    eos = target.eos_token_ids()
    plain = SpeculativeEngine(target.native.runner(), target.tokenizer, eos_token_ids=eos).generate(ids, config)
    drafted = SpeculativeEngine(target.native.runner(), target.tokenizer, made, eos_token_ids=eos).generate(ids, config)
    assert drafted.token_ids == plain.token_ids
    assert drafted.stats.draft_accepted > 0  # the target as its own draft: its proposals are accepted
