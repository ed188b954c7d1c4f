"""KV-cache helpers shared by the target loop and the draft model."""

from __future__ import annotations

from transformers import DynamicCache


def new_cache(model) -> DynamicCache:
    return DynamicCache(config=model.config)


def rollback(cache: DynamicCache, keep: int) -> None:
    """Drop every cached position from `keep` on (the rejected draft tokens), without re-running the prefix.

    A negative argument to crop() removes that many positions; it means the same in transformers 4.x and 5.x.
    """
    excess = cache.get_seq_length() - keep
    if excess > 0:
        cache.crop(-excess)
