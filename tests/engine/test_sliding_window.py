"""Sliding-window models (Gemma 3's local layers) draft correctly past the window, on the growing cache and on the
static one: rolled-back drafts leave every layer as if they had never been written, and a drafted reply is the
plain one token for token. A tiny random Gemma 3 with an 8-token window, on the CPU in float32."""

import pytest
import torch
from tiny_models import build_tiny_gemma3, perturbed_copy
from transformers import StaticCache
from transformers.cache_utils import StaticLayer

from specchat.engine.backends.torch.growing_layers import PreallocatedLayer, PreallocatedWindowLayer
from specchat.engine.backends.torch.kv_cache import new_cache, new_static_cache, rollback, seek
from specchat.engine.backends.torch.lean import lean_forward_supported
from specchat.engine.backends.torch.runners import LeanRunner, runner_for
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import ModelDrafter, NoDrafter, PromptLookupDrafter

WINDOW = 8
REPLY = 48  # tokens: the prompt and the reply run far past the window
CONTEXT = 160  # the model's context window, so that the static cache is small (StaticCacheRunner sizes it so)
TEXT = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick"


@pytest.fixture(scope="module")
def gemma(tokenizer):
    return build_tiny_gemma3(len(tokenizer), seed=0, sliding_window=WINDOW, max_positions=CONTEXT)


@pytest.fixture(scope="module")
def gemma_draft(gemma):
    return perturbed_copy(gemma, noise=0.05, seed=1)


@pytest.fixture(scope="module")
def prompt(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert len(ids) > 4 * WINDOW
    return ids


@pytest.fixture(scope="module")
def plain(gemma, tokenizer, prompt):
    """The reference: plain decoding (K = 0) through the engine's own forward and growing cache."""
    reply = SpeculativeEngine(runner_for(gemma), tokenizer, NoDrafter()).generate(
        prompt, GenerationConfig(max_new_tokens=REPLY))
    assert reply.finish_reason == "length" and len(reply.token_ids) == REPLY
    return reply


def runner(gemma, static: bool):
    """The target's runner: transformers' forward over the growing cache (TorchRunner, the CPU's), or over the
    static one (StaticCacheRunner, the GPU's), its steps uncompiled."""
    return runner_for(gemma, static_cache=True, compile_steps=False) if static else runner_for(gemma)


def test_the_plain_reply_attends_to_the_window_only(gemma, tokenizer, prompt, plain):
    """The caches keep every position of a window layer, yet a query still sees only the window: the engine's
    plain reply is transformers' own generate() (whose window layers hold the window only), and a model with the
    same weights and no effective window replies otherwise."""
    with torch.no_grad():
        generated = gemma.generate(torch.tensor([prompt]), max_new_tokens=REPLY, do_sample=False,
                                   attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    assert list(plain.token_ids) == generated[0, len(prompt):].tolist()
    wide = build_tiny_gemma3(len(tokenizer), seed=0, sliding_window=CONTEXT, max_positions=CONTEXT)
    wide_reply = SpeculativeEngine(runner_for(wide), tokenizer, NoDrafter()).generate(
        prompt, GenerationConfig(max_new_tokens=REPLY))
    assert wide_reply.token_ids != plain.token_ids


@pytest.mark.parametrize("static", [False, True], ids=["growing-cache", "static-cache"])
def test_prompt_lookup_drafts_past_the_window_give_the_plain_reply(gemma, tokenizer, prompt, plain, static):
    result = SpeculativeEngine(runner(gemma, static), tokenizer, PromptLookupDrafter()).generate(
        prompt, GenerationConfig(max_new_tokens=REPLY, k=4, adaptive_k=False))
    assert result.token_ids == plain.token_ids
    stats = result.stats
    assert stats.draft_accepted > 0 and stats.rejected_steps > 0, stats  # kept drafts and rolled-back ones


@pytest.mark.parametrize("static", [False, True], ids=["growing-cache", "static-cache"])
def test_a_draft_model_with_a_window_drafts_past_it_and_gives_the_plain_reply(gemma, gemma_draft, tokenizer, prompt,
                                                                              plain, static):
    """The draft model has the same window, and its own cache of the same kind as the target's (drafting/backends.py:
    new_cache, or new_static_cache as on a GPU): it rolls back past the window too."""
    drafter = ModelDrafter(gemma_draft, static=static)
    result = SpeculativeEngine(runner(gemma, static), tokenizer, drafter).generate(
        prompt, GenerationConfig(max_new_tokens=REPLY, k=3, adaptive_k=False))
    assert result.token_ids == plain.token_ids
    stats = result.stats
    assert stats.draft_proposed > stats.draft_accepted > 0 and stats.rejected_steps > 0, stats


def feed(model, cache, tokens: list[int]) -> torch.Tensor:
    """One pass over `tokens` after the cached ones; the logits of the last."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([tokens]), past_key_values=cache, use_cache=True).logits[0, -1]


@pytest.mark.parametrize("kind", ["growing", "static", "static-seek"])
def test_a_rolled_back_pass_leaves_every_layer_as_it_was(gemma, kind):
    """After junk passes rolled back, each next token's logits are bit-identical to a run that never saw the junk,
    from the start of the sequence to far past the window."""
    make = (lambda: new_cache(gemma)) if kind == "growing" else (lambda: new_static_cache(gemma, 4 * WINDOW))
    sequence = [(7 * i + 3) % 300 + 3 for i in range(3 * WINDOW)]
    clean, rolled = make(), make()
    for position, token in enumerate(sequence):
        expected = feed(gemma, clean, [token])
        junk = [(token + j) % 300 + 3 for j in range(1, 1 + position % 5)]
        if junk:
            feed(gemma, rolled, junk)
            if kind == "static-seek":
                seek(rolled, position)
            else:
                rollback(rolled, position)
        assert torch.equal(feed(gemma, rolled, [token]), expected), position


def test_every_layer_of_both_caches_keeps_the_whole_sequence(gemma):
    growing = new_cache(gemma)
    kinds = [type(layer) for layer in growing.layers]
    assert kinds == [PreallocatedWindowLayer, PreallocatedWindowLayer, PreallocatedLayer, PreallocatedWindowLayer]
    assert all(layer.sliding_window == WINDOW for layer in growing.layers if type(layer) is PreallocatedWindowLayer)
    static = new_static_cache(gemma, 100)
    assert isinstance(static, StaticCache)
    assert all(type(layer) is StaticLayer and layer.max_cache_len == 100 for layer in static.layers)


def test_a_window_layer_reads_only_the_window(gemma):
    """Attention over a window layer costs what it costs on transformers' own: a pass sees the last window - 1
    positions and its own, at their absolute positions (the mask's offset)."""
    cache = new_cache(gemma)
    feed(gemma, cache, list(range(3, 23)))  # 20 positions
    layer = cache.layers[0]
    assert layer.get_seq_length() == 20 and layer.get_mask_sizes(3) == (WINDOW - 1 + 3, 20 - WINDOW + 1)
    keys, _ = layer.update(torch.zeros(1, 2, 3, 16), torch.zeros(1, 2, 3, 16))
    assert keys.shape[-2] == WINDOW - 1 + 3 and layer.get_seq_length() == 23
    rollback(cache, 5)
    assert layer.get_seq_length() == 5 and layer.get_mask_sizes(1) == (6, 0)


def test_sliding_window_models_take_transformers_forward_not_the_lean_one(gemma):
    assert not lean_forward_supported(gemma)
    assert not isinstance(runner_for(gemma), LeanRunner)
