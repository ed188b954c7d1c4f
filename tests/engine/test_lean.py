"""The lean forward (a draft model's, and the target's) computes what transformers' Llama computes."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specchat.engine.backends.torch.lean import LeanDraftForward, lean_forward_supported
from specchat.engine.backends.torch.runners import LeanRunner, runner_for
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import ModelDrafter, TargetStateReader, TransformersDraftForward


def gqa_llama(seed: int = 0, dtype=torch.float32) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         rope_parameters={"rope_type": "default", "rope_theta": 50000.0}, initializer_range=0.1,
                         tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval().to(dtype)


def test_logits_match_transformers_through_prefill_steps_and_rollback():
    model = gqa_llama()
    lean, reference = LeanDraftForward(model, capacity=8), TransformersDraftForward(model)  # small capacity: grows
    lean.reset(), reference.reset()
    chunks = [list(range(5, 40)), [7], [8, 9, 10], [11]]
    for chunk in chunks:
        torch.testing.assert_close(lean.forward(chunk), reference.forward(chunk), rtol=1e-4, atol=1e-4)
    for forward in (lean, reference):
        forward.crop(36)  # drop [8, 9, 10, 11] as if rejected
    torch.testing.assert_close(lean.forward([12, 13]), reference.forward([12, 13]), rtol=1e-4, atol=1e-4)


def test_only_plain_llamas_take_the_lean_path():
    assert lean_forward_supported(gqa_llama())
    scaled = gqa_llama()
    scaled.config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    assert not lean_forward_supported(scaled)


@pytest.mark.parametrize("lean", [True, False])
@pytest.mark.parametrize("draft_name", ["close", "self"])
def test_speculative_output_is_identical_with_either_draft_forward(target, close_draft, tokenizer, prompt_ids, lean,
                                                            draft_name):
    config = GenerationConfig(max_new_tokens=40, k=4)
    draft = close_draft if draft_name == "close" else target
    plain = SpeculativeEngine(target, tokenizer).generate(prompt_ids, config)
    drafted = SpeculativeEngine(target, tokenizer, ModelDrafter(draft, lean=lean)).generate(prompt_ids, config)
    assert drafted.token_ids == plain.token_ids
    if draft_name == "self":  # the target drafting for itself through either forward is always right
        assert drafted.stats.draft_accepted == drafted.stats.draft_proposed > 0


def test_kept_output_rows_give_those_rows_logits(close_draft, prompt_ids):
    full, part = LeanDraftForward(close_draft), LeanDraftForward(close_draft)
    ids = torch.tensor([5, 1, 9, 2])
    part.keep_output_rows(ids)
    assert torch.allclose(part.forward(prompt_ids), full.forward(prompt_ids)[ids], atol=1e-5)
    assert torch.allclose(part.forward([3]), full.forward([3])[ids], atol=1e-5)


def test_the_lean_target_forward_gives_transformers_hidden_states_bit_for_bit():
    """Same operations in the same order: the target's greedy choices cannot differ from transformers' forward."""
    from specchat.engine.backends.torch.kv_cache import new_cache, rollback
    from specchat.engine.backends.torch.lean import LeanLlama

    model = gqa_llama()
    lean = LeanLlama(model)
    cache, reference = lean.new_cache(capacity=4), new_cache(model)  # a small capacity: the lean cache grows
    with torch.inference_mode():
        for chunk, keep in ((list(range(5, 45)), 3), ([7], 1), ([8, 9, 10, 11, 12], 5)):
            ours = lean.hidden_states(chunk, cache, keep)
            theirs = model.model(input_ids=torch.tensor([chunk]), use_cache=True,
                                 past_key_values=reference).last_hidden_state[0, -keep:]
            assert torch.equal(ours, theirs)
        cache.crop(-3), rollback(reference, 43)  # three rejected drafts
        assert cache.get_seq_length() == reference.get_seq_length() == 43
        ours = lean.hidden_states([20, 21], cache, keep=2)
        theirs = model.model(input_ids=torch.tensor([[20, 21]]), use_cache=True,
                             past_key_values=reference).last_hidden_state[0]
        assert torch.equal(ours, theirs)


def test_one_lean_model_serves_two_sequences_at_once(target, prompt_ids):
    """The race view runs two engines on one target: each generation has its own cache."""
    from specchat.engine.backends.torch.lean import LeanLlama

    lean = LeanLlama(target)
    first, second = lean.new_cache(), lean.new_cache()
    alone = lean.hidden_states(prompt_ids, lean.new_cache())
    lean.hidden_states(prompt_ids[:5], first)
    assert torch.equal(lean.hidden_states(prompt_ids, second), alone)
    assert first.get_seq_length() == 5 and second.get_seq_length() == len(prompt_ids)


@pytest.mark.parametrize("drafter_kind", ["none", "pld", "model", "eagle-hybrid"])
def test_engine_output_is_the_same_with_the_lean_target_forward(target, close_draft, tokenizer, prompt_ids,
                                                                drafter_kind):
    from specchat.engine.drafting import make_drafter
    from specchat.engine.drafting.eagle_network import HeadShape
    from specchat.training.eagle_head import build_head

    vocab = target.get_input_embeddings().weight.shape[0]
    head = build_head(target, torch.arange(vocab), HeadShape(hidden=target.config.hidden_size, inner=16, blocks=1,
                                                            vocab=vocab), seed=0)
    config = GenerationConfig(max_new_tokens=40, k=3, adaptive_k=False)  # K fixed: proposals comparable too
    results = []
    for lean in (True, False):
        drafter = make_drafter(drafter_kind, close_draft, head, target)
        runner = runner_for(target, keeps_features=isinstance(drafter, TargetStateReader), lean=lean)
        engine = SpeculativeEngine(runner, tokenizer, drafter)
        assert isinstance(engine.runner, LeanRunner) == lean
        results.append(engine.generate(prompt_ids, config))
    assert results[0].token_ids == results[1].token_ids
    assert results[0].stats.draft_accepted == results[1].stats.draft_accepted  # the head read the same features
