"""How the engine runs the target: one interface, a runner per backend and forward path.

The speculative loop needs four things of the target and nothing else, so it never branches on the backend:
- `new_cache(capacity)`: an empty KV cache with room for that many positions;
- `forward(input_ids, cache, keep, hidden_rows=0, prefill=False, cancel=None)`: one pass over the new tokens (the
  prompt, or [last token, x_1..x_K]), returning logits [keep, vocab] of the last `keep` positions; the cache grows
  by the input's length. A prefill runs in chunks of PREFILL_CHUNK tokens, with `cancel` checked between them
  (PrefillCancelled). A runner that `keeps_features` also leaves the last max(keep, hidden_rows) final-norm hidden
  states in `features`, for a draft head;
- `rollback(cache, keep, length)`: drop every cached position from `keep` on (rejected drafts);
- `vocab_size`, `context_window`, `device`.

`runner_for(model, keeps_features, **options)` is the one place that chooses a transformers model's runner, once,
from the model, the device and the options (static_cache, compile_steps, tuned_head, lean, packed_weights):
- `TorchRunner`: transformers' forward over a growing cache (through the decoder and the tuned output head when
  that head applies or hidden states are kept). It holds what every torch path shares: the chunked prefill, the
  output head, the kept hidden states, the rollback;
- `LeanRunner`: engine/lean.py's forward over its own preallocated cache, for plain Llama models off the GPU;
- `StaticCacheRunner`: transformers' forward over a static cache, its verification steps compiled with CUDA graphs
  (the GPU path).
A GGUF file runs on llama.cpp's own kernels through `LlamaCppRunner` (engine/llamacpp.py), with the same interface.
"Runner" names these, the target's forward paths, only: a draft model runs on a draft backend (drafting/backends.py).
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol

import torch

from .cache import cache_argument, new_cache, new_static_cache, rollback
from .errors import PrefillCancelled
from .head import tuned_head_for
from .lean import LeanCache, LeanLlama, lean_forward_supported


PREFILL_CHUNK = 512  # prompt tokens per prefill pass: a Stop is heard between passes, so a long prompt can be stopped


class TargetRunner(Protocol):
    device: torch.device
    vocab_size: int
    context_window: int
    keeps_features: bool
    features: torch.Tensor | None

    def new_cache(self, capacity: int): ...

    def forward(self, input_ids: torch.Tensor, cache, keep: int, hidden_rows: int = 0,
                prefill: bool = False, cancel: threading.Event | None = None) -> torch.Tensor: ...

    def rollback(self, cache, keep: int, length: int | None = None) -> None: ...


def runner_for(model: torch.nn.Module, keeps_features: bool = False, static_cache: bool | None = None,
               compile_steps: bool | None = None, tuned_head: bool | None = None, lean: bool | None = None,
               packed_weights: bool = True) -> TorchRunner:
    """The runner for a transformers model. Each option None means "where it applies":
    - static_cache: on a GPU; compile_steps: with the static cache on a GPU (both: StaticCacheRunner; compiled steps
      need the static cache, a growing one would recompile every step);
    - lean: without either of them, for plain Llama models (LeanRunner; its verification passes of 4-17 tokens
      multiply by MKL-packed weights when packed_weights, engine/packed.py);
    - otherwise TorchRunner;
    - tuned_head (None or True: where it applies, CPU float32 Llama-like models; False: never): engine/head.py."""
    on_gpu = next(model.parameters()).device.type == "cuda"
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
        return StaticCacheRunner(model, keeps_features, tuned_head=head, compile_steps=compiled)
    return TorchRunner(model, keeps_features, tuned_head=head)


class TorchRunner:
    """A transformers causal LM through transformers' forward over a growing cache (engine/cache.py).

    The output head is the tuned one (engine/head.py) when `tuned_head` and it applies; it, and hidden states kept
    for a drafter, need the decoder's output, so then the passes run the decoder and the head apart; otherwise they
    are the model's own forward. Subclasses bring another cache and step forward through `new_cache` and
    `_forwards`; the chunked prefill, the output head and the rollback are this class's."""

    static_cache = False  # a growing cache; StaticCacheRunner's has fixed buffer addresses
    _lean: LeanLlama | None = None  # LeanRunner's forward

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

    def rollback(self, cache, keep: int, length: int | None = None) -> None:
        rollback(cache, keep, length=length)

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
    """engine/lean.py's forward over its own preallocated cache: the same numbers as transformers' with less
    bookkeeping per pass, for plain Llama models off the GPU. Its verification passes of 4-17 tokens multiply by
    MKL-packed weights when packed_weights (engine/packed.py)."""

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


class StaticCacheRunner(TorchRunner):
    """transformers' forward over a static KV cache, whose buffers keep fixed addresses. With compile_steps the
    verification forward (1..K+1 tokens) is compiled with CUDA graphs, one graph per input length (compile_forward);
    the prefill, of any length, stays eager."""

    static_cache = True

    def __init__(self, target: torch.nn.Module, keeps_features: bool = False, tuned_head: bool = True,
                 compile_steps: bool = False):
        self._compile_steps = compile_steps
        super().__init__(target, keeps_features, tuned_head)

    def _forwards(self) -> tuple[Callable, Callable]:
        step, prefill = super()._forwards()
        if self._compile_steps:
            step = compile_forward(self.target, self._keep_features if self.keeps_features else None)
        return step, prefill

    def new_cache(self, capacity: int):
        # Rounded up so that replies of similar length share compiled graphs' cache shapes.
        return new_static_cache(self.target, min(-(-capacity // 256) * 256, self.context_window + 17))


def compile_forward(model: torch.nn.Module, keep_features: Callable[[torch.Tensor], None] | None = None):
    """The target's step forward compiled with CUDA graphs ("reduce-overhead"): input lengths 1..K+1 each get a
    graph, replayed without per-kernel launch costs. Needs a static cache (fixed buffer addresses). keep_features:
    the decoder is compiled instead, its last hidden states (copied) go to this callback, and the output head runs
    eagerly."""
    argument = cache_argument(model)
    if keep_features is not None:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        compiled_decoder = torch.compile(decoder.forward, mode="reduce-overhead", fullgraph=False, dynamic=False)

        def forward_keeping_features(input_ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
            out = compiled_decoder(input_ids=input_ids, use_cache=True, **{argument: cache})
            hidden = out.last_hidden_state[0, -keep:].clone()  # graph outputs are overwritten by the next replay
            keep_features(hidden)
            return head(hidden)

        return forward_keeping_features
    compiled = torch.compile(model.forward, mode="reduce-overhead", fullgraph=False, dynamic=False)

    def forward(input_ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
        out = compiled(input_ids=input_ids, use_cache=True, logits_to_keep=keep, **{argument: cache})
        return out.logits[0].clone()  # graph outputs are overwritten by the next replay

    return forward
