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


def _one_token_steps(runner, prompt: list[int], steps: int, pick) -> tuple[list[int], list[float]]:
    """Decodes as plain decoding runs (the prompt in one prefill, then one-token passes) for at most `steps` tokens:
    at each, plain's top-2 logit margin, then `pick(step, argmax)` gives the token fed next (None: stop after this
    one). Returns (the tokens fed, the margins)."""
    cache = runner.new_cache(len(prompt) + steps + 1)
    logits = runner.forward(torch.tensor([prompt]), cache, keep=1, prefill=True)[0]
    tokens, margins = [], []
    for step in range(steps):
        top = torch.topk(logits.float(), 2)
        margins.append(float(top.values[0] - top.values[1]))
        token = pick(step, int(top.indices[0]))
        tokens.append(token if token is not None else int(top.indices[0]))
        if token is None or step == steps - 1:
            break
        logits = runner.forward(torch.tensor([[token]]), cache, keep=1)[0]
    return tokens, margins


def plain_margins(runner, prompt: list[int], reply: list[int]) -> list[float]:
    """Plain decoding's top-2 logit margin at each step of `reply`. runner: a target runner (new_cache, forward)."""
    return _one_token_steps(runner, prompt, len(reply), lambda step, _: reply[step])[1] if reply else []


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


def plain_greedy(runner, prompt: list[int], max_new_tokens: int, eos: set[int]) -> tuple[list[int], list[float]]:
    """Plain greedy decoding by hand, as plain_margins runs it: (the reply, up to `max_new_tokens` or its first
    token in `eos`, which it keeps; plain's top-2 margin at each of its steps). One run gives both, so a comparison
    need not decode the plain reply twice."""
    return _one_token_steps(runner, prompt, max_new_tokens, lambda _, best: None if best in eos else best)


class PlainReference:
    """Plain greedy replies to prompts with their top-2 margins (plain_greedy), each computed once: the plain side
    of several comparisons (an acceptance rule and a wrong one) is the same, and on a real model it is most of
    their cost. `runner`: a target runner; `max_new_tokens` and `eos` as the compared engine's."""

    def __init__(self, runner, max_new_tokens: int, eos: set[int]):
        self._runner, self._max_new_tokens, self._eos = runner, max_new_tokens, set(eos)
        self._runs: dict[tuple[int, ...], tuple[list[int], list[float]]] = {}

    def _run(self, ids: Sequence[int]) -> tuple[list[int], list[float]]:
        key = tuple(ids)
        if key not in self._runs:
            self._runs[key] = plain_greedy(self._runner, list(ids), self._max_new_tokens, self._eos)
        return self._runs[key]

    def reply(self, ids: Sequence[int]) -> list[int]:
        return self._run(ids)[0]

    def margin(self, ids: Sequence[int], other: Sequence[int]) -> float | None:
        """divergence_margin for `other` against the plain reply to `ids`."""
        plain, margins = self._run(ids)
        first = first_divergence(plain, other)
        if first is None:
            return None
        return 0.0 if first >= len(plain) else margins[first]


def divergence_margins(reference: PlainReference, engine_drafted, prompts, config) -> tuple[int, list[float]]:
    """(replies identical to plain decoding, plain's margin where each other reply first parts from it), for
    `engine_drafted`'s greedy replies to each prompt's token ids against `reference`'s."""
    identical, margins = 0, []
    for ids in prompts:
        margin = reference.margin(ids, engine_drafted.generate(ids, config).token_ids)
        if margin is None:
            identical += 1
        else:
            margins.append(margin)
    return identical, margins
