"""The torch GPU path, run on the CPU: one static cache per runner reused by every reply, verification padded to a
few lengths compiled at load (dynamo's tracing alone, "eager": inductor is the GPU's), drafts kept on the device,
and one host synchronisation per speculative step. Replies must be the plain ones, token for token (float32)."""

import json

import pytest
import torch
from torch._dynamo.utils import counters

import specchat.engine.decoding.speculative as speculative
from specchat.engine.backends.torch.host_syncs import HostSyncCounter, HostToDevice
from specchat.engine.backends.torch.runners import StaticCacheRunner, runner_for
from specchat.engine.backends.torch.static_steps import verification_buckets
from specchat.engine.decoding.on_device import verify_greedy_on_device, verify_stochastic_on_device
from specchat.engine.decoding.sampling import Sampler, SamplingParams
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import ModelDrafter, NoDrafter


def plain_reply(target, tokenizer, prompt, tokens):
    engine = SpeculativeEngine(runner_for(target, lean=False, tuned_head=False), tokenizer, NoDrafter())
    return engine.generate(prompt, GenerationConfig(max_new_tokens=tokens)).token_ids


@pytest.fixture(scope="module")
def compiled_runner(target):
    return runner_for(target, static_cache=True, compile_steps=True)


def test_buckets_cover_every_verification_length_in_a_few_graphs():
    assert verification_buckets(16) == (1, 2, 4, 8, 17)
    assert verification_buckets(3) == (1, 2, 4)
    assert verification_buckets(4) == (1, 2, 5)


def test_compiled_static_path_is_lossless_across_replies_sharing_one_cache(compiled_runner, target, tokenizer,
                                                                           close_draft, prompt_ids):
    assert isinstance(compiled_runner, StaticCacheRunner) and compiled_runner.compile_backend == "eager"
    drafter = ModelDrafter(close_draft, static=True)
    engine = SpeculativeEngine(compiled_runner, tokenizer, drafter)
    for reply, k in enumerate((16, 3, 8)):  # each reply reuses the cache the last one left full of other tokens
        prompt = prompt_ids[reply:] + prompt_ids[: 5 * reply]
        result = engine.generate(prompt, GenerationConfig(max_new_tokens=40, k=k, adaptive_k=False))
        assert result.token_ids == plain_reply(target, tokenizer, prompt, 40)
        assert result.stats.draft_proposed > result.stats.draft_accepted > 0  # drafts kept and rolled back


def test_a_speculative_step_waits_for_the_device_once_and_nothing_compiles_after_load(compiled_runner, tokenizer,
                                                                                      close_draft, prompt_ids):
    drafter = ModelDrafter(close_draft, static=True)
    assert drafter._on_device
    frames = counters["frames"]["ok"]
    for k in (1, 4, 16):
        engine = SpeculativeEngine(compiled_runner, tokenizer, drafter if k > 1 else NoDrafter())
        events = engine.stream(prompt_ids, GenerationConfig(max_new_tokens=30, k=k, adaptive_k=False))
        next(events)  # the prefill
        while True:
            with HostSyncCounter() as syncs:
                event = next(events, None)
            if event is None:
                break
            assert syncs.count <= 1, syncs.where
    assert counters["frames"]["ok"] == frames


def test_the_counter_sees_every_kind_of_wait_but_the_staged_copies():
    values = torch.arange(4)
    with HostSyncCounter() as syncs:
        values.tolist(), int(values[0]), bool(values[1] > 0), values[2].item(), torch.tensor([1, 2])
        staged = HostToDevice(torch.device("cpu")).tokens([3, 4])
    assert syncs.count == 5 and staged.tolist() == [3, 4]


def test_greedy_rule_on_the_device_matches_the_host_rule():
    logits = torch.full((4, 6), -1.0)
    logits[0, 2] = logits[1, 5] = logits[2, 1] = logits[3, 0] = 1.0
    assert verify_greedy_on_device(logits, torch.tensor([2, 5, 3])) == (2, 1, [2, 5, 3])
    assert verify_greedy_on_device(logits, torch.tensor([2, 5, 1])) == (3, 0, [2, 5, 1])
    assert verify_greedy_on_device(logits[:1], torch.tensor([], dtype=torch.long)) == (0, 2, [])


def test_stochastic_rule_on_the_device_reproduces_p_and_a_wrong_rule_is_caught():
    from test_sampling import chi_square_p

    p = torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [0.1, 0.1, 0.1, 0.1, 0.6]])
    q = torch.tensor([[0.1, 0.6, 0.1, 0.1, 0.1]])
    expected = {i: float(p[0, i]) for i in range(5)}
    runs = 6000

    def first_token_counts(rule):
        sampler = Sampler(SamplingParams(temperature=1.0), seed=0)
        counts = {}
        for _ in range(runs):
            draft = sampler.sample(q)
            n, token, _ = rule(p, draft, q, sampler)
            first = int(draft[0]) if n >= 1 else token
            counts[first] = counts.get(first, 0) + 1
        return counts

    def lossy(p, draft, q, sampler):  # resamples from p at a rejection instead of the residual
        n, token, tokens = verify_stochastic_on_device(p, draft, q, sampler)
        return (n, int(sampler.sample(p[n])), tokens) if n < len(tokens) else (n, token, tokens)

    assert chi_square_p(first_token_counts(verify_stochastic_on_device), expected, runs) > 1e-3
    assert chi_square_p(first_token_counts(lossy), expected, runs) < 1e-6


def test_sampling_through_the_static_path_matches_target_sampling(monkeypatch):
    """End to end through the device rule (the rule alone, and a wrong one caught, is the test above)."""
    from test_sampling import VOCAB, chi_square_p, exact_joint, sample_joint, tiny_vocab_tokenizer
    from tiny_models import build_tiny_llama

    target = build_tiny_llama(VOCAB, seed=11, hidden=16, layers=1, init=0.6)
    draft = build_tiny_llama(VOCAB, seed=12, hidden=16, layers=1, init=0.6)
    prompt, length, runs = [0, 1, 2, 0, 1], 2, 800  # 36 cells: enough for the wiring; the rule has its own test
    expected = exact_joint(target, prompt, length, 1.0)
    engine = SpeculativeEngine(runner_for(target, static_cache=True), tiny_vocab_tokenizer(),
                               ModelDrafter(draft, static=True), eos_token_ids=[])
    calls = []
    monkeypatch.setattr(speculative, "verify_stochastic_on_device",
                        lambda *args: calls.append(1) or verify_stochastic_on_device(*args))
    counts, drafted = sample_joint(engine, prompt, runs, length, 1.0)
    assert drafted >= runs and len(calls) >= runs  # every reply drafted, verified on the device
    assert chi_square_p(counts, expected, runs) > 1e-3


def test_gpu_check_quick_on_the_cpu_reports_one_sync_a_step_and_no_recompiles(tmp_path, capsys):
    from specchat.cli import main

    out = tmp_path / "gpu.json"
    assert main(["gpu-check", "--device", "cpu", "--quick", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    pair = report["pairs"][0]
    assert pair["host_syncs_per_step"] <= 1 and pair["recompiles_after_load"] == 0
    assert pair["steps_counted"] > 20 and pair["frames_compiled_at_load"] > 0
    assert set(pair["verify_cost"]) == {str(n) for n in range(1, 18)}
    assert [c["k"] for c in pair["ceiling"]] == [4, 8] and all(c["tokens_per_step"] > 1 for c in pair["ceiling"])
    assert [p["alpha"] for p in pair["predicted"]] == [0.6, 0.8, 0.9]
    assert "host syncs per step" in capsys.readouterr().out


def test_a_torch_draft_of_a_llama_cpp_target_runs_beside_it_on_the_host(close_draft):
    """A llama.cpp target's logits come back to the host (wherever its layers run), so its torch draft, loaded on a
    GPU, moves to the CPU in float32: the engine verifies there and samples with the target's generator."""
    from specchat.engine.loading.load import LoadedModel
    from specchat.engine.loading.pair import beside_the_target
    from specchat.models.sources import ModelSource

    source = ModelSource.parse("embedded")
    target = LoadedModel(source, None, None, torch.device("cpu"), torch.float32, native=object())
    draft = LoadedModel(source, perturbed_bf16(close_draft), None, torch.device("cuda"), torch.bfloat16,
                        proposal_vocab=torch.arange(5))
    moved = beside_the_target(draft, target)
    assert moved.device.type == "cpu" and moved.dtype == torch.float32
    assert next(moved.model.parameters()).dtype == torch.float32
    torch_target = LoadedModel(source, close_draft, None, torch.device("cuda"), torch.bfloat16)
    assert beside_the_target(draft, torch_target) is draft  # a torch target's draft stays where it was loaded


def perturbed_bf16(model):
    import copy

    return copy.deepcopy(model).to(torch.bfloat16)
