"""A transformers model's passes over one static KV cache, at explicit positions, compiled once per input length.

This is the GPU path's forward, for the target (runners.StaticCacheRunner) and for a draft model
(drafting/backends.StaticDraftForward), after gpt-fast's generate.py:

- One cache for the model's life. `StaticPasses` owns a transformers StaticCache of a fixed capacity, made once
  and reused by every reply, so its buffers keep their addresses (CUDA graphs recorded at load stay valid).
  Positions are the caller's: each pass writes its tokens at [start, start + n) (cache.seek sets the layers'
  counters from `start`, inside the graph, since transformers' static layers write at their own counter), and the
  causal mask hides everything after a query's own position. So rolling back is only moving the caller's length back, and
  a new reply needs no clearing: what a pass reads was always written by it or by a pass that was kept.
- A few input lengths. A pass of n tokens is padded to the smallest bucket >= n (verification: 1, 2, 4, 8, and
  K_max + 1, for a draft's steps too). Padding rows come after the real ones, so the causal mask keeps them out of
  the real rows; they write junk past the kept length, which the next pass overwrites before anything reads it.
- Compiled at load. `warm_up()` runs every bucket a few times while loading, so dynamo traces each length once and
  CUDA graphs are recorded then ("reduce-overhead"). A reply never compiles; `specchat gpu-check` counts that.
- No host waits. Inputs arrive as device tensors; positions are made on the device from the caller's host-side
  length; logits stay on the device.

Longer inputs (a prompt, a draft model's catch-up after a free proposal) run eagerly in chunks, at explicit
positions too.
"""

from __future__ import annotations

from typing import Callable

import torch

from .host_syncs import uncounted
from .kv_cache import cache_argument, new_static_cache, seek

PREFILL_CHUNK = 512  # tokens per eager pass over a prompt


def verification_buckets(k_max: int) -> tuple[int, ...]:
    """The input lengths a verification pass is padded to: powers of two up to half of k_max + 1, then k_max + 1
    (1, 2, 4, 8, 17 for k_max = 16: five graphs, and no pass padded to more than twice its length)."""
    buckets = [1]
    while buckets[-1] * 4 <= k_max + 1:
        buckets.append(buckets[-1] * 2)
    return (*buckets, k_max + 1) if buckets[-1] != k_max + 1 else tuple(buckets)


def compile_backend(device: torch.device) -> str | None:
    """How steps are compiled by default: inductor with CUDA graphs on a GPU; not at all elsewhere (the CPU has
    faster forwards of its own: the lean forward, llama.cpp)."""
    return "inductor" if device.type == "cuda" else None


class StaticPasses:
    """Passes of `model` over its one static cache. `run(ids, start, keep)`: the ids (a 1-D device tensor) written
    at positions start.., returning the last `keep` real rows of logits [keep, vocab]; with `features`, the final
    hidden states of the real rows are handed to it first (a draft head reads them).

    `buckets`: the compiled input lengths; `backend`: torch.compile's backend ("inductor" uses CUDA graphs on a
    GPU; "eager" traces without code generation, for checks on the CPU; None: no compilation)."""

    def __init__(self, model: torch.nn.Module, capacity: int, buckets: tuple[int, ...], backend: str | None,
                 features: Callable[[torch.Tensor], None] | None = None):
        self.model = model
        self.device = next(model.parameters()).device
        self.buckets = tuple(sorted(buckets))
        self.capacity = capacity  # positions a caller may fill
        self.cache = new_static_cache(model, capacity + self.buckets[-1])  # and room for a last pass's padding
        self._argument = cache_argument(model)
        self._features = features
        self._decoder = model.get_decoder() if features is not None else None
        self._head = model.get_output_embeddings() if features is not None else None
        self._eager = self._decoder_pass if features is not None else self._model_pass
        self._compiled = self._eager
        self.backend = backend
        with torch.inference_mode():  # the cache's buffers are allocated by a first, eager pass (never in a graph)
            self._eager(torch.zeros(1, 1, dtype=torch.long, device=self.device),
                        torch.zeros(1, dtype=torch.long, device=self.device))
        if backend is not None:
            _raise_recompile_limit(len(self.buckets))
            options = {"mode": "reduce-overhead"} if backend == "inductor" and self.device.type == "cuda" else {}
            self._compiled = torch.compile(self._eager, backend=backend, fullgraph=False, dynamic=False, **options)

    def run(self, ids: torch.Tensor, start: int, keep: int) -> torch.Tensor:
        """Logits [keep, vocab] of the last `keep` of `ids` (1-D, on the device), written at positions start.."""
        n = ids.shape[0]
        if start + n > self.capacity:
            raise ValueError(f"a pass at {start}+{n} does not fit the static cache of {self.capacity} positions")
        if n > self.buckets[-1]:
            return self._run_eager(ids, start, keep)
        bucket = next(b for b in self.buckets if b >= n)
        if bucket > n:
            ids = torch.cat([ids, ids[-1:].expand(bucket - n)])
        positions = torch.arange(start, start + bucket, device=self.device)
        with uncounted():
            logits, hidden = self._compiled(ids.view(1, -1), positions)
        if self._features is not None:
            self._features(hidden[:n].clone())
        return logits[n - keep: n].clone()  # a CUDA graph's outputs are overwritten by its next replay

    def warm_up(self, repeats: int = 3) -> None:
        """Runs every bucket `repeats` times at position 0 (overwritten by the next prompt): dynamo traces each
        length once and inductor records its CUDA graph, here rather than inside a reply."""
        with torch.inference_mode():
            for bucket in self.buckets:
                ids = torch.zeros(bucket, dtype=torch.long, device=self.device)  # contiguous, as a step's are
                for _ in range(repeats):
                    self.run(ids, 0, 1)

    def _run_eager(self, ids: torch.Tensor, start: int, keep: int) -> torch.Tensor:
        """A long input (a prompt) in eager chunks at explicit positions; the last chunk's last `keep` rows."""
        logits = None
        for offset in range(0, ids.shape[0], PREFILL_CHUNK):
            chunk = ids[offset: offset + PREFILL_CHUNK]
            positions = torch.arange(start + offset, start + offset + chunk.shape[0], device=self.device)
            logits, hidden = self._eager(chunk.view(1, -1), positions)
            if self._features is not None:
                self._features(hidden)
        return logits[logits.shape[0] - keep:]

    def _model_pass(self, input_ids: torch.Tensor, positions: torch.Tensor):
        seek(self.cache, positions[0])  # the layers write at their own counter: set it, inside the graph
        out = self.model(input_ids=input_ids, position_ids=positions.view(1, -1), cache_position=positions,
                         use_cache=True, logits_to_keep=0, **{self._argument: self.cache})
        return out.logits[0], None

    def _decoder_pass(self, input_ids: torch.Tensor, positions: torch.Tensor):
        seek(self.cache, positions[0])  # the layers write at their own counter: set it, inside the graph
        out = self._decoder(input_ids=input_ids, position_ids=positions.view(1, -1), cache_position=positions,
                            use_cache=True, **{self._argument: self.cache})
        hidden = out.last_hidden_state[0]
        return self._head(hidden), hidden


def _raise_recompile_limit(graphs: int) -> None:
    """Every model of a session shares the class's forward, whose compiled variants count against one dynamo limit
    (8 by default): a target's five buckets and a draft's two would reach it. Each StaticPasses adds its own."""
    import torch._dynamo.config as dynamo

    name = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"
    setattr(dynamo, name, getattr(dynamo, name) + graphs)
    if hasattr(dynamo, "accumulated_recompile_limit"):
        dynamo.accumulated_recompile_limit = max(dynamo.accumulated_recompile_limit, 256)
