"""The measured verification cost curve, and the draft-length policy that prices K on it."""

from __future__ import annotations

import json

import pytest
import torch

from specchat.core.acceptance import expected_tokens
from specchat.engine.decoding.adaptive import PROMPT, AcceptanceClass, DraftLengthPolicy, StepCosts, cap
from specchat.engine.decoding.cost_curve import (FIXED_CURVE, PASS_SIZES, CostCurve, curve_for, kept_curve,
                                                 measure_curve, monotone)

# A curve shaped like llama.cpp's for a 1.5B Q4_K_M model on two cores (docs/performance.md): steep, uneven.
STEEP = CostCurve({1: 1.0, 2: 1.9, 3: 2.3, 4: 2.7, 8: 4.6, 16: 5.5, 24: 8.1, 32: 9.3, 48: 12.9, 64: 16.8})
PLAIN_S = 0.03
COPY = AcceptanceClass(PROMPT, 16)


def optimum(curve: CostCurve, alpha: float) -> int:
    """The K with the most expected tokens per one-token pass on `curve` at acceptance `alpha`."""
    return max((n - 1 for n in curve.sizes), key=lambda k: expected_tokens(alpha, k) / curve.ratio(k + 1))


def test_monotone_curve_never_prices_fewer_tokens_above_more():
    assert monotone({1: 1.0, 2: 2.5, 4: 2.0, 8: 0.5}) == {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0}
    assert monotone({1: 0.9, 2: 1.8, 4: 2.7}) == {1: 1.0, 2: 1.8, 4: 2.7}


def test_kept_curve_is_measured_once_and_junk_is_measured_again(tmp_path):
    cache = tmp_path / "costs.json"
    calls = []

    def measure():
        calls.append(1)
        return STEEP

    assert kept_curve("key", cache) is None  # a command says it will measure, before it does
    assert curve_for("key", measure, cache) == STEEP
    assert curve_for("key", measure, cache) == STEEP and kept_curve("key", cache) == STEEP
    assert len(calls) == 1
    cache.write_text(json.dumps({"key": {"1": "x"}}))
    assert curve_for("key", measure, cache) == STEEP and len(calls) == 2


class _TimedRunner:
    """A runner whose passes advance a fake clock by the curve's cost: measure_curve must read the curve back."""

    vocab_size = 1000
    context_window = 4096

    def __init__(self, curve: dict[int, float]):
        self.curve = curve
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def new_cache(self, capacity):
        return object()

    def forward(self, ids: torch.Tensor, cache, keep: int = 1, prefill: bool = False):
        n = ids.shape[1]
        assert prefill or keep == n  # every measured pass keeps every row's logits, as a verification does
        self.now += 0.01 * self.curve.get(n, n)
        return torch.zeros(keep, self.vocab_size)

    def rollback(self, cache, keep):
        pass


def test_measure_curve_times_each_size_against_one_token_passes():
    shape = {1: 1.0, 2: 1.9, 4: 2.7, 16: 5.5, 64: 16.8}
    runner = _TimedRunner(shape)
    curve = measure_curve(runner, sizes=(1, 2, 4, 16, 64), rounds=2, clock=runner.clock)
    assert curve.sizes == (1, 2, 4, 16, 64)
    for n, ratio in shape.items():
        assert curve.ratio(n) == pytest.approx(ratio)


def _copying_step(policy: DraftLengthPolicy, accepted: bool, key=COPY, proposal: int = 200) -> int:
    """One step of a reply whose proposals are all right (accepted) or all wrong; returns the K chosen."""
    k = policy.choose(proposal, key, free=True)
    n = k if accepted else 0
    policy.observe(k, n, verify_s=PLAIN_S * STEEP.ratio(k + 1), draft_s=0.0, acceptance_class=key, free=True)
    if k == 0:
        policy.observe_shadow(key, accepted)
    return k


def test_k_grows_to_the_curve_optimum_on_a_copying_reply():
    policy = DraftLengthPolicy(k_max=63, costs=StepCosts(curve=STEEP))
    ks = [_copying_step(policy, accepted=True) for _ in range(12)]
    best = optimum(STEEP, cap(COPY))
    assert best >= 15  # on this curve a near-certain copy pays most with a long check
    assert ks[0] == 0  # the class's first proposal is a trial at no cost
    assert ks[-1] == best and ks.index(best) <= 6, ks
    assert all(k + 1 in STEEP.ratios for k in ks)  # only measured sizes are ever checked


def test_k_falls_to_zero_on_a_reply_that_copies_nothing():
    policy = DraftLengthPolicy(k_max=63, costs=StepCosts(curve=STEEP))
    for _ in range(12):
        _copying_step(policy, accepted=True)
    ks = [_copying_step(policy, accepted=False) for _ in range(40)]
    assert ks[0] > 0
    first_zero = ks.index(0)
    assert first_zero <= 4, ks
    assert sum(k > 0 for k in ks[first_zero:]) <= 2, ks  # at most a probe or two afterwards


def test_a_proposal_is_checked_no_longer_than_it_is():
    policy = DraftLengthPolicy(k_max=63, costs=StepCosts(curve=STEEP))
    for _ in range(12):
        _copying_step(policy, accepted=True)
    assert policy.choose(10, COPY, free=True) == 7  # the longest measured check within 10 drafts is 8 tokens


@pytest.mark.parametrize("drafter_name", ["pld", "hybrid"])
def test_drafting_priced_on_a_curve_is_identical_to_plain_decoding(target, tokenizer, close_draft, drafter_name):
    from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
    from specchat.engine.drafting import NoDrafter, make_drafter

    # a prompt the reply copies from: a repeated sentence, so proposals run long
    text = "def add(a, b):\n    return a + b\n\n" * 6
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    config = GenerationConfig(max_new_tokens=96)
    reference = SpeculativeEngine(target, tokenizer, NoDrafter()).generate(prompt, config)
    drafter = make_drafter(drafter_name, close_draft)
    engine = SpeculativeEngine(target, tokenizer, drafter)
    engine.step_costs = StepCosts(curve=CostCurve({1: 1.0, 2: 1.1, 4: 1.2, 8: 1.5, 16: 2.0, 32: 3.0, 64: 5.0}))
    for _ in range(2):  # the second reply starts from what the first one learned
        result = engine.generate(prompt, config)
        assert result.token_ids == reference.token_ids
    assert result.stats.draft_proposed > 0
    sizes = {k + 1 for k, count in enumerate(result.stats.steps_by_k) if count}
    assert sizes <= {1, 2, 4, 8, 16, 32, 64} and max(sizes) >= 8  # only measured sizes are checked, long ones too


def test_a_draft_model_that_could_not_pay_even_if_always_right_is_never_run():
    # on the steep curve a draft token costing 0.8 of a pass never pays, even if all were accepted: 4 tokens for
    # 2.7 + 3 x 0.8 passes, 16 for 5.5 + 15 x 0.8, ...
    policy = DraftLengthPolicy(k_max=63, costs=StepCosts(curve=STEEP, draft_prior=0.8))
    assert [policy.choose(200) for _ in range(500)] == [0] * 500  # not even a probe
    cheap = DraftLengthPolicy(k_max=63, costs=StepCosts(curve=STEEP, draft_prior=0.02))
    assert any(cheap.choose(200) for _ in range(500))  # a cheap draft is probed


def test_a_short_match_is_never_believed_enough_for_a_long_check():
    # the curve measured for the same file on a busier day: 16 tokens at 9.2 one-token passes
    busier = CostCurve({1: 1.0, 2: 2.0, 3: 2.5, 4: 3.0, 8: 6.1, 16: 9.2, 32: 17.9, 64: 36.5})
    policy = DraftLengthPolicy(k_max=63, costs=StepCosts(curve=busier))
    short = AcceptanceClass(PROMPT, 3)
    for _ in range(20):  # a run of lucky hits on a 3-token match
        k = policy.choose(200, short, free=True)
        policy.observe(k, k, verify_s=PLAIN_S * busier.ratio(k + 1), draft_s=0.0, acceptance_class=short, free=True)
        if k == 0:
            policy.observe_shadow(short, True)
    assert policy.choose(200, short, free=True) == 3  # at most a 4-token check on this curve


def test_the_fixed_curve_has_every_measured_size():
    assert FIXED_CURVE.sizes == PASS_SIZES and FIXED_CURVE.ratio(2) == pytest.approx(1.1)


@pytest.mark.clock
def test_a_torch_target_prices_on_a_curve_measured_once_when_its_engines_are_built(target, tokenizer, tmp_path,
                                                                                    monkeypatch):
    from specchat.core import paths
    from specchat.engine.loading import pair as pair_module
    from specchat.engine.loading.load import LoadedModel
    from specchat.models.sources import ModelSource

    monkeypatch.setenv(paths.CACHE_DIR_ENV, str(tmp_path))
    measured = []

    def measuring(runner, sizes):
        measured.append(tuple(sizes))
        return measure_curve(runner, sizes, rounds=1)

    monkeypatch.setattr(pair_module, "measure_curve", measuring)
    loaded = LoadedModel(ModelSource("folder", "tiny-curve-test"), target, tokenizer, torch.device("cpu"),
                         torch.float32)
    pair = pair_module.ModelPair(loaded)
    first, second = pair.engine("pld"), pair.engine("none")
    assert measured == [PASS_SIZES]  # once for the pair (and kept: a new pair reads it back)
    curve = first.step_costs.curve
    assert second.step_costs.curve is curve and curve.sizes[0] == 1 and len(curve.sizes) > 10
    kept = pair_module.ModelPair(loaded).engine("pld").step_costs.curve
    assert kept.to_json() == curve.to_json() and len(measured) == 1
