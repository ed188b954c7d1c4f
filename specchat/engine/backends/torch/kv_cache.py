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

# transformers is imported by the functions that make a cache, not here: a model on llama.cpp imports this module
# (engine/decoding imports runners.py) but never makes a torch cache. Its layers are growing_layers.py's.


def new_cache(model, capacity: int = 512):
    """A DynamicCache for `model` whose full-attention layers are PreallocatedLayers and whose sliding-window ones
    are PreallocatedWindowLayers (every position kept, so rollback() works past the window); other special layers
    (linear attention, hybrids) are left as transformers made them. `capacity`: positions allocated at first."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    cache.layers = [_growing_layer(layer, capacity) for layer in cache.layers]
    return cache


def _growing_layer(layer, capacity: int):
    """The layer new_cache uses in place of transformers' `layer`: ours for its plain full-attention and
    sliding-window layers (exact types: their subclasses, e.g. hybrids with linear attention, keep state of their
    own), else `layer` itself."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    from .growing_layers import PreallocatedLayer, PreallocatedWindowLayer

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
    from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer

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


def rollback(cache, keep: int) -> None:
    """Drop every cached position from `keep` on (the rejected draft tokens), without re-running the prefix.

    `cache`: new_cache's (its length is its layers' own, read without a wait), a LeanCache, or a static cache (its
    length is a device tensor, which the host waits for: the GPU path rolls back with seek() or a StaticSlot
    instead). A negative argument to crop() removes that many positions; it means the same in transformers 4.x and
    5.x, for dynamic and static caches (the caches made here roll back so on every layer, sliding-window ones
    included).
    """
    excess = int(cache.get_seq_length()) - keep
    if excess > 0:
        cache.crop(-excess)
