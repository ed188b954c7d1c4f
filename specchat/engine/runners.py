"""How the engine runs the target: one interface, a runner per backend.

The speculative loop needs four things of the target and nothing else, so it never branches on the backend:
- `new_cache(capacity)`: an empty KV cache with room for that many positions;
- `forward(input_ids, cache, keep, hidden_rows=0, prefill=False)`: one pass over the new tokens (the prompt, or
  [last token, x_1..x_K]), returning logits [keep, vocab] of the last `keep` positions; the cache grows by the
  input's length. A runner that `keeps_features` also leaves the last max(keep, hidden_rows) final-norm hidden
  states in `features`, for a draft head;
- `rollback(cache, keep, length)`: drop every cached position from `keep` on (rejected drafts);
- `vocab_size`, `context_window`, `device`.

Runners: `TorchRunner` (a transformers model: transformers' forward, engine/lean.py's lean forward, or CUDA-graph
compiled steps over a static cache, chosen once from the model and device) and `LlamaCppRunner` (a GGUF file on
llama.cpp's own kernels, engine/llamacpp.py).
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol

import torch

from .cache import cache_argument, new_cache, new_static_cache, rollback
from .errors import PrefillCancelled
from .head import tuned_head_for
from .lean import LeanCache, LeanLlama, lean_runner_supported


PREFILL_CHUNK = 512  # prompt tokens per prefill pass: a Stop is heard between passes (about a second apart on a CPU)


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


class TorchRunner:
    """A transformers causal LM. The forward path is chosen once:
    - on a GPU (static_cache / compile_steps None = on for CUDA): a static KV cache, whose buffers keep fixed
      addresses, and the verification forward (1..K+1 tokens) compiled with CUDA graphs, one graph per input
      length; the prefill (any prompt length) stays eager;
    - off it, for plain Llama models (lean None = where it applies): engine/lean.py's forward over its own
      preallocated cache, the same numbers as transformers' with less bookkeeping per pass; its verification passes
      of 4-17 tokens multiply by MKL-packed weights when packed_weights (engine/packed.py);
    - otherwise transformers' forward; through the decoder and the tuned output head (tuned_head None = where it
      applies, CPU float32 Llama-like models) when that head applies or hidden states are kept."""

    def __init__(self, target: torch.nn.Module, keeps_features: bool = False, static_cache: bool | None = None,
                 compile_steps: bool | None = None, tuned_head: bool | None = None, lean: bool | None = None,
                 packed_weights: bool = True):
        self.target = target
        self.device = next(target.parameters()).device
        self.context_window = getattr(target.config, "max_position_embeddings", None) or 1 << 30
        self.vocab_size = target.get_output_embeddings().weight.shape[0]
        self.keeps_features = keeps_features
        self.features: torch.Tensor | None = None
        self._cache_argument = cache_argument(target)
        on_gpu = self.device.type == "cuda"
        self.static_cache = on_gpu if static_cache is None else static_cache
        self._head = tuned_head_for(target) if tuned_head is None or tuned_head else None
        self._step_forward = self._prefill_forward = self._plain_forward
        compiled = compile_steps if compile_steps is not None else (on_gpu and self.static_cache)
        if lean is None:
            lean = not self.static_cache and not compiled and lean_runner_supported(target)
        self._lean = LeanLlama(target, packed=packed_weights) if lean else None
        if self._lean is not None:
            if self.static_cache or compiled:
                raise ValueError("the lean forward keeps its own cache; the static cache and compiled steps are "
                                 "transformers' forward")
            self._output_head = self._head or target.get_output_embeddings()
            self._step_forward = self._prefill_forward = self._forward_lean
        elif self._head is not None or keeps_features:
            self._decoder = target.get_decoder()
            self._output_head = self._head or target.get_output_embeddings()
            self._step_forward = self._forward_through_decoder
            if keeps_features:
                self._prefill_forward = self._forward_through_decoder
        if compiled:
            if not self.static_cache:
                raise ValueError("compiled steps need the static cache (a growing cache recompiles every step)")
            self._step_forward = compile_forward(target, self._keep_features if keeps_features else None)

    def new_cache(self, capacity: int):
        if self._lean is not None:  # room for the whole generation at once: it never grows
            return self._lean.new_cache(capacity)
        if not self.static_cache:
            return new_cache(self.target)
        # Rounded up so that replies of similar length share compiled graphs' cache shapes.
        return new_static_cache(self.target, min(-(-capacity // 256) * 256, self.context_window + 17))

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

    def _forward_through_decoder(self, input_ids: torch.Tensor, cache, keep: int, hidden_rows: int = 0) -> torch.Tensor:
        out = self._decoder(input_ids=input_ids, use_cache=True, **{self._cache_argument: cache})
        return self._logits(out.last_hidden_state[0, -max(keep, hidden_rows):], keep)

    def _forward_lean(self, input_ids: torch.Tensor, cache: LeanCache, keep: int, hidden_rows: int = 0) -> torch.Tensor:
        return self._logits(self._lean.hidden_states(input_ids[0], cache, max(keep, hidden_rows)), keep)

    def _logits(self, hidden: torch.Tensor, keep: int) -> torch.Tensor:
        """The output head on the last `keep` hidden states; all of them are kept first when a drafter reads them."""
        if self.keeps_features:
            self._keep_features(hidden)
        return self._output_head(hidden[hidden.shape[0] - keep:])

    def _keep_features(self, hidden: torch.Tensor) -> None:
        self.features = hidden

    def _plain_forward(self, input_ids: torch.Tensor, cache, keep: int) -> torch.Tensor:
        out = self.target(input_ids=input_ids, use_cache=True, logits_to_keep=keep, **{self._cache_argument: cache})
        return out.logits[0]


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
