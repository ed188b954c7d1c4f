"""ORM models: the schema at the head migration.

Alembic migrations (migrations/versions) are the source of truth for the file on disk; these classes must match
the head revision (a test compares them). Change the schema by adding a revision, then update the models. The full-text
indexes over document passages (FTS_TABLE, 0006) and messages (MESSAGES_FTS_TABLE, 0007) are virtual tables the
models cannot describe: in_orm_schema leaves them and their shadow tables out of the comparison.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (Boolean, DateTime, Float, ForeignKey, Index, Integer, MetaData, String, Text, UniqueConstraint,
                        text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Named constraints, so that future batch migrations (SQLite rebuilds tables to alter them) can refer to them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


ZERO = text("0")  # module level: inside Message, `text` is the column
ONE = text("1")
EMPTY_LIST = text("'[]'")
EMPTY_OBJECT = text("'{}'")
CHAT = text("'chat'")


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (stored naive, as UTC, by UTCDateTime)."""
    return datetime.now(timezone.utc)


class UTCDateTime(TypeDecorator):
    """A DATETIME column that always holds UTC.

    SQLite has no time zones; storing naive UTC and handing back aware datetimes means that nothing the GUI shows
    depends on the time zone the row was written in.
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        return value.replace(tzinfo=timezone.utc) if value is not None else None


class JSONText(TypeDecorator):
    """JSON stored as TEXT, so the file stays readable by any SQLite tool and needs no JSON1 extension."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect) -> str | None:
        return None if value is None else json.dumps(value, separators=(",", ":"))

    def process_result_value(self, value: str | None, dialect) -> Any:
        return None if value is None else json.loads(value)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Conversation(Base):
    __tablename__ = "conversations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(String)
    system_prompt: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    # 0004: its replies may feed the history drafter (an imported chat: once opened)
    in_history: Mapped[bool] = mapped_column(Boolean, default=True, server_default=ONE)
    # 0007: the last message of the branch on screen (None: the newest leaf; not a foreign key, 0007 says why)
    leaf_id: Mapped[int | None] = mapped_column(Integer)
    pinned: Mapped[bool] = mapped_column(Boolean, default=False, server_default=ZERO)
    folder_id: Mapped[int | None] = mapped_column(ForeignKey("folders.id", ondelete="SET NULL"), index=True)


class Folder(Base):
    """A folder of chats in the sidebar (0007); deleting it leaves its chats outside any folder."""

    __tablename__ = "folders"
    __table_args__ = (UniqueConstraint("name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Message(Base):
    """One message: a node of its chat's tree (0007). `position` is its depth (0 for the chat's first message);
    siblings, an edited message or a regenerated reply, share a parent."""

    __tablename__ = "messages"
    __table_args__ = (Index("ix_messages_conversation_id_position", "conversation_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    stopped: Mapped[bool] = mapped_column(Boolean, default=False, server_default=ZERO)
    spans: Mapped[list | None] = mapped_column(JSONText)
    finish_reason: Mapped[str | None] = mapped_column(String)  # 0002
    # 0007: what it follows (None: the chat's first message), and a reply's token ids under its run's target
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), index=True)
    token_ids: Mapped[list | None] = mapped_column(JSONText)


class AppSession(Base):
    __tablename__ = "app_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    app_version: Mapped[str] = mapped_column(String)


class GenerationRun(Base):
    """One reply's generation: its settings and the engine's statistics (GenerationStats)."""

    __tablename__ = "generation_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"), index=True)
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), index=True)
    app_session_id: Mapped[int | None] = mapped_column(ForeignKey("app_sessions.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    target: Mapped[str] = mapped_column(String)
    draft: Mapped[str | None] = mapped_column(String)
    drafter: Mapped[str] = mapped_column(String)
    k: Mapped[int] = mapped_column(Integer)
    adaptive: Mapped[bool] = mapped_column(Boolean)
    temperature: Mapped[float] = mapped_column(Float)
    top_p: Mapped[float] = mapped_column(Float)
    top_k: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    new_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    target_passes: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    draft_proposed: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    draft_accepted: Mapped[int] = mapped_column(Integer, default=0, server_default=ZERO)
    tokens_per_s: Mapped[float] = mapped_column(Float, default=0.0, server_default=ZERO)
    prefill_s: Mapped[float] = mapped_column(Float, default=0.0, server_default=ZERO)
    draft_s: Mapped[float] = mapped_column(Float, default=0.0, server_default=ZERO)
    verify_s: Mapped[float] = mapped_column(Float, default=0.0, server_default=ZERO)
    wall_s: Mapped[float] = mapped_column(Float, default=0.0, server_default=ZERO)
    acceptance_by_position: Mapped[list] = mapped_column(JSONText, default=list, server_default=EMPTY_LIST)
    speedup: Mapped[float | None] = mapped_column(Float)
    # 0002
    finish_reason: Mapped[str | None] = mapped_column(String)
    speedup_basis: Mapped[str | None] = mapped_column(String)  # run_values.SPEEDUP_BASES
    baseline_tokens_per_s: Mapped[float | None] = mapped_column(Float)
    predicted_speedup: Mapped[float | None] = mapped_column(Float)
    # 0005: "bit-identical" or "distribution" (EXACTNESS in records.py)
    exactness: Mapped[str | None] = mapped_column(String)
    # 0006: what the reply was given of the chat's documents ([document id, name, page, passage] each)
    sources: Mapped[list | None] = mapped_column(JSONText)
    # 0008: the drafter held back for the whole reply, this machine's costs still being measured (None: before 0008)
    awaiting_costs: Mapped[bool | None] = mapped_column(Boolean)
    # 0003
    source: Mapped[str] = mapped_column(String, default="chat", server_default=CHAT)
    comparison_id: Mapped[int | None] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"))
    category: Mapped[str | None] = mapped_column(String)
    proposed_by_position: Mapped[list] = mapped_column(JSONText, default=list, server_default=EMPTY_LIST)
    accepted_by_position: Mapped[list] = mapped_column(JSONText, default=list, server_default=EMPTY_LIST)


class Comparison(Base):
    """One prompt raced by several drafters, one after the other on the same device (0003)."""

    __tablename__ = "comparisons"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    app_session_id: Mapped[int | None] = mapped_column(ForeignKey("app_sessions.id"))
    prompt: Mapped[str] = mapped_column(Text)
    target: Mapped[str] = mapped_column(String)
    draft: Mapped[str | None] = mapped_column(String)
    settings: Mapped[dict] = mapped_column(JSONText, default=dict, server_default=EMPTY_OBJECT)
    greedy: Mapped[bool] = mapped_column(Boolean)
    identical: Mapped[bool | None] = mapped_column(Boolean)


class ComparisonTrack(Base):
    """One pane of a comparison: the reply and, per token, its character span, origin and time (for the replay)."""

    __tablename__ = "comparison_tracks"
    __table_args__ = (UniqueConstraint("comparison_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    comparison_id: Mapped[int] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    drafter: Mapped[str] = mapped_column(String)
    text: Mapped[str] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String)
    token_ids: Mapped[list] = mapped_column(JSONText, default=list, server_default=EMPTY_LIST)
    token_spans: Mapped[list] = mapped_column(JSONText, default=list, server_default=EMPTY_LIST)
    token_origins: Mapped[list] = mapped_column(JSONText, default=list, server_default=EMPTY_LIST)
    token_times: Mapped[list] = mapped_column(JSONText, default=list, server_default=EMPTY_LIST)
    stats: Mapped[dict] = mapped_column(JSONText, default=dict, server_default=EMPTY_OBJECT)


class Calibration(Base):
    """A measured plain-decoding speed of a target on a device, the baseline for a 'calibrated' speedup."""

    __tablename__ = "calibrations"
    __table_args__ = (Index("ix_calibrations_lookup", "target", "device", "dtype", "measured_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    target: Mapped[str] = mapped_column(String)
    device: Mapped[str] = mapped_column(String)
    dtype: Mapped[str] = mapped_column(String)
    tokens_per_s: Mapped[float] = mapped_column(Float)
    measured_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class AttachedDocument(Base):
    """The text read from a file attached to a message (0006): its pages, size, hash and its token count under the
    model it was attached with (None until counted). Deleted with its message or chat."""

    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), index=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String)
    kind: Mapped[str] = mapped_column(String)
    pages: Mapped[int | None] = mapped_column(Integer)
    page_starts: Mapped[list] = mapped_column(JSONText, default=list, server_default=EMPTY_LIST)
    chars: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String)
    tokens: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    text: Mapped[str] = mapped_column(Text)  # the last column (0006 says why)


class DocumentPassage(Base):
    """One passage of an attached document, as retrieval ranks it (0006); FTS_TABLE indexes its text."""

    __tablename__ = "document_passages"
    __table_args__ = (UniqueConstraint("document_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    page: Mapped[int | None] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(Integer)
    end: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)


FTS_TABLE = "document_passages_fts"  # FTS5, external content on document_passages, kept in step by triggers (0006)
MESSAGES_FTS_TABLE = "messages_fts"  # FTS5, external content on messages' text, kept in step by triggers (0007)
FTS_TABLES = (FTS_TABLE, MESSAGES_FTS_TABLE)


def in_orm_schema(name: str | None, type_: str, parent_names: dict) -> bool:
    """Alembic's include_name: False for the full-text index and its shadow tables (FTS_TABLE_data, _idx, ...), which
    FTS5 makes and the models do not describe, so that comparing the models with the file leaves them out."""
    return not (type_ == "table" and name is not None
                and any(name == fts or name.startswith(fts + "_") for fts in FTS_TABLES))
