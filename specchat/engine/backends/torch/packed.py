"""Weights prepacked for the CPU's few-row matrix products: the target's verification passes.

With MKL's sgemm, a product of n rows by a weight matrix costs very different amounts by n. For 1-3 rows MKL runs
a GEMV-like kernel over the weight as it lies in memory. From 4 rows on it first copies the weight into its blocked
panel layout, on every call, so the product reads the weights twice and writes them once, and a verification pass
of K+1 = 4..8 tokens costs much more than its arithmetic. Packing each weight once into that layout
(cblas_sgemm_pack, which torch exposes as mkl::_mkl_reorder_linear_weight) leaves the arithmetic
(docs/performance-torch.md, "What makes it fast").

The packed copies cost the weights' size again in memory, so they are made once per model and shared by every engine
and thread that uses it. MKL packs for a row count; the layout packed for PACKED_FOR rows serves every row count
from MIN_ROWS to MAX_ROWS, and MKL does not document that its products then agree with the plain ones, so every row
count is checked against the plain product when the copies are made (not on first use: that would land in a timed
verification and mislead the draft-length policy's cost curve), and a row count that differs keeps the plain
product.
"""

from __future__ import annotations

import threading
import weakref
from typing import Sequence

import torch
import torch.nn.functional as F

MIN_ROWS = 4  # below this MKL does not repack the weight on each call: the plain product is as fast
MAX_ROWS = 17  # a verification of K_max = 16 drafts (the default limit); prompts' prefills take the plain product
PACKED_FOR = 8

_packs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_packs_lock = threading.Lock()


def packing_available(weight: torch.Tensor) -> bool:
    """MKL's packed products exist for float32 weights on the CPU in MKL builds of torch."""
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkl.is_available()
            and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight") and hasattr(torch.ops.mkl, "_mkl_linear"))


class PackedWeights:
    """Packed copies of some weight matrices ([out, in] as nn.Linear keeps them), addressed by their index."""

    def __init__(self, weights: Sequence[torch.Tensor]):
        with torch.inference_mode():
            self.weights = [weight.detach() for weight in weights]
            self.packed = [torch.ops.mkl._mkl_reorder_linear_weight(weight, PACKED_FOR) for weight in self.weights]
        self._rows_ok = {rows: self._products_agree(rows) for rows in range(MIN_ROWS, MAX_ROWS + 1)}

    def applies(self, rows: int) -> bool:
        """Whether products of this many rows take the packed weights."""
        return self._rows_ok.get(rows, False)

    def linear(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """x @ weights[index]^T for a contiguous x of `rows` rows, where applies(rows)."""
        return torch.ops.mkl._mkl_linear(x, self.packed[index], self.weights[index], None, x.shape[0])

    @torch.inference_mode()
    def _products_agree(self, rows: int) -> bool:
        """Packed and plain products of one random input agree to float32 rounding for every distinct shape."""
        generator = torch.Generator().manual_seed(rows)
        seen: set[tuple[int, int]] = set()
        for index, weight in enumerate(self.weights):
            if tuple(weight.shape) in seen:
                continue
            seen.add(tuple(weight.shape))
            x = torch.randn(rows, weight.shape[1], generator=generator)
            expected = F.linear(x, weight)
            # Float32 sums of d terms round to within about d * 6e-8 of sum |x_i w_i| <= |x| |w| (about 1e-4 for d
            # up to 1536); a wrong layout gives errors of the products' own size, about |x| |w| / sqrt(d).
            tolerance = 1e-4 * torch.outer(x.norm(dim=1), weight.norm(dim=1))
            if not bool(((self.linear(x, index) - expected).abs() <= tolerance).all()):
                return False
        return True


def packed_weights_for(owner, weights: Sequence[torch.Tensor]) -> PackedWeights | None:
    """The packed copies of `weights`, made once per owner (a model), or None where packing is not available."""
    if not weights or not all(packing_available(weight) for weight in weights):
        return None
    with _packs_lock:
        if owner not in _packs:
            try:
                _packs[owner] = PackedWeights(weights)
            except RuntimeError:  # an MKL build without the packed API compiled in: remembered, not retried
                _packs[owner] = None
        return _packs[owner]
