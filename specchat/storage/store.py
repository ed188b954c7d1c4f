"""The Store: everything the app reads from and writes to the chat database.

Each public method opens one short Session, commits, and returns plain frozen records (records.py), never ORM
objects. Sessions are never shared, so the GUI thread and a generation thread can call the same Store at once;
SQLite's WAL mode and the busy timeout (db.py) serialise their writes.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from sqlalchemy import delete, exc as sa_exc, exists, func, or_, select, update
from sqlalchemy.orm import Session

from ..core.errors import StorageError, quoted
from ..core.run_kind import shown_speedup
from ..core.vocabulary import INTERRUPTED, STREAMING
from . import document_shelf, exchange, import_rows
from .db import CASEFOLD_FUNCTION, Database, default_database_path, open_database, translate_errors
from .records import (ROLES, ComparisonInfo, ConversationInfo, GroupStats, MessageInfo, RunAggregate, RunFilter,
                      RunInfo, RunRecord, RunRow, TrackRecord)
from .run_values import add_run as _add_run, run_changes as _run_changes, run_values as _run_values
from .tables import AppSession, Calibration, Comparison, ComparisonTrack, Conversation, GenerationRun, Message, utcnow

GROUPINGS = ("app_session", "pair", "conversation", "category")  # what run_groups can sum by
_TRACK_COLUMNS = frozenset(c.key for c in ComparisonTrack.__table__.columns
                           if c.key not in ("id", "comparison_id", "position"))


class Store:
    """Conversations, messages, statistics, calibrations and (`documents`) attached files, on an open Database."""

    def __init__(self, database: Database):
        self.database = database
        self.documents = document_shelf.DocumentShelf(self._reading, self._writing)

    @classmethod
    def open(cls, path: Path | None = None) -> Store:
        """Open the database at `path` (default: default_database_path()), migrated to the current schema."""
        return cls(open_database(path or default_database_path()))

    def close(self) -> None:
        self.database.close()

    # --- sessions -------------------------------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        """A write transaction (BEGIN IMMEDIATE), committed on success; locked/damaged → StorageError."""
        with translate_errors(self.database.path), self.database.write_session.begin() as session:
            yield session

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        """A read transaction: one consistent snapshot, so a list and its counts agree with each other."""
        with translate_errors(self.database.path), self.database.read_session.begin() as session:
            yield session

    # --- app sessions ---------------------------------------------------------------------------------------

    def start_app_session(self, app_version: str) -> int:
        """Record an app launch; runs recorded with its id can be summed per session ("this session" stats)."""
        with self._writing() as session:
            row = AppSession(app_version=app_version)
            session.add(row)
            session.flush()
            return row.id

    def end_app_session(self, app_session_id: int) -> None:
        with self._writing() as session:
            _get(session, AppSession, app_session_id, "app session").ended_at = utcnow()

    # --- conversations --------------------------------------------------------------------------------------

    def create_conversation(self, title: str = "New chat", system_prompt: str | None = None) -> ConversationInfo:
        with self._writing() as session:
            row = Conversation(title=_clean_title(title), system_prompt=_optional_text(system_prompt))
            session.add(row)
            session.flush()
            return _conversation_info(row, 0)

    def conversation(self, conversation_id: int) -> ConversationInfo:
        with self._reading() as session:
            row = _get(session, Conversation, conversation_id, "conversation")
            return _conversation_info(row, _message_count(session, conversation_id))

    def rename_conversation(self, conversation_id: int, title: str) -> ConversationInfo:
        """Rename without touching updated_at: renaming an old chat should not move it to the top of the list."""
        with self._writing() as session:
            row = _get(session, Conversation, conversation_id, "conversation")
            row.title = _clean_title(title)
            return _conversation_info(row, _message_count(session, conversation_id))

    def set_system_prompt(self, conversation_id: int, text: str | None) -> ConversationInfo:
        """Set (or clear, with None or blank text) the conversation's system prompt."""
        with self._writing() as session:
            row = _get(session, Conversation, conversation_id, "conversation")
            row.system_prompt = _optional_text(text)
            return _conversation_info(row, _message_count(session, conversation_id))

    def delete_conversation(self, conversation_id: int) -> bool:
        """Delete it and its messages (ON DELETE CASCADE); its runs stay in the statistics, detached.

        Returns False when it did not exist (already deleted, e.g. from another window): nothing to do.
        """
        with self._writing() as session:
            result = session.execute(delete(Conversation).where(Conversation.id == conversation_id))
            return result.rowcount > 0

    def list_conversations(self, search: str | None = None) -> list[ConversationInfo]:
        """All conversations, most recently updated first; `search` matches titles and message text, any case."""
        count = (select(func.count(Message.id)).where(Message.conversation_id == Conversation.id)
                 .correlate(Conversation).scalar_subquery())
        query = select(Conversation, count).order_by(Conversation.updated_at.desc(), Conversation.id.desc())
        needle = (search or "").strip()
        if needle:
            query = query.where(_matches(needle))
        with self._reading() as session:
            return [_conversation_info(row, n) for row, n in session.execute(query)]

    # --- messages -------------------------------------------------------------------------------------------

    def add_message(self, conversation_id: int, role: str, text: str, stopped: bool = False,
                    spans: list | None = None, finish_reason: str | None = None) -> MessageInfo:
        """Append a message at the next position; the conversation moves to the top of the list.

        For a streamed reply, add it (empty text) when generation starts and update_message as it grows.
        """
        _check_role(role)
        _check_text(text)
        with self._writing() as session:
            conversation = _get(session, Conversation, conversation_id, "conversation")
            position = session.scalar(select(func.coalesce(func.max(Message.position) + 1, 0))
                                      .where(Message.conversation_id == conversation_id))
            row = Message(conversation_id=conversation_id, position=position, role=role, text=text,
                          stopped=bool(stopped), spans=_spans_column(spans, text), finish_reason=finish_reason)
            session.add(row)
            conversation.updated_at = utcnow()
            session.flush()
            return _message_info(row)

    def update_message(self, message_id: int, text: str | None = None, spans: list | None = None,
                       stopped: bool | None = None, finish_reason: str | None = None) -> MessageInfo:
        """Change the given fields (None leaves a field as it is).

        The GUI saves a partial reply this way while it streams, so that nothing is lost if the app is killed.
        """
        with self._writing() as session:
            row = _get(session, Message, message_id, "message")
            if text is not None:
                _check_text(text)
                row.text = text
            if spans is not None:
                row.spans = _spans_column(spans, row.text)
            if stopped is not None:
                row.stopped = bool(stopped)
            if finish_reason is not None:
                row.finish_reason = finish_reason
            session.get(Conversation, row.conversation_id).updated_at = utcnow()
            session.flush()
            return _message_info(row)

    def save_partial_reply(self, message_id: int, text: str, spans: list, run_id: int | None = None,
                           stats: dict[str, Any] | None = None) -> None:
        """A streaming reply so far and its run's statistics so far, in one transaction (the GUI, once a second):
        a kill then loses at most the last second of both."""
        _check_text(text)
        values = _run_changes(RunRecord.figures(stats or {}))
        with self._writing() as session:
            row = _get(session, Message, message_id, "message")
            row.text, row.spans = text, _spans_column(spans, text)
            if run_id is not None and values:
                _get(session, GenerationRun, run_id, "generation run")
                session.execute(update(GenerationRun).where(GenerationRun.id == run_id).values(**values))

    def recover_interrupted(self) -> int:
        """At startup: replies and runs still marked as streaming were cut short by a crash or a kill. They are
        marked interrupted (and the replies stopped), keeping what was saved of them; returns how many replies."""
        with self._writing() as session:
            replies = session.execute(update(Message).where(Message.finish_reason == STREAMING)
                                      .values(finish_reason=INTERRUPTED, stopped=True)).rowcount
            session.execute(update(GenerationRun).where(GenerationRun.finish_reason == STREAMING)
                            .values(finish_reason=INTERRUPTED))
            return replies

    def delete_messages_from(self, conversation_id: int, position: int) -> int:
        """Delete the messages at `position` and after (regenerate, edit-and-resend); returns how many went."""
        with self._writing() as session:
            conversation = _get(session, Conversation, conversation_id, "conversation")
            result = session.execute(delete(Message).where(Message.conversation_id == conversation_id,
                                                           Message.position >= position))
            conversation.updated_at = utcnow()
            return result.rowcount

    def messages(self, conversation_id: int) -> list[MessageInfo]:
        """The conversation's messages in order."""
        with self._reading() as session:
            _get(session, Conversation, conversation_id, "conversation")
            rows = session.scalars(select(Message).where(Message.conversation_id == conversation_id)
                                   .order_by(Message.position))
            return [_message_info(row) for row in rows]

    # --- generation runs and statistics ---------------------------------------------------------------------

    def record_run(self, run: RunRecord | Mapping[str, Any]) -> int:
        """Store one generation's settings and figures: a RunRecord, or a mapping of its fields (any other key is
        refused, so a misspelt field is an error rather than a value silently lost)."""
        values = _run_values(run)
        try:
            with self._writing() as session:
                return _add_run(session, values)
        except sa_exc.IntegrityError as error:
            raise StorageError("the generation run refers to a message, conversation or app session that does "
                               f"not exist, or misses a value ({error.orig})") from error

    def update_run(self, run_id: int, changes: RunRecord | Mapping[str, Any]) -> None:
        """Change a recorded run: to a whole RunRecord, or the fields named in `changes` (others are refused)."""
        values = _run_values(changes) if isinstance(changes, RunRecord) else _run_changes(changes)
        with self._writing() as session:
            _get(session, GenerationRun, run_id, "generation run")
            if values:
                session.execute(update(GenerationRun).where(GenerationRun.id == run_id).values(**values))

    def delete_run(self, run_id: int) -> None:
        """A run begun for a reply that was stopped before its first token measured nothing."""
        with self._writing() as session:
            session.execute(delete(GenerationRun).where(GenerationRun.id == run_id))

    def run_for_message(self, message_id: int) -> RunInfo | None:
        """The latest generation run that produced this message, if any."""
        with self._reading() as session:
            row = session.scalars(select(GenerationRun).where(GenerationRun.message_id == message_id)
                                  .order_by(GenerationRun.id.desc()).limit(1)).first()
            return None if row is None else _run_info(row)

    def conversation_stats(self, conversation_id: int) -> RunAggregate:
        return self._aggregate(GenerationRun.conversation_id == conversation_id)

    def app_session_stats(self, app_session_id: int) -> RunAggregate:
        return self._aggregate(GenerationRun.app_session_id == app_session_id)

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

    # --- calibrations ---------------------------------------------------------------------------------------

    def save_calibration(self, target: str, device: str, dtype: str, tokens_per_s: float) -> None:
        """Keep a measured plain-decoding speed; older ones stay as history, latest_calibration picks the newest."""
        if isinstance(tokens_per_s, bool) or not isinstance(tokens_per_s, (int, float)) \
                or not math.isfinite(tokens_per_s) or tokens_per_s <= 0:
            raise StorageError(f"a calibration needs a positive tokens/s, not {tokens_per_s!r}")
        with self._writing() as session:
            session.add(Calibration(target=target, device=device, dtype=dtype, tokens_per_s=float(tokens_per_s)))

    def latest_calibration(self, target: str, device: str, dtype: str) -> float | None:
        """The newest plain-decoding tokens/s for this target, device and dtype, or None if never calibrated."""
        c = Calibration
        query = (select(c.tokens_per_s).where(c.target == target, c.device == device, c.dtype == dtype)
                 .order_by(c.measured_at.desc(), c.id.desc()).limit(1))
        with self._reading() as session:
            return session.scalar(query)

    # --- export / import ------------------------------------------------------------------------------------

    def export_markdown(self, conversation_id: int) -> str:
        conversation, messages, _ = self.chat(conversation_id)
        return exchange.to_markdown(conversation, messages)

    def export_json(self, conversation_id: int) -> dict:
        """The conversation in the versioned exchange format (json.dump it to save a file)."""
        conversation, messages, _ = self.chat(conversation_id)
        return exchange.to_json(conversation, messages, self.documents.for_export(conversation_id))

    def import_json(self, data: dict | str | bytes,
                    on_progress: Callable[[exchange.ImportProgress], None] | None = None) -> ConversationInfo:
        """Create a new conversation from exported data (dict or JSON text), all or nothing.

        Invalid input raises StorageError saying what is wrong; nothing is written then. on_progress, if given,
        hears how far checking, preparing and writing the messages is (exchange.ImportProgress), on the calling
        thread: the window runs a large import off its GUI thread and follows it so. The rows are made before the
        write transaction, which then only inserts them (import_rows.py), so that it holds the lock briefly.
        """
        parsed = exchange.parse_json(data, on_progress)
        rows = import_rows.message_rows(parsed.messages, self.database.engine.dialect, utcnow(), on_progress)
        with self._writing() as session:
            # not drafted from until the user opens it: its text has never been shown in this app
            conversation = Conversation(title=parsed.title, system_prompt=parsed.system_prompt, in_history=False)
            if parsed.created_at is not None:
                conversation.created_at = parsed.created_at
            session.add(conversation)
            session.flush()
            import_rows.insert_messages(session, conversation.id, rows, on_progress, documents=parsed.documents)
            return _conversation_info(conversation, len(rows))

    def include_in_history(self, conversation_id: int) -> list[str]:
        """Let a chat's replies feed the history drafter (an imported chat, when the user opens it). Returns its
        replies if it was not included before (to add to a live index), else []."""
        with self._writing() as session:
            row = _get(session, Conversation, conversation_id, "conversation")
            if row.in_history:
                return []
            row.in_history = True
            return list(session.scalars(
                select(Message.text).where(Message.conversation_id == conversation_id, Message.role == "assistant",
                                           Message.text != "").order_by(Message.position)))

    def history_replies(self, limit: int = 5000) -> list[str]:
        """The newest `limit` non-empty replies of the chats that feed the history drafter, oldest first."""
        with self._reading() as session:
            rows = session.scalars(
                select(Message.text).join(Conversation, Conversation.id == Message.conversation_id)
                .where(Conversation.in_history, Message.role == "assistant", Message.text != "")
                .order_by(Message.created_at.desc(), Message.id.desc()).limit(limit)).all()
            return list(reversed(rows))

    def chat(self, conversation_id: int) -> tuple[ConversationInfo, list[MessageInfo], dict[int, RunInfo]]:
        """A conversation, its messages in order and the latest run of each reply (by message id), read in one
        transaction: opening a chat is one read however many replies it has, and an export never mixes two
        states."""
        with self._reading() as session:
            row = _get(session, Conversation, conversation_id, "conversation")
            rows = session.scalars(select(Message).where(Message.conversation_id == conversation_id)
                                   .order_by(Message.position)).all()
            runs = session.scalars(select(GenerationRun).join(Message, Message.id == GenerationRun.message_id)
                                   .where(Message.conversation_id == conversation_id).order_by(GenerationRun.id))
            return (_conversation_info(row, len(rows)), [_message_info(m) for m in rows],
                    {run.message_id: _run_info(run) for run in runs})


# --- helpers ------------------------------------------------------------------------------------------------

def _get(session: Session, model: type, row_id: int, what: str):
    """The row with this id, or a StorageError (it may have been deleted from another window)."""
    row = session.get(model, row_id)
    if row is None:
        raise StorageError(f"{what} {row_id} does not exist")
    return row


def _message_count(session: Session, conversation_id: int) -> int:
    return session.scalar(select(func.count(Message.id)).where(Message.conversation_id == conversation_id))


def _matches(needle: str):
    """Title or any message text contains `needle`, compared case-folded (Unicode-aware, unlike SQLite's LIKE)."""
    folded = needle.casefold()

    def contains(column):
        return getattr(func, CASEFOLD_FUNCTION)(column).contains(folded, autoescape=True)

    in_messages = exists().where(Message.conversation_id == Conversation.id, contains(Message.text))
    return or_(contains(Conversation.title), in_messages)


def _clean_title(title: str) -> str:
    if not isinstance(title, str) or not title.strip():
        raise StorageError("a conversation title must not be empty")
    return " ".join(title.split())


def _optional_text(text: str | None) -> str | None:
    if text is not None and not isinstance(text, str):
        raise StorageError(f"expected text or None, not {type(text).__name__}")
    return text if text and text.strip() else None


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise StorageError(f"a message role must be one of {', '.join(ROLES)}, not {quoted(role)}")


def _check_text(text: str) -> None:
    if not isinstance(text, str):
        raise StorageError(f"message text must be a string, not {type(text).__name__}")


def _spans_column(spans: Any, text: str) -> list[list] | None:
    return exchange.spans_to_json(exchange.validate_spans(spans, len(text)))


def _conversation_info(row: Conversation, message_count: int) -> ConversationInfo:
    return ConversationInfo(id=row.id, title=row.title, system_prompt=row.system_prompt,
                            created_at=row.created_at, updated_at=row.updated_at, message_count=message_count,
                            in_history=bool(row.in_history))


def _message_info(row: Message) -> MessageInfo:
    spans = None if row.spans is None else tuple((s, e, o) for s, e, o in row.spans)
    return MessageInfo(id=row.id, conversation_id=row.conversation_id, position=row.position, role=row.role,
                       text=row.text, created_at=row.created_at, stopped=row.stopped, spans=spans,
                       finish_reason=row.finish_reason)


def _run_info(row: GenerationRun) -> RunInfo:
    return RunInfo(id=row.id, message_id=row.message_id, drafter=row.drafter, k=row.k, adaptive=row.adaptive,
                   new_tokens=row.new_tokens, target_passes=row.target_passes, draft_proposed=row.draft_proposed,
                   draft_accepted=row.draft_accepted, tokens_per_s=row.tokens_per_s, speedup=row.speedup,
                   speedup_basis=row.speedup_basis, finish_reason=row.finish_reason, exactness=row.exactness,
                   prefill_s=row.prefill_s, sources=tuple(tuple(s) for s in row.sources or ()))


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
