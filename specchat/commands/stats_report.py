"""`specchat stats`: the database's runs summed per app session and per model pair, as a table or JSON. It reads
SQLite only (no torch, no transformers), so it starts at once."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import StorageError
from ..storage import Store, default_database_path, open_database
from ..storage.records import RunFilter

STATS_GROUPS = (("app_session", "Per app session"), ("pair", "Per model pair and drafter"))


def print_stats(db: Path | None, as_json: bool) -> int:
    """The database's runs summed per app session and per model pair and drafter (chat replies, races and
    benchmarks alike; the JSON says how many of each)."""
    path = db or default_database_path()
    if db is not None and not path.exists():
        raise StorageError(f"{path} does not exist")
    if db is not None and path.is_file() and path.stat().st_size == 0:  # a reader: it writes no schema into it
        raise StorageError(f"{path} is empty: not a specchat database")
    store = Store(open_database(path))
    try:
        overall = store.overall_stats()
        groups = {by: store.run_groups(by) for by, _ in STATS_GROUPS}
        sources = {source: len(store.runs(_source_filter(source))) for source in store.run_choices()["sources"]}
    finally:
        store.close()
    if as_json:
        print(json.dumps({"database": str(path), "overall": _aggregate_json(overall), "runs_by_source": sources,
                          **{by: [_group_json(g) for g in found] for by, found in groups.items()}}, indent=1))
        return 0
    print(f"{path}: {overall.runs} runs ({', '.join(f'{n} {s}' for s, n in sources.items()) or 'none yet'})")
    for by, title in STATS_GROUPS:
        print(f"\n{title}")
        _print_groups(groups[by])
    return 0


def _source_filter(source: str) -> RunFilter:
    return RunFilter(source=source)


def _aggregate_json(a) -> dict:
    return {"runs": a.runs, "new_tokens": a.new_tokens, "tokens_per_s": round(a.tokens_per_s, 3),
            "mean_speedup": None if a.mean_speedup is None else round(a.mean_speedup, 3),
            "alpha": round(a.mean_alpha, 4), "tau": round(a.tau, 4), "draft_proposed": a.draft_proposed,
            "draft_accepted": a.draft_accepted, "target_passes": a.target_passes, "wall_s": round(a.wall_s, 3)}


def _group_json(g) -> dict:
    return {"key": g.key, "label": g.label, **_aggregate_json(g.aggregate),
            "acceptance_by_position": [round(a, 4) for a in g.acceptance_by_position],
            "first_at": g.first_at.isoformat() if g.first_at else None,
            "last_at": g.last_at.isoformat() if g.last_at else None}


def _print_groups(groups) -> None:
    if not groups:
        print("  (no runs)")
        return
    width = min(max(len(g.label) for g in groups), 60)
    print(f"  {'':<{width}} {'runs':>5} {'tokens':>8} {'tok/s':>7} {'speedup':>8} {'alpha':>6} {'tau':>5}  last run")
    for g in groups:
        a = g.aggregate
        speedup = f"{a.mean_speedup:.2f}x" if a.mean_speedup is not None else "-"
        alpha = f"{a.mean_alpha:.2f}" if a.draft_proposed else "-"
        last = g.last_at.astimezone().strftime("%Y-%m-%d %H:%M") if g.last_at else ""
        print(f"  {g.label[:width]:<{width}} {a.runs:>5} {a.new_tokens:>8} {a.tokens_per_s:>7.1f} {speedup:>8} "
              f"{alpha:>6} {a.tau:>5.2f}  {last}")
