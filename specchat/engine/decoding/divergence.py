"""Where a reply parts from plain decoding, and how close plain decoding's top two tokens were there.

On llama.cpp's fastest kernels (exactness "distribution") a pass of several rows rounds differently from a
one-token pass, so a greedy reply may part from plain decoding where plain decoding's two likeliest tokens nearly
tie. These functions measure that: the test of the acceptance rule (tests/engine/test_llama_kernels.py) and the
measurement on real models (docs/measure/divergence_margins.py) use them.
"""

from __future__ import annotations

from typing import Sequence

import torch


def first_divergence(plain: Sequence[int], other: Sequence[int]) -> int | None:
    """The index of the first token where `other` differs from `plain` (a shorter reply differs where it ends),
    or None when the two are equal."""
    if list(plain) == list(other):
        return None
    return next((i for i, (a, b) in enumerate(zip(plain, other)) if a != b), min(len(plain), len(other)))


def plain_margins(runner, prompt: list[int], reply: list[int]) -> list[float]:
    """Plain decoding's top-2 logit margin at each step of `reply`: the prompt in one prefill, then one-token
    passes, as plain decoding runs. runner: a target runner (new_cache, forward)."""
    cache = runner.new_cache(len(prompt) + len(reply) + 1)
    logits = runner.forward(torch.tensor([prompt]), cache, keep=1, prefill=True)[0]
    margins = []
    for token in reply:
        top = torch.topk(logits.float(), 2).values
        margins.append(float(top[0] - top[1]))
        logits = runner.forward(torch.tensor([[token]]), cache, keep=1)[0]
    return margins


def divergence_margin(runner, prompt: list[int], plain: list[int], other: list[int]) -> float | None:
    """Plain decoding's top-2 margin where `other` first parts from `plain`; None when they are equal, 0.0 when
    `other` only stops earlier or later (an end-of-turn token that won or lost a tie is still a tie we cannot
    see past)."""
    first = first_divergence(plain, other)
    if first is None:
        return None
    if first >= len(plain):
        return 0.0
    return plain_margins(runner, prompt, plain[: first + 1])[first]


def divergence_margins(engine_plain, engine_drafted, runner, prompts, config) -> tuple[int, list[float]]:
    """(replies identical to plain decoding, plain's margin where each other reply first parts from it), for the
    two engines' greedy replies to each prompt's token ids."""
    identical, margins = 0, []
    for ids in prompts:
        plain = list(engine_plain.generate(ids, config).token_ids)
        drafted = list(engine_drafted.generate(ids, config).token_ids)
        margin = divergence_margin(runner, ids, plain, drafted)
        if margin is None:
            identical += 1
        else:
            margins.append(margin)
    return identical, margins
