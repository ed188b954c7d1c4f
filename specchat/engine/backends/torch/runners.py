"""How the engine runs the target: one interface, a runner per backend and forward path.

The speculative loop needs four things of the target and nothing else, so it never branches on the backend:
- `new_cache(capacity)`: an empty KV cache with room for that many positions;
- `forward(input_ids, cache, keep, hidden_rows=0, prefill=False, cancel=None)`: one pass over the new tokens (the
  prompt, or [last token, x_1..x_K]), returning logits [keep, vocab] of the last `keep` positions; the cache grows
  by the input's length. A prefill runs in chunks of PREFILL_CHUNK tokens, with `cancel` checked between them
  (PrefillCancelled). A runner that `keeps_features` also leaves the last max(keep, hidden_rows) final-norm hidden
  states in `features`, for a draft head;
- `rollback(cache, keep)`: drop every cached position from `keep` on (rejected drafts); a cache knows its own
  length, so the caller passes none;
- `vocab_size`, `context_window`, `device`.

`runner_for(model, keeps_features, **options)` is the one place that chooses a transformers model's runner, once,
from the model, the device and the options (static_cache, compile_steps, tuned_head, lean, packed_weights):
- `TorchRunner`: transformers' forward over a growing cache (through the decoder and the tuned output head when
  that head applies or hidden states are kept). It holds what every torch path shares: the chunked prefill, the
  output head, the kept hidden states, the rollback;
- `LeanRunner`: engine/backends/torch/lean.py's forward over its own preallocated cache, for plain Llama models off the GPU;
- `StaticCacheRunner`: transformers' forward over a static cache, its verification steps compiled with CUDA graphs
  (the GPU path).
A GGUF file runs on llama.cpp's own kernels through `LlamaCppRunner` (engine/backends/llamacpp/llama_runner.py), with the same interface.
"Runner" names these, the target's forward paths, only: a draft model runs on a draft backend (drafting/backends.py).
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol, runtime_checkable

import torch

from specchat.core.errors import PrefillCancelled

from .kv_cache import cache_argument, new_cache, rollback
from .lean import LeanCache, LeanLlama, lean_forward_supported
from .static_steps import StaticPasses, compile_backend, verification_buckets
from .tuned_head import tuned_head_for

PREFILL_CHUNK = 512  # prompt tokens per prefill pass: a Stop is heard between passes, so a long prompt can be stopped
STATIC_CACHE_TOKENS = 8192  # the static cache's positions by default: the GPU path's context window at most


class TargetRunner(Protocol):
    device: torch.device
    vocab_size: int
    context_window: int
    keeps_features: bool
    features: torch.Tensor | None

    def new_cache(self, capacity: int): ...

    def forward(self, input_ids: torch.Tensor, cache, keep: int, hidden_rows: int = 0,
                prefill: bool = False, cancel: threading.Event | None = None) -> torch.Tensor: ...

    def rollback(self, cache, keep: int) -> None: ...


@runtime_checkable
class ReadsAhead(Protocol):
    """A runner that reads a finished turn in the model's idle time, so that the chat's next prompt finds it read
    (LlamaCppRunner.read_ahead: its prompt reader's positions, not the decoding passes', are the ones a prompt
    reuses)."""

    def read_ahead(self, tokens: list[int]) -> None: ...


def runner_for(model: torch.nn.Module, keeps_features: bool = False, static_cache: bool | None = None,
               compile_steps: bool | None = None, tuned_head: bool | None = None, lean: bool | None = None,
               packed_weights: bool = True, warm_up: bool = True):
    """The runner for a transformers model. Each option None means "where it applies":
    - static_cache: on a GPU; compile_steps: with the static cache on a GPU (both: StaticCacheRunner; compiled steps
      need the static cache, a growing one would recompile every step). Compiled steps use inductor's CUDA graphs
      on a GPU and dynamo's tracing alone ("eager") elsewhere, and are compiled here unless not `warm_up`;
    - lean: without either of them, for plain Llama models (LeanRunner; its verification passes of 4-17 tokens
      multiply by MKL-packed weights when packed_weights, engine/backends/torch/packed.py);
    - otherwise TorchRunner;
    - tuned_head (None or True: where it applies, CPU float32 Llama-like models; False: never): engine/backends/torch/tuned_head.py."""
    device = next(model.parameters()).device
    on_gpu = device.type == "cuda"
    static = on_gpu if static_cache is None else static_cache
    compiled = compile_steps if compile_steps is not None else (on_gpu and static)
    if lean is None:
        lean = not static and not compiled and lean_forward_supported(model)
    head = tuned_head is None or bool(tuned_head)
    if lean:
        if static or compiled:
            raise ValueError("the lean forward keeps its own cache; the static cache and compiled steps are "
                             "transformers' forward")
        return LeanRunner(model, keeps_features, tuned_head=head, packed_weights=packed_weights)
    if compiled and not static:
        raise ValueError("compiled steps need the static cache (a growing cache recompiles every step)")
    if static:
        backend = (compile_backend(device) or "eager") if compiled else None
        runner = StaticCacheRunner(model, keeps_features, compile_backend=backend)
        if backend is not None and warm_up:
            runner.warm_up()
        return runner
    return TorchRunner(model, keeps_features, tuned_head=head)


class TorchRunner:
    """A transformers causal LM through transformers' forward over a growing cache (engine/backends/torch/kv_cache.py).

    The output head is the tuned one (engine/backends/torch/tuned_head.py) when `tuned_head` and it applies; it, and hidden states kept
    for a drafter, need the decoder's output, so then the passes run the decoder and the head apart; otherwise they
    are the model's own forward. Subclasses bring another cache and step forward through `new_cache` and
    `_forwards`; the chunked prefill, the output head and the rollback are this class's."""

    def __init__(self, target: torch.nn.Module, keeps_features: bool = False, tuned_head: bool = True):
        self.target = target
        self.device = next(target.parameters()).device
        self.context_window = getattr(target.config, "max_position_embeddings", None) or 1 << 30
        self.vocab_size = target.get_output_embeddings().weight.shape[0]
        self.keeps_features = keeps_features
        self.features: torch.Tensor | None = None
        self._cache_argument = cache_argument(target)
        self._head = tuned_head_for(target) if tuned_head else None
        self._output_head = self._head or target.get_output_embeddings()
        self._step_forward, self._prefill_forward = self._forwards()

    def _forwards(self) -> tuple[Callable, Callable]:
        """(the verification steps' forward, the prefill chunks' forward), chosen once."""
        if self._head is None and not self.keeps_features:
            return self._plain_forward, self._plain_forward
        self._decoder = self.target.get_decoder()
        return self._forward_through_decoder, (self._forward_through_decoder if self.keeps_features
                                               else self._plain_forward)

    def new_cache(self, capacity: int):
        return new_cache(self.target)

    def forward(self, input_ids: torch.Tensor, cache, keep: int, hidden_rows: int = 0,
                prefill: bool = False, cancel: threading.Event | None = None) -> torch.Tensor:
        """A prefill runs eagerly (compiled graphs cover the step lengths only), in passes of PREFILL_CHUNK tokens
        with `cancel` checked between them (PrefillCancelled); one with hidden_rows > keep is for a drafter that
        reads the context (only the prefill forward, the decoder's or the lean one, keeps more rows than it
        returns)."""
        if not prefill:
            return self._step_forward(input_ids, cache, keep)
        length = input_ids.shape[1]
        rows = max(keep, hidden_rows)
        kept_features = []
        for start in range(0, length, PREFILL_CHUNK):
            if start and cancel is not None and cancel.is_set():
                raise PrefillCancelled
            end = min(start + PREFILL_CHUNK, length)
            # The chunk's share of the wanted rows (the prompt's last `rows`); every chunk but the last wants one
            # row of logits, which is dropped: a pass needs an output.
            chunk_rows = max(0, min(end - start, end - (length - rows)))
            chunk_keep = keep if end == length else 1
            chunk = input_ids[:, start:end]
            if chunk_rows > chunk_keep:
                logits = self._prefill_forward(chunk, cache, chunk_keep, chunk_rows)
            else:
                logits = self._prefill_forward(chunk, cache, chunk_keep)
            if self.keeps_features and chunk_rows:
                kept_features.append(self.features[-chunk_rows:])
        if self.keeps_features and len(kept_features) > 1:
            self.features = torch.cat(kept_features)
        return logits

    def rollback(self, cache, keep: int) -> None:
        """Drops `cache`'s positions from `keep` on (kv_cache.rollback: the cache's length is its own)."""
        rollback(cache, keep)

    def _plain_forward(self, input_ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
        out = self.target(input_ids=input_ids, use_cache=True, logits_to_keep=keep, **{self._cache_argument: cache})
        return out.logits[0]

    def _forward_through_decoder(self, input_ids: torch.Tensor, cache, keep: int, hidden_rows: int = 0) -> torch.Tensor:
        out = self._decoder(input_ids=input_ids, use_cache=True, **{self._cache_argument: cache})
        return self._logits(out.last_hidden_state[0, -max(keep, hidden_rows):], keep)

    def _logits(self, hidden: torch.Tensor, keep: int) -> torch.Tensor:
        """The output head on the last `keep` hidden states; all of them are kept first when a drafter reads them."""
        if self.keeps_features:
            self._keep_features(hidden)
        return self._output_head(hidden[hidden.shape[0] - keep:])

    def _keep_features(self, hidden: torch.Tensor) -> None:
        self.features = hidden


class LeanRunner(TorchRunner):
    """engine/backends/torch/lean.py's forward over its own preallocated cache: the same numbers as transformers' with less
    bookkeeping per pass, for plain Llama models off the GPU. Its verification passes of 4-17 tokens multiply by
    MKL-packed weights when packed_weights (engine/backends/torch/packed.py)."""

    def __init__(self, target: torch.nn.Module, keeps_features: bool = False, tuned_head: bool = True,
                 packed_weights: bool = True):
        self._lean = LeanLlama(target, packed=packed_weights)
        super().__init__(target, keeps_features, tuned_head)

    def _forwards(self) -> tuple[Callable, Callable]:
        return self._forward_lean, self._forward_lean

    def new_cache(self, capacity: int) -> LeanCache:
        return self._lean.new_cache(capacity)  # room for the whole generation at once: it never grows

    def _forward_lean(self, input_ids: torch.Tensor, cache: LeanCache, keep: int, hidden_rows: int = 0) -> torch.Tensor:
        return self._logits(self._lean.hidden_states(input_ids[0], cache, max(keep, hidden_rows)), keep)


class StaticSlot:
    """The static runner's cache handle: how many positions of the runner's one static cache the reply holds. A
    reply's slot starts empty; rolling back is lowering `length` (engine/backends/torch/static_steps.py says why that is exact)."""

    def __init__(self) -> None:
        self.length = 0

    def get_seq_length(self) -> int:
        return self.length


class StaticCacheRunner:
    """The GPU path: transformers' forward over one static KV cache made at load and reused by every reply, at
    explicit positions, its verification passes padded to a few lengths and compiled at load (static_steps.py).
    The host waits for nothing here: inputs are device tensors, logits stay on the device.

    `compile_backend`: torch.compile's backend for the step lengths ("inductor": CUDA graphs on a GPU; "eager": the
    same tracing without code generation, for checks on the CPU; None: eager passes). `capacity`: positions the
    cache holds (the context window, capped so that an 8B model's 128k window does not take 16 GiB)."""

    def __init__(self, target: torch.nn.Module, keeps_features: bool = False, compile_backend: str | None = None,
                 capacity: int = STATIC_CACHE_TOKENS, k_max: int = 16):
        self.target = target
        self.device = next(target.parameters()).device
        window = getattr(target.config, "max_position_embeddings", None) or 1 << 30
        self.context_window = min(window, capacity)
        self.vocab_size = target.get_output_embeddings().weight.shape[0]
        self.keeps_features = keeps_features
        self.features: torch.Tensor | None = None
        self._passes = StaticPasses(target, self.context_window + k_max + 1, verification_buckets(k_max),
                                    compile_backend, features=self._keep_features if keeps_features else None)
        self.buckets = self._passes.buckets
        self.max_pass_rows = self.buckets[-1]  # the longest compiled verification: the engine caps K below it
        self.compile_backend = compile_backend

    def warm_up(self) -> None:
        """Compiles every verification length now (while loading), so that no reply compiles."""
        self._passes.warm_up()

    def new_cache(self, capacity: int) -> StaticSlot:
        if capacity > self._passes.capacity:
            raise ValueError(f"{capacity} positions do not fit the static cache's {self._passes.capacity}")
        return StaticSlot()

    def forward(self, input_ids: torch.Tensor, cache: StaticSlot, keep: int, hidden_rows: int = 0,
                prefill: bool = False, cancel: threading.Event | None = None) -> torch.Tensor:
        """A pass over input_ids [1, n] (on the device) after the slot's positions; a prefill runs in chunks of
        PREFILL_CHUNK with `cancel` checked between them. Returns logits [keep, vocab], on the device."""
        ids = input_ids[0]
        if not prefill:
            logits = self._passes.run(ids, cache.length, keep)
            cache.length += ids.shape[0]
            return logits
        rows = max(keep, hidden_rows)
        kept = []
        for start in range(0, ids.shape[0], PREFILL_CHUNK):
            if start and cancel is not None and cancel.is_set():
                raise PrefillCancelled
            chunk = ids[start: start + PREFILL_CHUNK]
            last = start + chunk.shape[0] == ids.shape[0]
            logits = self._passes.run(chunk, cache.length, min(keep, chunk.shape[0]) if last else 1)
            cache.length += chunk.shape[0]
            if self.keeps_features:
                kept.append(self.features)
        if self.keeps_features:
            self.features = torch.cat(kept)[-rows:] if len(kept) > 1 else self.features[-rows:]
        return logits

    def rollback(self, cache: StaticSlot, keep: int) -> None:
        """Lowers the slot's length to `keep`: the positions past it are overwritten by the next pass."""
        cache.length = min(cache.length, keep)

    def _keep_features(self, hidden: torch.Tensor) -> None:
        self.features = hidden
