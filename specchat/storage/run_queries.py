"""The Store's statistics and races: the generation runs summed and grouped (the status bar, the dashboard) and the
saved comparisons (the race window). A mixin of Store (store.py), on its `_reading` and `_writing` transactions, so
that the Store stays one object for its callers and each of its files one concern. No Qt, no torch."""

from __future__ import annotations

from typing import Any, Mapping

from sqlalchemy import delete, exc as sa_exc, func, select

from ..core.errors import StorageError
from ..core.run_kind import shown_speedup
from .records import ComparisonInfo, GroupStats, RunAggregate, RunFilter, RunRecord, RunRow, TrackRecord
from .rows import get_row as _get
from .run_values import add_run as _add_run, run_values as _run_values
from .tables import Comparison, ComparisonTrack, Conversation, GenerationRun

GROUPINGS = ("app_session", "pair", "conversation", "category")  # what run_groups can sum by
_TRACK_COLUMNS = frozenset(c.key for c in ComparisonTrack.__table__.columns
                           if c.key not in ("id", "comparison_id", "position"))


class RunQueries:
    """Store's statistics (sums, runs, groups, the dashboard's choices) and comparisons."""

    _reading: Any
    _writing: Any

    def conversation_stats(self, conversation_id: int) -> RunAggregate:
        return self._aggregate(GenerationRun.conversation_id == conversation_id)

    def app_session_stats(self, app_session_id: int, sources: tuple[str, ...] | None = None) -> RunAggregate:
        """The runs of one app session; `sources`: only those of these RUN_SOURCES (None: all of them, the races'
        lanes and the benchmarks' prompts included)."""
        criteria = [GenerationRun.app_session_id == app_session_id]
        if sources is not None:
            criteria.append(GenerationRun.source.in_(sources))
        return self._aggregate(*criteria)

    def overall_stats(self) -> RunAggregate:
        return self._aggregate()

    def _aggregate(self, *criteria) -> RunAggregate:
        """Sum the runs matching `criteria` in SQL (one row back, however many runs there are); the mean speedup is
        over the runs with one whose drafts made enough of them for it (run_kind.shown_speedup), as the dashboard's."""
        r = GenerationRun
        query = select(func.count(r.id), *(func.coalesce(func.sum(c), 0) for c in (
            r.new_tokens, r.draft_proposed, r.draft_accepted, r.target_passes, r.wall_s)))
        measured = select(r.speedup, r.new_tokens, r.draft_accepted).where(*criteria, r.speedup.is_not(None))
        with self._reading() as session:
            runs, new_tokens, proposed, accepted, passes, wall_s = session.execute(query.where(*criteria)).one()
            ratios = [ratio for row in session.execute(measured) if (ratio := shown_speedup(*row)) is not None]
        return RunAggregate(
            runs=runs, new_tokens=new_tokens, draft_proposed=proposed, draft_accepted=accepted,
            target_passes=passes, wall_s=float(wall_s),
            mean_alpha=accepted / proposed if proposed else 0.0,
            tau=new_tokens / passes if passes else 0.0,
            tokens_per_s=new_tokens / wall_s if wall_s > 0 else 0.0,
            mean_speedup=sum(ratios) / len(ratios) if ratios else None,
        )

    def runs(self, where: RunFilter = RunFilter()) -> list[RunRow]:
        """The runs matching `where`, oldest first, with their conversation's title (for the dashboard)."""
        r = GenerationRun
        query = (select(r, Conversation.title).outerjoin(Conversation, Conversation.id == r.conversation_id)
                 .where(*_run_criteria(where)).order_by(r.created_at, r.id))
        with self._reading() as session:
            return [_run_row(row, title) for row, title in session.execute(query)]

    def run_groups(self, by: str, where: RunFilter = RunFilter()) -> list[GroupStats]:
        """Runs summed per app session, model pair and drafter, conversation or benchmark category (newest first)."""
        if by not in GROUPINGS:
            raise StorageError(f"runs can be grouped by {', '.join(GROUPINGS)}, not {by!r}")
        groups: dict[str, list[RunRow]] = {}
        labels: dict[str, str] = {}
        for row in self.runs(where):
            key, label = _group_of(row, by)
            if key is None:
                continue
            groups.setdefault(key, []).append(row)
            labels[key] = label
        result = [_group_stats(key, labels[key], rows) for key, rows in groups.items()]
        return sorted(result, key=lambda g: (g.last_at is not None, g.last_at), reverse=True)

    def run_choices(self) -> dict[str, list]:
        """The distinct targets, (target, draft) pairs, drafters and sources, for the dashboard's filters."""
        r = GenerationRun
        with self._reading() as session:
            pairs = session.execute(select(r.target, r.draft).distinct().order_by(r.target, r.draft)).all()
            drafters = session.scalars(select(r.drafter).distinct().order_by(r.drafter)).all()
            sources = session.scalars(select(r.source).distinct().order_by(r.source)).all()
        return {"pairs": [(t, d) for t, d in pairs], "drafters": list(drafters), "sources": list(sources)}

    # --- comparisons ----------------------------------------------------------------------------------------

    def save_comparison(self, comparison: dict[str, Any], tracks: list[dict[str, Any]],
                        runs: list[RunRecord | Mapping[str, Any]] | None = None) -> int:
        """Save a race: `comparison` has prompt, target, draft, settings, greedy, identical (and app_session_id);
        `tracks` are comparison_tracks columns, in pane order; `runs[i]` (optional) is track i's generation run,
        stored with source "race" so the dashboard counts it. All or nothing."""
        if not tracks:
            raise StorageError("a comparison needs at least one track")
        try:
            with self._writing() as session:
                row = Comparison(**{key: comparison.get(key) for key in (
                    "prompt", "target", "draft", "greedy", "identical", "app_session_id")},
                    settings=dict(comparison.get("settings") or {}))
                session.add(row)
                session.flush()
                for position, track in enumerate(tracks):
                    session.add(ComparisonTrack(comparison_id=row.id, position=position, **{
                        key: _plain_json(value) for key, value in track.items() if key in _TRACK_COLUMNS}))
                for run in runs or []:
                    _add_run(session, {**_run_values(run), "source": "race", "comparison_id": row.id})
                session.flush()
                return row.id
        except sa_exc.IntegrityError as error:
            raise StorageError(f"the comparison could not be saved: {error.orig}") from error

    def list_comparisons(self, limit: int | None = None) -> list[ComparisonInfo]:
        """Saved comparisons, newest first, without their tracks' tokens (drafters listed)."""
        query = select(Comparison).order_by(Comparison.created_at.desc(), Comparison.id.desc())
        if limit:
            query = query.limit(limit)
        with self._reading() as session:
            rows = session.scalars(query).all()
            drafters: dict[int, list[str]] = {}
            if rows:
                for comparison_id, drafter in session.execute(
                        select(ComparisonTrack.comparison_id, ComparisonTrack.drafter)
                        .where(ComparisonTrack.comparison_id.in_([row.id for row in rows]))
                        .order_by(ComparisonTrack.comparison_id, ComparisonTrack.position)):
                    drafters.setdefault(comparison_id, []).append(drafter)
            return [_comparison_info(row, tuple(drafters.get(row.id, ()))) for row in rows]

    def comparison(self, comparison_id: int) -> ComparisonInfo:
        """A saved comparison with its tracks, ready to replay."""
        with self._reading() as session:
            row = _get(session, Comparison, comparison_id, "comparison")
            tracks = session.scalars(select(ComparisonTrack).where(ComparisonTrack.comparison_id == comparison_id)
                                     .order_by(ComparisonTrack.position)).all()
            records = tuple(_track_record(track) for track in tracks)
            return _comparison_info(row, tuple(t.drafter for t in records), records)

    def delete_comparison(self, comparison_id: int) -> bool:
        """Delete it, its tracks and its runs (they were measurements of this comparison only)."""
        with self._writing() as session:
            session.execute(delete(GenerationRun).where(GenerationRun.comparison_id == comparison_id))
            result = session.execute(delete(Comparison).where(Comparison.id == comparison_id))
            return result.rowcount > 0


def _plain_json(value: Any) -> Any:
    """Tuples (as records and engine results hold them) become lists, so that what is stored reads back equal."""
    if isinstance(value, (list, tuple)):
        return [_plain_json(item) for item in value]
    return value


def _run_criteria(where: RunFilter) -> list:
    r = GenerationRun
    criteria = []
    if where.since is not None:
        criteria.append(r.created_at >= where.since)
    if where.until is not None:
        criteria.append(r.created_at < where.until)
    if where.target is not None:
        criteria.append(r.target == where.target)
    if where.draft is not None:
        criteria.append(r.draft.is_(None) if where.draft == "" else r.draft == where.draft)
    if where.drafter is not None:
        criteria.append(r.drafter == where.drafter)
    if where.source is not None:
        criteria.append(r.source == where.source)
    return criteria


def _run_row(row: GenerationRun, title: str | None) -> RunRow:
    """A stored run as the dashboard reads it: with no speedup where it drafted too little for one to mean anything
    (run_kind.shown_speedup; older races stored one for a lane that drafted nothing), so no mean or chart counts it."""
    speedup = shown_speedup(row.speedup, row.new_tokens, row.draft_accepted)
    basis = row.speedup_basis if speedup is not None else None
    return RunRow(
        id=row.id, created_at=row.created_at, source=row.source, target=row.target, draft=row.draft,
        drafter=row.drafter, k=row.k, adaptive=row.adaptive, conversation_id=row.conversation_id,
        conversation_title=title, app_session_id=row.app_session_id, comparison_id=row.comparison_id,
        category=row.category, new_tokens=row.new_tokens, target_passes=row.target_passes,
        draft_proposed=row.draft_proposed, draft_accepted=row.draft_accepted, wall_s=row.wall_s,
        tokens_per_s=row.tokens_per_s, speedup=speedup, speedup_basis=basis,
        proposed_by_position=tuple(int(x) for x in row.proposed_by_position or ()),
        accepted_by_position=tuple(int(x) for x in row.accepted_by_position or ()))


def _group_of(row: RunRow, by: str) -> tuple[str | None, str]:
    if by == "app_session":
        if row.app_session_id is None:
            return None, ""
        return f"session:{row.app_session_id}", f"Session {row.app_session_id}"
    if by == "pair":
        return f"pair:{row.pair}|{row.drafter}", f"{row.pair} · {row.drafter}"
    if by == "conversation":
        if row.conversation_id is None:
            return None, ""
        return f"chat:{row.conversation_id}", row.conversation_title or f"Chat {row.conversation_id} (deleted)"
    if row.category is None:
        return None, ""
    return f"category:{row.category}|{row.drafter}", f"{row.category} · {row.drafter}"


def _group_stats(key: str, label: str, rows: list[RunRow]) -> GroupStats:
    return GroupStats(key=key, label=label, aggregate=RunAggregate.of(rows), first_at=rows[0].created_at,
                      last_at=rows[-1].created_at,
                      proposed_by_position=_sum_lists(r.proposed_by_position for r in rows),
                      accepted_by_position=_sum_lists(r.accepted_by_position for r in rows))


def _sum_lists(lists) -> tuple[int, ...]:
    total: list[int] = []
    for values in lists:
        total += [0] * (len(values) - len(total))
        for i, value in enumerate(values):
            total[i] += value
    return tuple(total)


def _comparison_info(row: Comparison, drafters: tuple[str, ...], tracks: tuple = ()) -> ComparisonInfo:
    return ComparisonInfo(id=row.id, created_at=row.created_at, prompt=row.prompt, target=row.target,
                          draft=row.draft, drafters=drafters, greedy=row.greedy, identical=row.identical,
                          settings=dict(row.settings or {}), tracks=tracks)


def _track_record(row: ComparisonTrack) -> TrackRecord:
    return TrackRecord(position=row.position, drafter=row.drafter, text=row.text, finish_reason=row.finish_reason,
                       token_ids=tuple(row.token_ids), token_spans=tuple((a, b) for a, b in row.token_spans),
                       token_origins=tuple(row.token_origins), token_times=tuple(row.token_times),
                       stats=dict(row.stats or {}))
