"""The race's saved comparisons (one prompt, plain decoding and the drafters side by side, with a run per lane), as
the race window lists, reopens, deletes and saves them. No Qt: the race window (ui/race/) reaches its rows through
here, never the Store itself.

Every method is one unit of work on the Store and raises StorageError when the database refuses it or the
comparison is gone."""

from __future__ import annotations

from typing import Any

from ..storage.records import ComparisonInfo, RunRecord


class Comparisons:
    """The saved comparisons in a Store (store)."""

    def __init__(self, store):
        self.store = store

    def find(self, limit: int | None = None) -> list[ComparisonInfo]:
        """The saved comparisons, newest first (at most `limit`), without their lanes."""
        return self.store.list_comparisons(limit)

    def get(self, comparison_id: int) -> ComparisonInfo:
        """One saved comparison with its lanes (TrackRecords), for a replay."""
        return self.store.comparison(comparison_id)

    def delete(self, comparison_id: int) -> bool:
        """Deletes the comparison with its lanes and their runs; False when it was already gone."""
        return self.store.delete_comparison(comparison_id)

    def save(self, comparison: dict[str, Any], tracks: list[dict[str, Any]], runs: list[RunRecord]) -> int:
        """Stores a finished race: the comparison's columns, its lanes (storage.records.track_row each) and one run
        per lane (stored with source "race"), in one transaction; returns its id."""
        return self.store.save_comparison(comparison, tracks, runs)
