"""KV-cache helpers shared by the target loop and the draft model."""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A full-attention cache layer that writes into a buffer with spare room instead of concatenating.

    transformers' DynamicLayer copies the whole cache at every step (torch.cat); with spare capacity a step only
    writes its own new positions, and rolling back rejected draft tokens is a view change. Capacity doubles when
    full, so copies are amortised O(1) per token.
    """

    def __init__(self, capacity: int = 512, **kwargs):
        super().__init__(**kwargs)
        self._capacity = capacity
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._key_buffer = self._allocate(key_states, max(self._capacity, key_states.shape[-2]))
            self._value_buffer = self._allocate(value_states, self._key_buffer.shape[-2])
        length = self.get_seq_length()
        needed = length + key_states.shape[-2]
        if needed > self._key_buffer.shape[-2]:
            self._grow(max(needed, 2 * self._key_buffer.shape[-2]), length)
        self._key_buffer[..., length:needed, :] = key_states
        self._value_buffer[..., length:needed, :] = value_states
        self.keys = self._key_buffer[..., :needed, :]
        self.values = self._value_buffer[..., :needed, :]
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove >= 0 or not self.is_initialized:
            super().crop(tokens_to_remove)
            return
        keep = max(self.get_seq_length() + tokens_to_remove, 0)
        self.keys = self._key_buffer[..., :keep, :]
        self.values = self._value_buffer[..., :keep, :]

    @staticmethod
    def _allocate(like: torch.Tensor, capacity: int) -> torch.Tensor:
        shape = (*like.shape[:-2], capacity, like.shape[-1])
        return torch.empty(shape, dtype=like.dtype, device=like.device)

    def _grow(self, capacity: int, length: int) -> None:
        for name in ("_key_buffer", "_value_buffer"):
            old = getattr(self, name)
            new = self._allocate(old, capacity)
            new[..., :length, :] = old[..., :length, :]
            setattr(self, name, new)


def new_cache(model, capacity: int = 512) -> DynamicCache:
    """A DynamicCache whose full-attention layers are preallocated (sliding-window and other special layers are
    left as transformers made them)."""
    cache = DynamicCache(config=model.config)
    cache.layers = [PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def cache_argument(model) -> str:
    """The forward() keyword for the KV cache: `cache` in transformers 5.24+, `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def new_static_cache(model, max_length: int):
    """transformers' StaticCache: fixed buffers of `max_length` positions, written in place, so that a compiled
    forward (CUDA graphs) sees the same addresses every step. Rolling back only moves its length counter back; the
    stale entries past it are overwritten by the next step and, until then, hidden by the causal mask (a query at
    position p attends to cached positions <= p only)."""
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=max_length)


def rollback(cache, keep: int, length: int | None = None) -> None:
    """Drop every cached position from `keep` on (the rejected draft tokens), without re-running the prefix.

    `length`: the cache's current length if the caller knows it; a StaticCache keeps its length in a device tensor,
    and reading it would make the host wait for the GPU at every step. A negative argument to crop() removes that
    many positions; it means the same in transformers 4.x and 5.x, for dynamic and static caches.
    """
    excess = (length if length is not None else int(cache.get_seq_length())) - keep
    if excess > 0:
        cache.crop(-excess)
