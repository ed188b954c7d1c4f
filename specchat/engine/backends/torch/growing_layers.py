"""The growing KV-cache layers of kv_cache.new_cache: full-attention and sliding-window layers that write into a
buffer with spare room and roll back by a view change (kv_cache.py says why transformers' own layers cannot).

Apart from kv_cache.py because they subclass transformers' cache layers: importing them imports transformers
(a second or more), which a model on llama.cpp never needs; kv_cache imports this module only when a cache is
made for a torch model.
"""

from __future__ import annotations

import torch
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


class PreallocatedWindowLayer(PreallocatedLayer):
    """A sliding-window cache layer that keeps every position, so that rolling back is a view change however long
    the sequence (transformers' DynamicSlidingWindowLayer keeps only the last window - 1 and cannot roll back past
    them). Attention still reads only the window: update() returns, and get_mask_sizes() describes, the positions
    [max(past - window + 1, 0), past + new), as DynamicSlidingWindowLayer does, so a pass costs and computes what it
    costs and computes on transformers' own layer. The price is memory: a window layer holds the whole sequence,
    as a full-attention layer does."""

    is_sliding = True

    def __init__(self, sliding_window: int, capacity: int = 512, **kwargs):
        super().__init__(capacity, **kwargs)
        self.sliding_window = sliding_window

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Writes the new positions after the held ones; returns the keys and values a query among them may see."""
        first = self._window_start(self.get_seq_length())
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        return keys[..., first:, :], values[..., first:, :]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(kv_length, kv_offset) of the keys the next update returns for `query_length` new positions: the mask
        is built over exactly those, at their absolute positions."""
        past = self.get_seq_length()
        first = self._window_start(past)
        return past + query_length - first, first

    def get_max_length(self) -> int:
        return -1  # it grows with the sequence, as a full-attention layer does

    def _window_start(self, past: int) -> int:
        """The first position a query after `past` held positions can see: the oldest of the last window - 1."""
        return max(past - self.sliding_window + 1, 0)
