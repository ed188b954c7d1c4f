"""Speculative sampling must leave the target's output distribution unchanged, checked statistically.

Each test compares observed frequencies with the exact target distribution (enumerated from the model) using
Pearson's chi-square test, and shows that the same test rejects a deliberately wrong acceptance rule.
"""

import itertools

import pytest
import torch
from scipy.stats import chisquare
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import specchat.engine.decoding.speculative as speculative
from specchat.engine.decoding.sampling import Sampler, SamplingParams, residual_distribution, verify_stochastic
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import ModelDrafter, PromptLookupDrafter

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # thousands of replies of one-layer models (conftest.py)

VOCAB = 6
LETTERS = "abcdef"


def tiny_vocab_tokenizer():
    """A word-level tokenizer over six letters, so that joint distributions of 3 tokens have 216 cells."""
    tokenizer = Tokenizer(models.WordLevel({c: i for i, c in enumerate(LETTERS)}, unk_token="a"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="a")


def chi_square_p(observed: dict, expected_probs: dict, n: int) -> float:
    """Pearson's test, pooling cells expected fewer than 5 times so that the chi-square approximation holds."""
    big = [cell for cell, p in expected_probs.items() if p * n >= 5]
    small = [cell for cell in expected_probs if cell not in big]
    obs = [observed.get(cell, 0) for cell in big] + [sum(observed.get(cell, 0) for cell in small)]
    exp = [expected_probs[cell] * n for cell in big] + [sum(expected_probs[cell] for cell in small) * n]
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return chisquare(obs, exp).pvalue


def lossy_verify(target_probs, draft, draft_probs, sampler):
    """A classic mistake: on rejection, resample from p instead of the residual max(p - q, 0)."""
    n, token = verify_stochastic(target_probs, draft, draft_probs, sampler)
    if n < len(draft):
        token = int(sampler.sample(target_probs[n]))
    return n, token


# --- the acceptance rule alone, on synthetic distributions -------------------------------------------------

def test_one_position_rule_reproduces_p_exactly_and_a_wrong_rule_is_caught():
    p = torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [0.1, 0.1, 0.1, 0.1, 0.6]])
    q = torch.tensor([[0.1, 0.6, 0.1, 0.1, 0.1]])
    expected = {i: float(p[0, i]) for i in range(5)}
    runs = 20000

    def first_token_counts(rule):
        sampler = Sampler(SamplingParams(temperature=1.0), seed=0)
        counts = {}
        for _ in range(runs):
            draft = [int(sampler.sample(q[0]))]
            n, token = rule(p, draft, q, sampler)
            first = draft[0] if n >= 1 else token
            counts[first] = counts.get(first, 0) + 1
        return counts

    assert chi_square_p(first_token_counts(verify_stochastic), expected, runs) > 1e-3
    assert chi_square_p(first_token_counts(lossy_verify), expected, runs) < 1e-6


def test_residual_of_a_point_mass_removes_the_drafted_token():
    p = torch.tensor([0.5, 0.3, 0.2])
    assert torch.allclose(residual_distribution(p, None, 0, 0), torch.tensor([0.0, 0.6, 0.4]))


# --- the whole engine, end to end ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_world():
    from tiny_models import build_tiny_llama

    target = build_tiny_llama(VOCAB, seed=11, hidden=16, layers=1, init=0.6)
    draft = build_tiny_llama(VOCAB, seed=12, hidden=16, layers=1, init=0.6)
    return target, draft, tiny_vocab_tokenizer()


def exact_joint(target, prompt, length, temperature):
    """P(first `length` generated tokens) for target-only sampling, by enumeration."""
    probs = {}
    with torch.no_grad():
        for seq in itertools.product(range(VOCAB), repeat=length):
            ids = torch.tensor([prompt + list(seq)])
            logits = target(ids).logits[0, len(prompt) - 1 : len(prompt) - 1 + length] / temperature
            steps = torch.softmax(logits.double(), dim=-1)
            probs[seq] = float(torch.prod(steps[torch.arange(length), torch.tensor(seq)]))
    return probs


def sample_joint(engine, prompt, runs, length, temperature):
    counts, drafted = {}, 0
    config = dict(max_new_tokens=length + 1, k=2, adaptive_k=False,
                  sampling=SamplingParams(temperature=temperature))
    for seed in range(runs):
        result = engine.generate(prompt, GenerationConfig(seed=seed, **config))
        key = tuple(result.token_ids[:length])
        counts[key] = counts.get(key, 0) + 1
        drafted += result.stats.draft_proposed
    return counts, drafted


def eagle_drafter(target):
    """A draft head whose vocabulary leaves one token out: its q must put no mass there and stay exact."""
    from specchat.engine.drafting import EagleDrafter
    from specchat.engine.drafting.eagle_network import HeadShape
    from specchat.training.eagle_head import build_head

    head = build_head(target, torch.arange(VOCAB - 1), HeadShape(hidden=16, inner=32, blocks=1, vocab=VOCAB - 1), 0)
    return EagleDrafter(head.eval(), target)


def history_drafter():
    """Prompt lookup plus past replies that match the prompt's end for longer than the prompt itself does."""
    from specchat.engine.drafting.past_replies import SuffixIndex

    index = SuffixIndex()
    index.extend([[1, 2, 0, 1, 5, 3, 2], [0, 1, 4, 4, 1, 2], [2, 0, 1, 3, 3, 0, 1, 2, 5]])
    return PromptLookupDrafter(history=index)


@pytest.mark.parametrize("drafter", ["model", "model-vocab", "pld", "history", "eagle"])
def test_speculative_sampling_matches_target_sampling(small_world, drafter, monkeypatch):
    target, draft, tokenizer = small_world
    prompt = [0, 1, 2, 0, 1]  # repeats, so prompt lookup has something to propose
    length, runs, temperature = 3, 2000, 1.0
    expected = exact_joint(target, prompt, length, temperature)
    make = {"model": lambda: ModelDrafter(draft), "pld": PromptLookupDrafter,
            # a draft that proposes from all tokens but one: q must be zero there and the result still exact
            "model-vocab": lambda: ModelDrafter(draft, vocab_ids=torch.arange(1, VOCAB)),
            "eagle": lambda: eagle_drafter(target), "history": history_drafter}[drafter]
    engine = SpeculativeEngine(target, tokenizer, make(), eos_token_ids=[])

    counts, drafted = sample_joint(engine, prompt, runs, length, temperature)
    assert drafted > runs // 2  # the drafts really were used (proposals are as long as their evidence)
    assert chi_square_p(counts, expected, runs) > 1e-3

    monkeypatch.setattr(speculative, "verify_stochastic", lossy_verify)
    wrong, _ = sample_joint(engine, prompt, runs, length, temperature)
    assert chi_square_p(wrong, expected, runs) < 1e-6
