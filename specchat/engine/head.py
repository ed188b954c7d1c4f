"""The target's output head on the CPU: logits with whichever weight layout this machine computes faster.

The head is the widest matrix product of a step (vocabulary x hidden: 49152 x 576 for SmolLM2, a fifth of the
model's weights). On this project's CPU, MKL multiplies a few rows by the transposed, contiguous copy of it much
faster for one row (2.7 ms against 4.1) but slower for two or three, so neither layout wins everywhere: each input
length is timed once both ways and the faster is kept (per head, shared by every engine of the model).
"""

from __future__ import annotations

import time
import weakref

import torch

# Architectures whose causal-LM forward is exactly lm_head(last hidden state): no soft-capping, no logit scale.
PLAIN_HEAD_MODELS = ("llama", "mistral", "qwen2", "qwen3")
TRIALS = 3

_heads: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class TunedHead:
    """logits = hidden @ W^T for [n, hidden] inputs, by F.linear or by a transposed copy, per n the faster."""

    def __init__(self, linear: torch.nn.Linear):
        self.weight = linear.weight
        self.bias = linear.bias
        self.transposed = linear.weight.detach().t().contiguous()  # [hidden, vocab]: the second layout
        self.use_transposed: dict[int, bool] = {}

    @torch.inference_mode()
    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        n = hidden.shape[0]
        if n not in self.use_transposed:
            self.use_transposed[n] = self._transposed_is_faster(hidden)
        if self.use_transposed[n]:
            logits = hidden @ self.transposed
            return logits if self.bias is None else logits + self.bias
        return torch.nn.functional.linear(hidden, self.weight, self.bias)

    def _transposed_is_faster(self, hidden: torch.Tensor) -> bool:
        def best_of(function) -> float:
            times = []
            for _ in range(TRIALS):
                started = time.perf_counter()
                function()
                times.append(time.perf_counter() - started)
            return min(times)

        linear = best_of(lambda: torch.nn.functional.linear(hidden, self.weight, self.bias))
        transposed = best_of(lambda: hidden @ self.transposed)
        return transposed < linear


def tuned_head_for(model: torch.nn.Module) -> TunedHead | None:
    """The tuned head of a CPU float32 model whose logits are a plain linear map of its last hidden state, else None
    (GPUs: cuBLAS has no such pitfall, and the compiled path wants the model's own forward)."""
    head = model.get_output_embeddings()
    if (getattr(model.config, "model_type", None) not in PLAIN_HEAD_MODELS or type(head) is not torch.nn.Linear
            or head.weight.device.type != "cpu" or head.weight.dtype != torch.float32
            or getattr(model.config, "final_logit_softcapping", None)):
        return None
    if head not in _heads:
        _heads[head] = TunedHead(head)
    return _heads[head]
