"""Sampling at the edges of its parameters: a vanishing temperature or top_p gives its limit, never NaN.

temperature 1e-45 once divided the logits to infinity (softmax of inf - inf: NaN, and torch.multinomial refused
it); top_p 1e-50 rounds to 0 in float32, which once dropped every token (0/0). Both limits are the most likely
token, ties shared; ordinary values keep the distribution softmax(logits / T) exactly.
"""

import pytest
import torch

from specchat.engine.decoding.sampling import Sampler, SamplingParams

LOGITS = torch.tensor([[1.0, 30.0, -4.0, 29.5, float("-inf")],
                       [-100.0, -200.0, -100.0, -300.0, -150.0]])  # the second row: a tie for the top


@pytest.mark.parametrize("temperature", [1e-45, 1e-50, 1e-320, 5e-324, 1e-38])
def test_a_vanishing_temperature_is_the_most_likely_token(temperature):
    sampler = Sampler(SamplingParams(temperature=temperature), seed=0)
    probs = sampler.probs(LOGITS)
    assert torch.isfinite(probs).all()
    assert torch.equal(probs[0], torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0]))
    assert torch.equal(probs[1], torch.tensor([0.5, 0.0, 0.5, 0.0, 0.0]))  # the tie, shared
    assert sampler.next_token(LOGITS[0]) == 1
    assert {int(sampler.sample(probs[1])) for _ in range(50)} <= {0, 2}


@pytest.mark.parametrize("top_p", [1e-50, 1e-45, 1e-9])
def test_a_vanishing_top_p_keeps_the_most_likely_token(top_p):
    sampler = Sampler(SamplingParams(temperature=0.7, top_p=top_p), seed=0)
    probs = sampler.probs(LOGITS)
    assert torch.isfinite(probs).all()
    assert torch.equal(probs[0], torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0]))
    assert probs[1].sum() == pytest.approx(1.0) and probs[1].max() == 1.0  # one of the tied tokens
    assert sampler.next_token(LOGITS[0]) == 1


def test_ordinary_values_keep_the_distribution():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(1)) * 5
    for temperature in (0.3, 1.0, 1.7):
        probs = Sampler(SamplingParams(temperature=temperature), seed=0).probs(logits)
        torch.testing.assert_close(probs, torch.softmax(logits / temperature, dim=-1))
    nucleus = Sampler(SamplingParams(temperature=1.0, top_p=0.5), seed=0).probs(logits[:1])[0]
    ranked = torch.softmax(logits[0], dim=-1).sort(descending=True)
    kept = int((ranked.values.cumsum(0) - ranked.values < 0.5).sum())  # the smallest set reaching 0.5
    assert set(nucleus.nonzero().flatten().tolist()) == set(ranked.indices[:kept].tolist())
    assert float(nucleus.sum()) == pytest.approx(1.0)
