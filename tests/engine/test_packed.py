"""MKL-packed weights for verification passes: the same products, the same replies, and a safe fallback."""

import pytest
import torch
import torch.nn.functional as F

from specchat.engine.backends.torch.lean import LeanLlama
from specchat.engine.backends.torch.packed import (MAX_ROWS, MIN_ROWS, PackedWeights, packed_weights_for,
                                                   packing_available)
from specchat.engine.backends.torch.runners import runner_for
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import ModelDrafter

needs_mkl = pytest.mark.skipif(not packing_available(torch.zeros(1)), reason="this torch has no MKL packed GEMM")


@needs_mkl
def test_packed_products_equal_plain_ones_for_every_row_count_they_take():
    torch.manual_seed(0)
    weights = [torch.randn(96, 64), torch.randn(64, 96)]
    packed = PackedWeights(weights)
    assert [rows for rows in range(1, MAX_ROWS + 3) if packed.applies(rows)] == list(range(MIN_ROWS, MAX_ROWS + 1))
    for rows in range(MIN_ROWS, MAX_ROWS + 1):
        for index, weight in enumerate(weights):
            x = torch.randn(rows, weight.shape[1])
            torch.testing.assert_close(packed.linear(x, index), F.linear(x, weight), rtol=1e-5, atol=1e-5)


@needs_mkl
def test_a_row_count_whose_packed_product_is_wrong_keeps_the_plain_one(monkeypatch):
    real = torch.ops.mkl._mkl_linear

    def wrong_for_six_rows(x, packed, weight, bias, rows):
        out = real(x, packed, weight, bias, rows)
        return out + 1.0 if rows == 6 else out  # as if MKL's layout for 8 rows did not serve 6

    monkeypatch.setattr(torch.ops.mkl, "_mkl_linear", wrong_for_six_rows)
    packed = PackedWeights([torch.randn(32, 16)])
    assert not packed.applies(6)
    assert packed.applies(5) and packed.applies(7)


@needs_mkl
def test_packed_copies_are_made_once_per_model(target):
    lean, again = LeanLlama(target, packed=True), LeanLlama(target, packed=True)
    assert lean.packed is not None and lean.packed is again.packed
    assert LeanLlama(target).packed is None  # off unless asked for: the lean forward alone is bit-identical
    assert packed_weights_for(object(), [torch.zeros(4, 4, dtype=torch.float64)]) is None  # float32 only


@needs_mkl
def test_packed_verification_passes_give_the_plain_hidden_states(target, prompt_ids):
    plain, packed = LeanLlama(target), LeanLlama(target, packed=True)
    caches = [plain.new_cache(), packed.new_cache()]
    for model, cache in zip((plain, packed), caches):
        model.hidden_states(prompt_ids, cache)
    for chunk in ([5, 6, 7, 8], list(range(10, 19)), [3]):  # 4 and 9 tokens take the packed weights, 1 does not
        expected = plain.hidden_states(chunk, caches[0], keep=len(chunk))
        torch.testing.assert_close(packed.hidden_states(chunk, caches[1], keep=len(chunk)), expected,
                                   rtol=1e-4, atol=1e-4)


@needs_mkl
@pytest.mark.parametrize("k", [3, 8])
def test_replies_are_identical_with_and_without_packed_weights(target, close_draft, tokenizer, prompt_ids, k):
    config = GenerationConfig(max_new_tokens=48, k=k, adaptive_k=False)
    plain = SpeculativeEngine(target, tokenizer).generate(prompt_ids, config)
    engines = [SpeculativeEngine(runner_for(target, packed_weights=packed), tokenizer, ModelDrafter(close_draft))
               for packed in (False, True)]
    assert engines[1].runner._lean.packed is not None and engines[0].runner._lean.packed is None
    for engine in engines:
        assert engine.generate(prompt_ids, config).token_ids == plain.token_ids
