"""The Store: everything the app reads from and writes to the chat database.

Each public method opens one short Session, commits, and returns plain frozen records (records.py), never ORM
objects. Sessions are never shared, so the GUI thread and a generation thread can call the same Store at once;
SQLite's WAL mode and the busy timeout (db.py) serialise their writes.
"""

from __future__ import annotations

import math
from numbers import Integral
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from sqlalchemy import delete, exc as sa_exc, exists, func, or_, select, update
from sqlalchemy.orm import Session

from ..core.errors import StorageError, quoted
from ..core.text import one_line
from ..core.vocabulary import INTERRUPTED, STREAMING
from ..documents.document import Document
from . import branch_slice, chat_list, chat_tree, document_shelf, exchange, import_rows
from .document_records import DocumentInfo
from .db import CASEFOLD_FUNCTION, Database, default_database_path, open_database, translate_errors
from .records import ROLES, ConversationInfo, MessageInfo, RunInfo, RunRecord, StoredReply
from .rows import get_row as _get
from .run_queries import RunQueries
from .run_values import add_run as _add_run, run_changes as _run_changes, run_values as _run_values
from .tables import AppSession, Calibration, Conversation, GenerationRun, Message, utcnow



class Store(RunQueries):
    """Conversations, messages, statistics, calibrations and (`documents`) attached files, on an open Database."""

    def __init__(self, database: Database):
        self.database = database
        self.documents = document_shelf.DocumentShelf(self._reading, self._writing)
        self.chat_list = chat_list.ChatList(self._reading, self._writing)  # pins, folders, search
        self.tree = chat_tree.ChatTree(self._reading, self._writing)  # branches: show, delete, fork

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
        """All conversations, pinned first, then most recently updated first; `search` matches titles and message
        text, any case (a scan of every message: the sidebar's search is chat_list.search, over the FTS5 index)."""
        count = (select(func.count(Message.id)).where(Message.conversation_id == Conversation.id)
                 .correlate(Conversation).scalar_subquery())
        # columns, not ORM objects, which cost most of the time for ten thousand chats (the sidebar's refresh)
        query = (select(*Conversation.__table__.columns, count.label("message_count"))
                 .order_by(Conversation.pinned.desc(), Conversation.updated_at.desc(), Conversation.id.desc()))
        needle = (search or "").strip()
        if needle:
            query = query.where(_matches(needle))
        with self._reading() as session:
            return [_conversation_info(row, row.message_count) for row in session.execute(query)]

    # --- messages -------------------------------------------------------------------------------------------

    def add_message(self, conversation_id: int, role: str, text: str, stopped: bool = False,
                    spans: list | None = None, finish_reason: str | None = None,
                    sibling_of: int | None = None) -> MessageInfo:
        """Add a message after the end of the branch on screen, or beside `sibling_of` (an edit, a regenerated
        reply: the same parent); it becomes the end of the branch on screen, and the chat moves to the top of the
        list. For a streamed reply, add it (empty text) when generation starts and update_message as it grows.
        """
        _check_role(role)
        _check_text(text)
        with self._writing() as session:
            row, siblings = _add_message(session, conversation_id, sibling_of, role=role, text=text,
                                         stopped=bool(stopped), spans=_spans_column(spans, text),
                                         finish_reason=finish_reason)
            return _message_info(row, siblings)

    def ask(self, conversation_id: int, text: str, documents: Sequence[tuple[Document, int | None]] = (),
            sibling_of: int | None = None) -> tuple[MessageInfo, list[DocumentInfo]]:
        """Adds the user's message as add_message does, with `documents` attached to it (each with its token count
        under the model, if known), in one transaction: all of it is stored, or nothing (StorageError). Returns the
        message and its documents as stored."""
        _check_text(text)
        for document, tokens in documents:
            document_shelf.check_attachment(document, tokens)
        if len(documents) > document_shelf.MAX_DOCUMENTS_PER_MESSAGE:
            raise StorageError(f"a message holds at most {document_shelf.MAX_DOCUMENTS_PER_MESSAGE} documents")
        with self._writing() as session:
            row, siblings = _add_message(session, conversation_id, sibling_of, role="user", text=text)
            attached = [document_shelf.add_document(session, row.id, conversation_id, document, tokens, utcnow())
                        for document, tokens in documents]
            return _message_info(row, siblings), [document_shelf.document_info(d) for d in attached]

    def update_message(self, message_id: int, text: str | None = None, spans: list | None = None,
                       stopped: bool | None = None, finish_reason: str | None = None,
                       token_ids: Sequence[int] | None = None) -> MessageInfo:
        """Change the given fields (None leaves a field as it is); token_ids: a reply's, saved with its text.

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
            if token_ids is not None:
                row.token_ids = _token_ids_column(token_ids)
            session.get(Conversation, row.conversation_id).updated_at = utcnow()
            session.flush()
            siblings = session.scalars(select(Message.id).where(Message.conversation_id == row.conversation_id,
                                                                Message.parent_id.is_(row.parent_id)
                                                                if row.parent_id is None else
                                                                Message.parent_id == row.parent_id)
                                       .order_by(Message.id)).all()
            return _message_info(row, tuple(siblings))

    def save_partial_reply(self, message_id: int, text: str, spans: list, run_id: int | None = None,
                           stats: dict[str, Any] | None = None, token_ids: Sequence[int] | None = None) -> None:
        """A streaming reply so far (its text, spans and token ids: None leaves them) and its run's statistics so
        far, in one transaction (the GUI, once a second): a kill then loses at most the last second of them all."""
        _check_text(text)
        values = _run_changes(RunRecord.figures(stats or {}))
        with self._writing() as session:
            row = _get(session, Message, message_id, "message")
            row.text, row.spans = text, _spans_column(spans, text)
            if token_ids is not None:
                row.token_ids = _token_ids_column(token_ids)
            if run_id is not None and values:
                _get(session, GenerationRun, run_id, "generation run")
                session.execute(update(GenerationRun).where(GenerationRun.id == run_id).values(**values))

    def stored_reply(self, message_id: int) -> StoredReply:
        """The reply `message_id` with its token ids and its runs, oldest first, in one read (continuing it)."""
        with self._reading() as session:
            row = _get(session, Message, message_id, "message")
            runs = session.scalars(select(GenerationRun).where(GenerationRun.message_id == message_id)
                                   .order_by(GenerationRun.id)).all()
            ids = row.token_ids  # anything but a list of token ids (a damaged file) reads as none kept
            ids = tuple(ids) if isinstance(ids, list) and all(type(t) is int and t >= 0 for t in ids) else None
            return StoredReply(_message_info(row), ids, tuple(_run_info(run, i + 1) for i, run in enumerate(runs)))

    def recover_interrupted(self) -> int:
        """At startup: replies and runs still marked as streaming were cut short by a crash or a kill. They are
        marked interrupted (and the replies stopped), keeping what was saved of them; returns how many replies."""
        with self._writing() as session:
            replies = session.execute(update(Message).where(Message.finish_reason == STREAMING)
                                      .values(finish_reason=INTERRUPTED, stopped=True)).rowcount
            session.execute(update(GenerationRun).where(GenerationRun.finish_reason == STREAMING)
                            .values(finish_reason=INTERRUPTED))
            return replies

    def messages(self, conversation_id: int) -> list[MessageInfo]:
        """The branch on screen, from the chat's first message down (chat_tree.py), each with its siblings."""
        with self._reading() as session:
            return _shown_branch(session, _get(session, Conversation, conversation_id, "conversation"))[0]

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
        """The conversation in the versioned exchange format, every branch (json.dump it to save a file)."""
        with self._reading() as session:
            row = _get(session, Conversation, conversation_id, "conversation")
            messages = [_message_info(m) for m in session.scalars(
                select(Message).where(Message.conversation_id == conversation_id).order_by(Message.id))]
            conversation = _conversation_info(row, len(messages))
            shown = chat_tree.shown_leaf({m.id: m.parent_id for m in messages}, row.leaf_id)
        return exchange.to_json(conversation, messages, self.documents.for_export(conversation_id), shown)

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
            conversation = Conversation(title=_clean_title(parsed.title), system_prompt=parsed.system_prompt,
                                        in_history=False)
            if parsed.created_at is not None:
                conversation.created_at = parsed.created_at
            session.add(conversation)
            session.flush()
            import_rows.insert_messages(session, conversation, rows, on_progress, documents=parsed.documents,
                                        shown=parsed.shown)
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

    def chat(self, conversation_id: int, last: int | None = None,
             since: int = 0) -> tuple[ConversationInfo, list[MessageInfo], dict[int, RunInfo]]:
        """A conversation, the branch on screen (its messages from the first down, each with its siblings) and the
        latest run of each of them (by message id), read in one transaction: opening a chat is one read however
        long it is, and an export never mixes two states. `last`: only the branch's last `last` messages, none at a
        depth (position) below `since` (a long chat opened at its end: earlier() reads the rest as it is needed);
        None: every message."""
        with self._reading() as session:
            row = _get(session, Conversation, conversation_id, "conversation")
            info = _conversation_info(row, _message_count(session, conversation_id))
            return (info,) + _shown_branch(session, row, info.message_count if last is None else last, since)

    def earlier(self, conversation_id: int, message_id: int,
                count: int) -> tuple[list[MessageInfo], dict[int, RunInfo]]:
        """The `count` messages before `message_id` on its branch (fewer near the chat's start), first to last, each
        with its siblings, and the latest run of each: more of a chat opened at its end (chat(last=...)), read as
        the user scrolls up. StorageError when the message is not in the chat (deleted from another window)."""
        with self._reading() as session:
            message = _get(session, Message, message_id, "message")
            if message.conversation_id != conversation_id:
                raise StorageError(f"message {message_id} is not in conversation {conversation_id}")
            ids = [] if message.parent_id is None else branch_slice.path_up(session, message.parent_id, count)
            return _branch_part(session, conversation_id, ids)

    def on_branch_above(self, message_id: int, candidates: Sequence[int]) -> set[int]:
        """Which of the messages `candidates` lie on the branch above `message_id` (a chat opened at its end: which
        of its documents' messages are on the branch on screen, before what was read)."""
        with self._reading() as session:
            return branch_slice.on_branch_above(session, message_id, candidates)


# --- helpers ------------------------------------------------------------------------------------------------


def _add_message(session: Session, conversation_id: int, sibling_of: int | None, **columns) -> tuple[Message, tuple]:
    """Inserts a message after the end of the branch on screen, or beside `sibling_of`, which it makes the end of
    the branch on screen; returns its row (flushed) and its siblings' ids, its own last. A few indexed reads, never
    the chat's whole skeleton: a send in a chat of 150,000 messages costs what it costs in a short one."""
    conversation = _get(session, Conversation, conversation_id, "conversation")
    if sibling_of is not None:
        parent_id = chat_tree.message_in(session, conversation_id, sibling_of).parent_id
    else:
        parent_id = branch_slice.shown_leaf_id(session, conversation)
    parent = chat_tree.message_in(session, conversation_id, parent_id) if parent_id is not None else None
    row = Message(conversation_id=conversation_id, parent_id=parent_id,
                  position=parent.position + 1 if parent is not None else 0, **columns)
    session.add(row)
    session.flush()
    conversation.leaf_id, conversation.updated_at = row.id, utcnow()
    return row, tuple(chat_tree.children_of(session, conversation_id, [parent_id]))


def _shown_branch(session: Session, conversation: Conversation, last: int | None = None,
                  since: int = 0) -> tuple[list[MessageInfo], dict[int, RunInfo]]:
    """The branch on screen, first to last, each message with its siblings (the ids sharing its parent), and the
    latest run of each: its last `last` messages (None: all), none at a depth below `since`. Read up the parent
    links from its end (branch_slice.py), never the chat's whole skeleton."""
    leaf = branch_slice.shown_leaf_id(session, conversation)
    count = _message_count(session, conversation.id) if last is None else last
    return _branch_part(session, conversation.id,
                        [] if leaf is None else branch_slice.path_up(session, leaf, count, since))


def _branch_part(session: Session, conversation_id: int,
                 ids: list[int]) -> tuple[list[MessageInfo], dict[int, RunInfo]]:
    """The messages `ids` of a branch (in that order), each with its siblings, and the latest run of each."""
    messages = [_message_info(row, siblings) for row, siblings in branch_slice.rows_with_siblings(session,
                                                                                                  conversation_id, ids)]
    return messages, _latest_runs(branch_slice.runs_of(session, ids), set(ids))


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
    """The title as stored: one line (core.text.one_line); StorageError for one that is not text or is empty."""
    cleaned = one_line(title) if isinstance(title, str) else ""
    if not cleaned:
        raise StorageError("a conversation title must not be empty")
    return cleaned


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
                            in_history=bool(row.in_history), pinned=bool(row.pinned), folder_id=row.folder_id)


def _message_info(row: Message, siblings: tuple[int, ...] = ()) -> MessageInfo:
    spans = None if row.spans is None else tuple((s, e, o) for s, e, o in row.spans)
    return MessageInfo(id=row.id, conversation_id=row.conversation_id, position=row.position, role=row.role,
                       text=row.text, created_at=row.created_at, stopped=row.stopped, spans=spans,
                       finish_reason=row.finish_reason, parent_id=row.parent_id, siblings=siblings)


def _latest_runs(runs, messages: set[int]) -> dict[int, RunInfo]:
    """The latest of the runs (oldest first) of each message among `messages`, with how many runs it has."""
    latest: dict[int, RunInfo] = {}
    for run in runs:
        if run.message_id in messages:
            latest[run.message_id] = _run_info(run, latest[run.message_id].parts + 1 if run.message_id in latest else 1)
    return latest


def _token_ids_column(token_ids: Sequence[int]) -> list[int]:
    """A reply's token ids as stored: a JSON list of token ids (StorageError for anything else)."""
    if isinstance(token_ids, (str, bytes)) or any(isinstance(t, bool) or not isinstance(t, Integral) or t < 0
                                                   for t in token_ids):
        raise StorageError("a reply's token ids must be a list of non-negative integers")
    return [int(t) for t in token_ids]


def _run_info(row: GenerationRun, parts: int = 1) -> RunInfo:
    return RunInfo(id=row.id, message_id=row.message_id, drafter=row.drafter, k=row.k, adaptive=row.adaptive,
                   new_tokens=row.new_tokens, target_passes=row.target_passes, draft_proposed=row.draft_proposed,
                   draft_accepted=row.draft_accepted, tokens_per_s=row.tokens_per_s, speedup=row.speedup,
                   speedup_basis=row.speedup_basis, finish_reason=row.finish_reason, exactness=row.exactness,
                   prefill_s=row.prefill_s, sources=tuple(tuple(s) for s in row.sources or ()),
                   awaiting_costs=bool(row.awaiting_costs),
                   temperature=row.temperature, target=row.target, prompt_tokens=row.prompt_tokens, parts=parts)







