"""KV-cache helpers shared by the target loop and the draft model.

Rolling back rejected drafts needs every layer of a cache to drop its last positions and be, after that, what it
would have been had they never been written. transformers' sliding-window layers cannot: once a sequence outgrows
the window they evict the positions before it (DynamicSlidingWindowLayer raises on crop; StaticSlidingWindowLayer
rolls its buffer and crops into the wrong positions, silently). So the caches made here keep every position in
sliding-window layers too; transformers builds the sliding-window mask from absolute positions (masking_utils:
`kv_idx > q_idx - sliding_window`), so a layer that holds more than the window attends to exactly the same keys.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, StaticLayer, StaticSlidingWindowLayer


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


def new_cache(model, capacity: int = 512) -> DynamicCache:
    """A DynamicCache for `model` whose full-attention layers are PreallocatedLayers and whose sliding-window ones
    are PreallocatedWindowLayers (every position kept, so rollback() works past the window); other special layers
    (linear attention, hybrids) are left as transformers made them. `capacity`: positions allocated at first."""
    cache = DynamicCache(config=model.config)
    cache.layers = [_growing_layer(layer, capacity) for layer in cache.layers]
    return cache


def _growing_layer(layer, capacity: int):
    """The layer new_cache uses in place of transformers' `layer`: ours for its plain full-attention and
    sliding-window layers (exact types: their subclasses, e.g. hybrids with linear attention, keep state of their
    own), else `layer` itself."""
    if type(layer) is DynamicLayer:
        return PreallocatedLayer(capacity)
    if type(layer) is DynamicSlidingWindowLayer:
        return PreallocatedWindowLayer(layer.sliding_window, capacity)
    return layer


def cache_argument(model) -> str:
    """The forward() keyword for the KV cache: `cache` in transformers 5.24+, `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def new_static_cache(model, max_length: int):
    """transformers' StaticCache for `model`, every attention layer a StaticLayer of `max_length` positions: fixed
    buffers written in place, so that a compiled forward (CUDA graphs) sees the same addresses every step.

    Sliding-window layers are full-length StaticLayers too (transformers' StaticSlidingWindowLayer holds only the
    window and rolls it, so a rollback past the window leaves it wrong); the sliding-window mask, built from
    absolute positions, keeps their attention to the window. So every layer rolls back alike, by its length counter
    alone: the stale entries past it are overwritten by the next pass and, until then, hidden by the causal mask (a
    query at position p attends to cached positions <= p only).

    A pass writes at the layers' counter and its mask puts its first query there, whatever `cache_position` or
    `position_ids` the forward is given (transformers 5.17 and 5.24 read neither for that): a caller that chooses
    positions itself moves the counter first, with seek()."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=max_length)
    cache.layers = [StaticLayer(max_cache_len=max_length) if type(layer) is StaticSlidingWindowLayer else layer
                    for layer in cache.layers]
    return cache


def seek(cache, position: int | torch.Tensor) -> None:
    """Sets every layer of a static cache (new_static_cache) to hold `position` positions: the next pass writes its
    tokens at position.. and its queries attend to positions before theirs. Rolling back (a lower position) or
    starting over (0) alike; positions past it stay in the buffers, unread, until overwritten. `position`: an int,
    or a 0-d integer tensor on the cache's device (copied there without the host waiting for it)."""
    for layer in cache.layers:
        counter = getattr(layer, "cumulative_length", None)
        if not isinstance(counter, torch.Tensor):
            raise TypeError(f"seek() moves static layers' counters; {type(layer).__name__} has none")
        if isinstance(position, torch.Tensor):
            counter.copy_(position)
        else:
            counter.fill_(position)


def rollback(cache, keep: int, length: int | None = None) -> None:
    """Drop every cached position from `keep` on (the rejected draft tokens), without re-running the prefix.

    `length`: the cache's current length if the caller knows it; a StaticCache keeps its length in a device tensor,
    and reading it would make the host wait for the GPU at every step. A negative argument to crop() removes that
    many positions; it means the same in transformers 4.x and 5.x, for dynamic and static caches (the caches made
    here roll back so on every layer, sliding-window ones included).
    """
    excess = (length if length is not None else int(cache.get_seq_length())) - keep
    if excess > 0:
        cache.crop(-excess)
