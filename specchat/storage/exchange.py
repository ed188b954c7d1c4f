"""Conversation export (Markdown, JSON) and import (JSON): pure functions on records, no database access.

The JSON format is versioned ({"format": "specchat-conversation", "version": 1, ...}) so that a later specchat
can still read files written today, and so that an unrelated JSON file is refused with a clear message instead
of being imported as garbage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from ..core.errors import StorageError, quoted
from ..core.text import lone_surrogate
from ..core.vocabulary import ORIGIN_NAMES
from .records import ROLES, ConversationInfo, MessageInfo, Span

FORMAT = "specchat-conversation"
VERSION = 1


@dataclass(frozen=True)
class ImportedMessage:
    role: str
    text: str
    created_at: datetime | None
    stopped: bool
    spans: tuple[Span, ...] | None
    finish_reason: str | None


@dataclass(frozen=True)
class ImportProgress:
    """How far an import is, for a progress display: `phase` is "checking" (validating the messages), "preparing"
    (converting them to rows) or "writing" (storing them); `done` of `total` messages."""

    phase: str
    done: int
    total: int


PROGRESS_EVERY = 5000  # messages between two progress reports


@dataclass(frozen=True)
class ImportedConversation:
    title: str
    system_prompt: str | None
    created_at: datetime | None
    messages: tuple[ImportedMessage, ...]


def validate_spans(spans: Any, text_length: int, where: str = "spans") -> tuple[Span, ...] | None:
    """Check [[start, end, origin], ...] against the text it describes, so the GUI can slice the text safely."""
    if spans is None:
        return None
    if not isinstance(spans, (list, tuple)):
        raise StorageError(f"{where} must be a list of [start, end, origin], not {type(spans).__name__}")
    return tuple(_validate_span(span, text_length, f"{where}[{i}]") for i, span in enumerate(spans))


def _validate_span(span: Any, text_length: int, where: str) -> Span:
    if not isinstance(span, (list, tuple)) or len(span) != 3:
        raise StorageError(f"{where} must be [start, end, origin]")
    start, end, origin = span
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
        raise StorageError(f"{where}: start and end must be integers")
    if not 0 <= start <= end <= text_length:
        raise StorageError(f"{where}: [{quoted(start)}, {quoted(end)}] is outside the text (length {text_length})")
    if origin not in ORIGIN_NAMES.values():
        raise StorageError(f"{where}: origin must be one of {', '.join(ORIGIN_NAMES.values())}, not {quoted(origin)}")
    return (start, end, origin)


def spans_to_json(spans: tuple[Span, ...] | None) -> list[list] | None:
    return None if spans is None else [list(span) for span in spans]


def to_markdown(conversation: ConversationInfo, messages: list[MessageInfo]) -> str:
    """A readable transcript: the title as a heading, then one bold-labelled section per message."""
    title = " ".join(conversation.title.split()) or "Untitled"
    parts = [f"# {title}"]
    if conversation.system_prompt:
        parts.append(f"**System prompt**\n\n{conversation.system_prompt}")
    for message in messages:
        label = f"**{message.role.capitalize()}**" + (" (stopped)" if message.stopped else "")
        parts.append(f"{label}\n\n{message.text}")
    return "\n\n".join(parts) + "\n"


def to_json(conversation: ConversationInfo, messages: list[MessageInfo]) -> dict:
    """The exchange format: everything needed to rebuild the conversation, nothing tied to this database (ids)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "title": conversation.title,
        "system_prompt": conversation.system_prompt,
        "created_at": conversation.created_at.isoformat(),
        "messages": [
            {
                "role": m.role,
                "text": m.text,
                "created_at": m.created_at.isoformat(),
                "stopped": m.stopped,
                "spans": spans_to_json(m.spans),
                "finish_reason": m.finish_reason,
            }
            for m in messages
        ],
    }


def parse_json(data: Any, on_progress: Callable[[ImportProgress], None] | None = None) -> ImportedConversation:
    """Validate an exported conversation (a dict, or JSON text/bytes); StorageError says what is wrong.
    on_progress, if given, hears how many messages are checked, every PROGRESS_EVERY and at the end."""
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError) as error:
            raise StorageError(f"not a specchat conversation: the file is not valid JSON ({error})") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StorageError(f'not a specchat conversation: expected a JSON object with "format": "{FORMAT}"')
    version = data.get("version")
    if version != VERSION or isinstance(version, bool):
        raise StorageError(f"unsupported specchat conversation version {quoted(version)} (this specchat reads "
                           f"{VERSION})")
    messages = _field(data, "messages", list, "conversation")
    return ImportedConversation(
        title=_title(data),
        system_prompt=_optional_str(data, "system_prompt", "conversation"),
        created_at=_optional_time(data, "conversation"),
        messages=_parse_messages(messages, on_progress),
    )


def _parse_messages(messages: list, on_progress: Callable[[ImportProgress], None] | None
                    ) -> tuple[ImportedMessage, ...]:
    parsed = []
    for i, message in enumerate(messages):
        parsed.append(_parse_message(message, f"messages[{i}]"))
        if on_progress is not None and (i + 1) % PROGRESS_EVERY == 0:
            on_progress(ImportProgress("checking", i + 1, len(messages)))
    if on_progress is not None:
        on_progress(ImportProgress("checking", len(messages), len(messages)))
    return tuple(parsed)


def _parse_message(data: Any, where: str) -> ImportedMessage:
    if not isinstance(data, dict):
        raise StorageError(f"{where} must be an object")
    role = data.get("role")
    if role not in ROLES:
        raise StorageError(f"{where}: role must be one of {', '.join(ROLES)}, not {quoted(role)}")
    text = _field(data, "text", str, where)
    stopped = data.get("stopped", False)
    if not isinstance(stopped, bool):
        raise StorageError(f"{where}: stopped must be true or false")
    return ImportedMessage(
        role=role,
        text=text,
        created_at=_optional_time(data, where),
        stopped=stopped,
        spans=validate_spans(data.get("spans"), len(text), f"{where}.spans"),
        finish_reason=_optional_str(data, "finish_reason", where),
    )


def _title(data: dict) -> str:
    title = _field(data, "title", str, "conversation").strip()
    if not title:
        raise StorageError("conversation: title must not be empty")
    return title


def _field(data: dict, name: str, kind: type, where: str) -> Any:
    value = data.get(name)
    if not isinstance(value, kind):
        raise StorageError(f'{where}: "{name}" is missing or is not a {"list" if kind is list else "string"}')
    return _storable(value, name, where) if isinstance(value, str) else value


def _optional_str(data: dict, name: str, where: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise StorageError(f'{where}: "{name}" must be a string or null')
    return value if value is None else _storable(value, name, where)


def _storable(text: str, name: str, where: str) -> str:
    """`text`, unless it holds a lone surrogate (core.text): JSON can carry one ("\\ud800"), but it is not Unicode
    text and the database cannot store it, so the import stops with a StorageError naming the field."""
    index = lone_surrogate(text)
    if index is not None:
        raise StorageError(f'{where}: "{name}" holds an invalid character ({text[index]!r} at '
                           f'{index}: half of a UTF-16 pair)')
    return text


def _optional_time(data: dict, where: str) -> datetime | None:
    """An ISO 8601 timestamp (naive ones are taken as UTC), or None when absent (the import time is used)."""
    value = data.get("created_at")
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
        # In UTC, as the database keeps it: a time that has no UTC equivalent (year 1 at +14:00) fails here, not
        # inside the database driver.
        parsed = parsed.astimezone(timezone.utc) if parsed and parsed.tzinfo else parsed
    except (ValueError, OverflowError):
        parsed = None
    if parsed is None:
        raise StorageError(f'{where}: "created_at" must be an ISO 8601 timestamp, not {quoted(value)}')
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)

