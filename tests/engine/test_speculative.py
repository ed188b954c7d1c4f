"""The speculative loop: greedy losslessness for every drafter, stops inside drafts, cancel, events."""

import threading

import pytest
import torch

from specchat.core.errors import PromptError
from specchat.core.vocabulary import Origin
from specchat.engine.backends.torch.runners import StaticCacheRunner, runner_for
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import ModelDrafter, NoDrafter, PromptLookupDrafter, TargetStateReader, make_drafter


def plain(target, tokenizer, prompt_ids, **config):
    return SpeculativeEngine(target, tokenizer, NoDrafter()).generate(prompt_ids, GenerationConfig(**config))


def drafters(request_name, target, close_draft, unrelated_draft):
    vocab = close_draft.get_output_embeddings().weight.shape[0]
    return {"pld": PromptLookupDrafter(), "self": ModelDrafter(target), "close": ModelDrafter(close_draft),
            "unrelated": ModelDrafter(unrelated_draft), "hybrid": make_drafter("hybrid", close_draft),
            # proposing from every other token only: the target must still decide every token
            "close-half-vocab": ModelDrafter(close_draft, vocab_ids=torch.arange(0, vocab, 2)),
            "hybrid-half-vocab": make_drafter("hybrid", close_draft, draft_vocab=torch.arange(1, vocab, 2))}[request_name]


@pytest.mark.parametrize("drafter_name", ["pld", "self", "close", "unrelated", "hybrid", "close-half-vocab",
                                          "hybrid-half-vocab"])
@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("adaptive", [False, True])
def test_greedy_output_is_identical_to_plain_decoding(target, tokenizer, close_draft, unrelated_draft, prompt_ids,
                                                      drafter_name, k, adaptive):
    reference = plain(target, tokenizer, prompt_ids, max_new_tokens=48)
    drafter = drafters(drafter_name, target, close_draft, unrelated_draft)
    result = SpeculativeEngine(target, tokenizer, drafter).generate(
        prompt_ids, GenerationConfig(max_new_tokens=48, k=k, adaptive_k=adaptive))
    assert result.token_ids == reference.token_ids
    assert result.text == reference.text


def test_plain_decoding_matches_transformers_generate(target, tokenizer, prompt_ids):
    reference = plain(target, tokenizer, prompt_ids, max_new_tokens=40)
    with torch.no_grad():
        output = target.generate(torch.tensor([prompt_ids]), max_new_tokens=40, do_sample=False,
                                 attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long))
    assert list(reference.token_ids) == output[0, len(prompt_ids):].tolist()


def test_a_perfect_draft_is_fully_accepted(target, tokenizer, prompt_ids):
    result = SpeculativeEngine(target, tokenizer, ModelDrafter(target)).generate(
        prompt_ids, GenerationConfig(max_new_tokens=41, k=4, adaptive_k=False))
    stats = result.stats
    assert stats.alpha == 1.0
    assert stats.target_passes == 1 + 40 // 5  # prefill, then K + 1 = 5 tokens per verification
    assert stats.acceptance_by_position == [1.0] * 4
    assert result.origins.count(Origin.DRAFT) == stats.draft_accepted == 32


def test_partially_right_draft_rolls_back_and_stays_lossless(target, tokenizer, prompt_ids):
    from tiny_models import perturbed_copy

    draft = perturbed_copy(target, noise=0.05, seed=3)
    reference = plain(target, tokenizer, prompt_ids, max_new_tokens=60)
    result = SpeculativeEngine(target, tokenizer, ModelDrafter(draft)).generate(
        prompt_ids, GenerationConfig(max_new_tokens=60, k=4, adaptive_k=False))
    assert 0.2 < result.stats.alpha < 1.0  # both accepting and rejecting happened, so the caches were cropped
    assert result.token_ids == reference.token_ids


def test_eos_inside_an_accepted_draft_ends_the_reply_there(target, tokenizer, prompt_ids):
    free_run = plain(target, tokenizer, prompt_ids, max_new_tokens=40)
    eos = free_run.token_ids[13]  # pretend this token ends the turn
    first = free_run.token_ids.index(eos)
    engine = SpeculativeEngine(target, tokenizer, ModelDrafter(target), eos_token_ids=[eos])
    result = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=40, k=6, adaptive_k=False))
    assert result.finish_reason == "eos"
    assert result.token_ids == free_run.token_ids[: first + 1]
    assert result.origins[-1] == Origin.DRAFT or first % 7 == 0  # it was inside a draft unless a step boundary


def test_max_new_tokens_inside_an_accepted_draft(target, tokenizer, prompt_ids):
    free_run = plain(target, tokenizer, prompt_ids, max_new_tokens=30)
    result = SpeculativeEngine(target, tokenizer, ModelDrafter(target)).generate(
        prompt_ids, GenerationConfig(max_new_tokens=10, k=6, adaptive_k=False))
    assert result.finish_reason == "length"
    assert result.token_ids == free_run.token_ids[:10]


def test_stop_string_cuts_text_and_is_never_streamed(target, tokenizer):
    prompt = tokenizer("The quick brown fox jumps over the lazy dog. The quick", add_special_tokens=False)["input_ids"]
    free_run = plain(target, tokenizer, prompt, max_new_tokens=40)
    stop = free_run.text[20:24]
    cut = free_run.text.index(stop)
    streamed = list(SpeculativeEngine(target, tokenizer, PromptLookupDrafter()).stream(
        prompt, GenerationConfig(max_new_tokens=40, stop_strings=(stop,))))
    result = streamed[-1].result
    assert result.finish_reason == "stop"
    assert result.text == free_run.text[:cut]
    assert "".join(e.text_delta for e in streamed) == result.text


def test_events_add_up_to_the_result(target, tokenizer, close_draft, prompt_ids):
    events = list(SpeculativeEngine(target, tokenizer, PromptLookupDrafter()).stream(
        prompt_ids, GenerationConfig(max_new_tokens=50)))
    result = events[-1].result
    assert result is not None and events[-1].finish_reason == "length"
    assert all(e.result is None for e in events[:-1])
    assert [t for e in events for t in e.token_ids] == list(result.token_ids)
    assert [o for e in events for o in e.origins] == list(result.origins)
    assert "".join(e.text_delta for e in events) == result.text
    assert result.text == tokenizer.decode(list(result.token_ids), skip_special_tokens=True)
    position = 0
    for event in events:
        assert event.text_offset == position
        for start, end in event.spans:
            assert start == position and end >= start
            position = end
        assert position == event.text_offset + len(event.text_delta)
    assert events[-1].stats.new_tokens == 50


def test_cancel_from_another_thread_stops_within_a_step(target, tokenizer, prompt_ids):
    cancel = threading.Event()
    seen = []
    for event in SpeculativeEngine(target, tokenizer, PromptLookupDrafter()).stream(
            prompt_ids, GenerationConfig(max_new_tokens=400), cancel):
        seen.append(event)
        if len(seen) == 3:
            threading.Thread(target=cancel.set).start()
            threading.Event().wait(0.05)  # the other thread has set it before the next step starts
    result = seen[-1].result
    assert result.finish_reason == "cancelled"
    assert len(seen) == 4  # the cancelling step's event, then the final one
    reference = plain(target, tokenizer, prompt_ids, max_new_tokens=len(result.token_ids))
    assert result.token_ids == reference.token_ids


def test_prompt_errors(target, tokenizer):
    engine = SpeculativeEngine(target, tokenizer)
    with pytest.raises(PromptError, match="empty"):
        engine.generate([], GenerationConfig())
    with pytest.raises(PromptError, match="context window"):
        engine.generate([5] * 600, GenerationConfig())
    with pytest.raises(ValueError, match="K must be at least 1"):
        GenerationConfig(k=0)


def test_reply_stops_when_the_context_window_is_full(target, tokenizer):
    result = SpeculativeEngine(target, tokenizer, PromptLookupDrafter()).generate(
        [5] * 500, GenerationConfig(max_new_tokens=100))
    assert result.finish_reason == "context"
    assert len(result.token_ids) == 12  # 512 positions in all


def test_adaptive_k_backs_off_when_drafts_keep_failing(target, tokenizer, unrelated_draft, prompt_ids):
    result = SpeculativeEngine(target, tokenizer, ModelDrafter(unrelated_draft)).generate(
        prompt_ids, GenerationConfig(max_new_tokens=80, k=8))
    stats = result.stats
    assert stats.alpha < 0.1
    # Fixed K = 8 would draft 8 tokens at every one of ~80 steps; the policy soon drafts little or nothing.
    assert stats.draft_proposed < 0.25 * 8 * stats.target_passes


def test_sampling_is_reproducible_with_a_seed(target, tokenizer, close_draft, prompt_ids):
    from specchat.engine.decoding.sampling import SamplingParams

    config = GenerationConfig(max_new_tokens=30, seed=123, sampling=SamplingParams(temperature=0.9, top_p=0.95))
    engine = SpeculativeEngine(target, tokenizer, ModelDrafter(close_draft))
    first, second = engine.generate(prompt_ids, config), engine.generate(prompt_ids, config)
    assert first.token_ids == second.token_ids and first.seed == 123
    other = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=30, seed=124,
                                                         sampling=SamplingParams(temperature=0.9, top_p=0.95)))
    assert other.token_ids != first.token_ids


def test_a_sampled_reply_prices_its_drafts_on_the_engines_curve(target, tokenizer, close_draft, prompt_ids):
    """A seeded sample's K must not follow the clock, but it follows the engine's measured curve: on a curve where
    every check costs as many passes as it has rows (nothing can pay), a sampled reply drafts nothing; on a flat one
    it drafts; and on either the same seed gives the same sample. (It priced on a made-up +10%-a-row curve, and
    drafted at a loss on llama.cpp's CPU curve: 0.86-0.90x plain on the embedded model.)"""
    from specchat.engine.decoding.cost_curve import PASS_SIZES, CostCurve
    from specchat.engine.decoding.sampling import SamplingParams

    config = GenerationConfig(max_new_tokens=30, seed=5, sampling=SamplingParams(temperature=0.8))
    dear = CostCurve({n: float(n) for n in PASS_SIZES})
    cheap = CostCurve({n: 1.0 + 0.01 * (n - 1) for n in PASS_SIZES})
    drafted = {}
    for name, curve in (("dear", dear), ("cheap", cheap)):
        engine = SpeculativeEngine(target, tokenizer, ModelDrafter(close_draft))
        engine.step_costs.curve = curve  # as the engine's kept curve would be (ModelPair.cost_curve)
        engine.step_costs.draft_prior = 0.0
        first, again = engine.generate(prompt_ids, config), engine.generate(prompt_ids, config)
        assert first.token_ids == again.token_ids
        drafted[name] = first.stats.draft_proposed
    assert drafted["dear"] == 0 and drafted["cheap"] > 0


# --- the GPU fast path, exercised on the CPU: static cache, compiled steps --------------------------------------

@pytest.mark.parametrize("drafter_name", ["pld", "close", "hybrid"])
def test_static_cache_is_lossless_and_rolls_back_by_its_counter(target, tokenizer, close_draft, unrelated_draft,
                                                                 prompt_ids, drafter_name):
    reference = plain(target, tokenizer, prompt_ids, max_new_tokens=48)
    static_plain = SpeculativeEngine(runner_for(target, static_cache=True), tokenizer, NoDrafter()).generate(
        prompt_ids, GenerationConfig(max_new_tokens=48))
    drafter = drafters(drafter_name, target, close_draft, unrelated_draft)
    runner = runner_for(target, keeps_features=isinstance(drafter, TargetStateReader), static_cache=True)
    engine = SpeculativeEngine(runner, tokenizer, drafter)
    result = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=48, k=4, adaptive_k=False))
    assert static_plain.token_ids == reference.token_ids  # same model, another cache: the same greedy reply
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_proposed > result.stats.draft_accepted  # rejections happened and were rolled back


@pytest.mark.parametrize("drafter_kind", ["pld", "eagle"])  # eagle: the decoder is compiled, its states kept
def test_compiled_steps_serve_every_verification_and_copy_their_output(target, tokenizer, prompt_ids, monkeypatch,
                                                                       drafter_kind):
    """Every verification pass goes through a graph compiled at load, padded to one of its lengths; the prefill
    stays eager. An identity "compiler" counts the calls (tests/engine/test_gpu_path.py runs dynamo itself)."""
    from specchat.engine.drafting.eagle_network import HeadShape
    from specchat.training.eagle_head import build_head

    calls = []

    def fake_compile(function, **options):
        assert options["dynamic"] is False and options["backend"] == "eager"  # inductor's CUDA graphs on a GPU

        def compiled(input_ids, positions):
            calls.append(input_ids.shape[1])
            return function(input_ids, positions)
        return compiled

    monkeypatch.setattr(torch, "compile", fake_compile)
    reference = plain(target, tokenizer, prompt_ids, max_new_tokens=30)
    vocab = target.get_input_embeddings().weight.shape[0]
    head = build_head(target, torch.arange(vocab), HeadShape(hidden=target.config.hidden_size, inner=16, blocks=1,
                                                            vocab=vocab), seed=0)
    drafter = make_drafter(drafter_kind, head=head, target=target)
    runner = runner_for(target, keeps_features=isinstance(drafter, TargetStateReader), static_cache=True,
                        compile_steps=True)
    assert sorted(set(calls)) == list(runner.buckets)  # each length compiled while loading
    calls.clear()
    engine = SpeculativeEngine(runner, tokenizer, drafter)
    result = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=30, k=3, adaptive_k=False))
    assert result.token_ids == reference.token_ids
    assert result.stats.draft_proposed > 0
    assert len(calls) == result.stats.target_passes - 1  # every step but the prefill, which stays eager
    assert set(calls) <= set(runner.buckets)


def test_compiled_steps_need_the_static_cache(target, tokenizer):
    with pytest.raises(ValueError, match="static cache"):
        SpeculativeEngine(runner_for(target, static_cache=False, compile_steps=True), tokenizer, NoDrafter())


def test_the_gpu_fast_path_is_off_on_the_cpu_by_default_and_the_lean_forward_on(target, tokenizer):
    engine = SpeculativeEngine(target, tokenizer, NoDrafter())
    assert not isinstance(engine.runner, StaticCacheRunner)
    assert engine.runner._step_forward == engine.runner._forward_lean
    transformers_forward = SpeculativeEngine(runner_for(target, lean=False), tokenizer, NoDrafter())
    assert transformers_forward.runner._step_forward == transformers_forward.runner._forward_through_decoder


def test_the_tuned_head_gives_the_models_logits_and_is_shared(target, tokenizer, prompt_ids):
    from specchat.engine.backends.torch.tuned_head import tuned_head_for

    head = tuned_head_for(target)
    assert head is tuned_head_for(target)  # one per model: engines share its timings
    hidden = torch.randn(4, target.config.hidden_size)
    expected = target.get_output_embeddings()(hidden)
    torch.testing.assert_close(head(hidden), expected, rtol=1e-5, atol=1e-5)
    assert 4 in head.product  # timed once for this length, then remembered
    longer = torch.randn(12, target.config.hidden_size)  # beyond the prepared lengths: no timing, the same logits
    torch.testing.assert_close(head(longer), target.get_output_embeddings()(longer), rtol=1e-5, atol=1e-5)
    assert head.product[12] in (head.product[9], head._plain)
    untuned = SpeculativeEngine(runner_for(target, tuned_head=False, lean=False), tokenizer, NoDrafter())
    tuned = SpeculativeEngine(target, tokenizer, NoDrafter())
    config = GenerationConfig(max_new_tokens=32)
    assert untuned.runner._step_forward == untuned.runner._plain_forward
    assert tuned.generate(prompt_ids, config).token_ids == untuned.generate(prompt_ids, config).token_ids
