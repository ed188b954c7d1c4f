"""The target's output head on the CPU: logits with whichever weight layout this machine computes faster.

The head is the widest matrix product of a step (vocabulary x hidden: 49152 x 576 for SmolLM2, a fifth of the
model's weights). Which layout MKL multiplies fastest depends on the number of rows and on the CPU: a transposed,
contiguous copy can win for one row and lose for two or three, and from four rows on a copy packed for MKL
(engine/backends/torch/packed.py) can beat both, so no layout wins everywhere: each input length is timed once every way that
applies and the fastest is kept (per head, shared by every engine of the model).
"""

from __future__ import annotations

import time
import weakref
from typing import Callable

import torch

from .packed import packed_weights_for

# Architectures whose causal-LM forward is exactly lm_head(last hidden state): no soft-capping, no logit scale.
PLAIN_HEAD_MODELS = ("llama", "mistral", "qwen2", "qwen3")
TRIALS = 3
PREPARED_ROWS = 9  # timed up front, at load: the verifications the draft-length policy chooses nearly always

_heads: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class TunedHead:
    """logits = hidden @ W^T for [n, hidden] inputs, by F.linear, a transposed copy or a packed copy, per n the
    fastest."""

    def __init__(self, linear: torch.nn.Linear):
        self.weight = linear.weight
        self.bias = linear.bias
        self.transposed = linear.weight.detach().t().contiguous()  # [hidden, vocab]: the second layout
        self.packed = packed_weights_for(linear, [linear.weight])
        self.product: dict[int, Callable] = {}  # rows -> the fastest product for that many rows
        # Timed now rather than on first use, where the timing would land inside a measured verification pass
        # and make the draft-length policy believe that size costs far more than it does (longer inputs take the
        # choice for the longest of these).
        with torch.inference_mode():
            for rows in range(1, PREPARED_ROWS + 1):
                self.product[rows] = self._fastest(torch.zeros(rows, self.weight.shape[1], dtype=self.weight.dtype))

    @torch.inference_mode()
    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        product = self.product.get(hidden.shape[0])
        if product is None:
            product = self.product[hidden.shape[0]] = self._beyond_prepared(hidden)
        return product(hidden)

    def _beyond_prepared(self, hidden: torch.Tensor) -> Callable:
        """A longer input (a verification of 10-17 tokens) takes the layout chosen for the longest
        prepared one where it applies, without timing: timed here, the trials would land inside a measured
        verification pass, add a noticeable share to the generation's time, and tell the draft-length policy that
        long drafts cost more than they do."""
        chosen = self.product[PREPARED_ROWS]
        if chosen == self._by_packed and not self.packed.applies(hidden.shape[0]):
            return self._plain
        return chosen

    def _plain(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(hidden, self.weight, self.bias)

    def _by_transposed(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._with_bias(hidden @ self.transposed)

    def _by_packed(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._with_bias(self.packed.linear(hidden.contiguous(), 0))

    def _with_bias(self, logits: torch.Tensor) -> torch.Tensor:
        return logits if self.bias is None else logits + self.bias

    def _fastest(self, hidden: torch.Tensor) -> Callable:
        def best_of(product) -> float:
            times = []
            for _ in range(TRIALS):
                started = time.perf_counter()
                product(hidden)
                times.append(time.perf_counter() - started)
            return min(times)

        products = [self._plain, self._by_transposed]
        if self.packed is not None and self.packed.applies(hidden.shape[0]):
            products.append(self._by_packed)
        return min(products, key=best_of)


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
