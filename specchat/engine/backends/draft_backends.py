"""Where a draft model runs (its backend): its own llama.cpp context for a GGUF file, else torch, through the lean
Llama forward or transformers'.

A draft model is called token by token between target passes, so what it costs per token decides whether drafting
pays. A GGUF draft on llama.cpp runs on its quantized weights (a fraction of the bytes a float32 copy on torch
reads per token), in a context of its own beside the target's, on the same threads (the two never run at once).

Every backend offers one small interface to the drafters (model.py, universal.py): `reset()`, `length`,
`crop(keep)` and `forward(tokens) -> logits of the last position` (and, on the lean forward only,
`keep_output_rows(ids)`: can_cut_output_rows); plus what a drafter needs to know of the model: `device`,
`vocab_rows` (its output rows), `window` (its context) and `stop_ids`. ("Runner" is kept for the target's forward
paths, engine/backends/torch/runners.py; the llama.cpp backend drives one of those, a LlamaCppRunner, over its own context.)
"""

from __future__ import annotations

import weakref
from typing import Sequence

import torch

from .llamacpp.llama_runner import CONTEXT_STEP, LlamaCppModel
from .torch.host_syncs import HostToDevice
from .torch.kv_cache import cache_argument, new_cache, rollback
from .torch.lean import LeanDraftForward, lean_forward_supported
from .torch.runners import STATIC_CACHE_TOKENS
from .torch.static_steps import StaticPasses, compile_backend as default_compile_backend, verification_buckets


class LlamaCppDraftBackend:
    """A GGUF draft model on llama.cpp, with rollback: `crop(keep)` drops the positions from `keep` on, so the next
    forward gives the logits a fresh run over the kept tokens would (llama.cpp's rows do not depend on how the
    tokens were batched: engine/backends/llamacpp/llama_runner.py)."""

    device = torch.device("cpu")

    def __init__(self, model: LlamaCppModel):
        self.model = model
        self._runner = model.runner()  # llama.cpp's forward path (engine/backends/llamacpp/llama_runner.py), over this draft's context
        self._cache = self._runner.new_cache(CONTEXT_STEP)
        self.vocab_rows = model.vocab_size
        self.window = model.context_window
        self.stop_ids = frozenset({model.eos_token_id} - {-1})

    def reset(self) -> None:
        """An empty cache; the positions of the previous generation stay until the next prefill reuses their
        common prefix (the system prompt, earlier turns), as the target's runner does."""
        self._cache = self._runner.new_cache(CONTEXT_STEP)

    @property
    def length(self) -> int:
        return self._cache.length

    def crop(self, keep: int) -> None:
        self._runner.rollback(self._cache, keep)

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        tokens = list(tokens)
        self._make_room(len(tokens))
        logits = self._runner.forward(torch.tensor([tokens]), self._cache, keep=1,
                                      prefill=self._cache.length == 0)[0]
        return logits

    def _make_room(self, extra: int) -> None:
        """Grows the context when the cache would overflow it; the larger one takes the held positions over as they
        are (LlamaCppRunner._make_context)."""
        needed = self._cache.length + extra
        if needed <= self._runner._n_ctx:
            return
        length = self._cache.length
        self._cache = self._runner.new_cache(min(needed + CONTEXT_STEP, self.window))
        self._cache.length = length


class TorchDraftBackend:
    """A torch draft model: on a GPU (or with `static`) over one static cache with compiled steps, its tokens kept
    on the device (StaticDraftForward, `device_resident`); elsewhere through the lean Llama forward where it applies,
    else transformers' forward."""

    def __init__(self, model: torch.nn.Module, lean: bool | None = None, static: bool | None = None,
                 compile_backend: str | None = "auto"):
        self.model = model
        self.device = next(model.parameters()).device
        self.device_resident = self.device.type == "cuda" if static is None else static
        self.lean = not self.device_resident and (lean_forward_supported(model) if lean is None else lean)
        if self.device_resident:
            backend = default_compile_backend(self.device) if compile_backend == "auto" else compile_backend
            self._forward_path = StaticDraftForward(model, backend)
        else:
            self._forward_path = LeanDraftForward(model) if self.lean else TransformersDraftForward(model)
        self.vocab_rows = model.get_output_embeddings().weight.shape[0]
        self.window = getattr(getattr(model, "config", None), "max_position_embeddings", None) or 1 << 30
        if self.device_resident:  # its static cache's positions
            self.window = min(self.window, STATIC_CACHE_TOKENS)
        self.stop_ids = _configured_eos(model)

    def reset(self) -> None:
        self._forward_path.reset()

    @property
    def length(self) -> int:
        return self._forward_path.length

    def keep_output_rows(self, ids: torch.Tensor) -> None:
        self._forward_path.keep_output_rows(ids)

    def crop(self, keep: int) -> None:
        self._forward_path.crop(keep)

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        return self._forward_path.forward(tokens)

    def forward_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """forward() for ids already on the device (device_resident only): a drafted token fed back unread."""
        return self._forward_path.forward_ids(ids)


def draft_backend(model, lean: bool | None = None, static: bool | None = None, compile_backend: str | None = "auto"):
    """The backend for a draft `model`: a LlamaCppModel (a GGUF draft on llama.cpp) or a torch module (`static`,
    `compile_backend`: TorchDraftBackend's)."""
    if isinstance(model, LlamaCppModel):
        return LlamaCppDraftBackend(model)
    return TorchDraftBackend(model, lean, static, compile_backend)


def can_cut_output_rows(backend) -> bool:
    """Whether proposing from a proposal vocabulary saves work on this backend (the lean forward computes only
    those rows of the output head); elsewhere the whole vocabulary is proposed from."""
    return isinstance(backend, TorchDraftBackend) and backend.lean


def _configured_eos(model) -> frozenset[int]:
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        return frozenset({configured})
    return frozenset(configured or ())


class TransformersDraftForward:
    """A draft model (any causal LM) through transformers' forward, with a preallocated cache cropped on rejection:
    forward(tokens) appends tokens to its one cached sequence and returns the logits after the last one."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.device = next(model.parameters()).device
        self._cache_argument = cache_argument(model)
        self._cache = None

    def reset(self) -> None:
        self._cache = new_cache(self.model)

    @property
    def length(self) -> int:
        return self._cache.get_seq_length()

    def crop(self, keep: int) -> None:
        rollback(self._cache, keep)

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        ids = torch.tensor([list(tokens)], device=self.device)
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1, **{self._cache_argument: self._cache})
        return out.logits[0, -1]


class StaticDraftForward:
    """A draft model on a GPU: transformers' forward over one static cache (shared by every drafter of the same
    model: they never run at once, and each tracks its own length), its steps compiled at load for the same lengths
    as a verification (engine/backends/torch/static_steps.py). forward_ids takes the drafted token as the device tensor it is, so
    drafting K tokens queues K passes and waits for none of them."""

    # A step feeds the last drafted token; a catch-up feeds the target's one or two tokens, or after steps the draft
    # sat out (a free proposal, K = 0) more, in chunks of the longest length: no pass inside a reply runs eagerly.
    STEP_LENGTHS = verification_buckets(16)

    def __init__(self, model: torch.nn.Module, compile_backend: str | None):
        self.model = model
        self.device = next(model.parameters()).device
        self._passes = _shared_passes(model, compile_backend, self.STEP_LENGTHS)
        self._stage = HostToDevice(self.device)
        self.length = 0

    def reset(self) -> None:
        self.length = 0

    def crop(self, keep: int) -> None:
        self.length = min(self.length, keep)

    def keep_output_rows(self, ids: torch.Tensor) -> None:
        raise TypeError("the static draft forward computes the whole output head")

    def forward(self, tokens: Sequence[int]) -> torch.Tensor:
        """Logits [vocab] after host `tokens`: a prompt (nothing cached yet) in eager chunks, else as forward_ids."""
        ids = self._stage.tokens(tokens)
        if self.length == 0:
            logits = self._passes.run(ids, 0, 1)[0]
            self.length = ids.shape[0]
            return logits
        return self.forward_ids(ids)

    def forward_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits [vocab] after `ids` (1-D, on the device), fed after the cached positions through compiled
        lengths only."""
        longest = self._passes.buckets[-1]
        for start in range(0, ids.shape[0], longest):
            chunk = ids[start: start + longest]
            logits = self._passes.run(chunk, self.length, 1)[0]
            self.length += chunk.shape[0]
        return logits


_PASSES: "weakref.WeakKeyDictionary[torch.nn.Module, StaticPasses]" = weakref.WeakKeyDictionary()


def _shared_passes(model: torch.nn.Module, compile_backend: str | None, lengths: tuple[int, ...]) -> StaticPasses:
    """The one StaticPasses of a draft model (its static cache and compiled steps), made and warmed up on first
    use, which is while the engine is built: a reply never compiles."""
    passes = _PASSES.get(model)
    if passes is None or passes.backend != compile_backend:
        passes = StaticPasses(model, STATIC_CACHE_TOKENS + 40, lengths, compile_backend)  # the target's + drafts
        passes.warm_up()
        _PASSES[model] = passes
    return passes
