"""A prompt read and a short greedy reply on a runner's own loop: what the prompt reader's and the state shelf's
tests compare, bit for bit, between a runner that reused or restored a prompt and a fresh one."""

import torch


def read_then_decode(runner, tokens: list[int], steps: int = 8) -> tuple[torch.Tensor, list[int]]:
    """The prompt's last logits and a greedy reply of `steps` tokens, on a runner's own loop."""
    cache = runner.new_cache(len(tokens) + steps + 1)
    logits = runner.forward(torch.tensor([tokens]), cache, keep=1, prefill=True)
    first, out = logits.clone(), []
    for _ in range(steps):
        out.append(int(logits[0].argmax()))
        logits = runner.forward(torch.tensor([[out[-1]]]), cache, keep=1)
    return first, out
