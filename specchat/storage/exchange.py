"""Conversation export (Markdown, JSON) and import (JSON): pure functions on records, no database access.

The JSON format is versioned ({"format": "specchat-conversation", "version": 2, ...}) so that a later specchat
can still read files written today, and so that an unrelated JSON file is refused with a clear message instead
of being imported as garbage. Version 2 adds "documents": the files attached to the messages, each with the index
of its message in "messages", its text, pages and passages ([start, end, page] each: a passage's text is the
document's between them). Version 3 carries the chat's tree: every branch's messages, each with "parent" (the index
of an earlier message, or null for a first message), and "shown" (the index of the last message of the branch on
screen). Version 1 and 2 files (one branch, each message after the one before it) still import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

from ..core.errors import StorageError, quoted
from ..core.text import lone_surrogate, one_line
from ..core.vocabulary import ORIGIN_NAMES
from ..documents.document import Document, Passage
from .document_records import MAX_DOCUMENTS_PER_MESSAGE, MAX_PASSAGES, DocumentInfo, check_document, is_whole
from .records import ROLES, ConversationInfo, MessageInfo, Span

FORMAT = "specchat-conversation"
VERSION = 3  # written; 1 (before documents) and 2 (before branches) are still read
READ_VERSIONS = (1, 2, 3)


@dataclass(frozen=True)
class ImportedMessage:
    role: str
    text: str
    created_at: datetime | None
    stopped: bool
    spans: tuple[Span, ...] | None
    finish_reason: str | None
    parent: int | None = None  # the index of the message it follows (None: a first message)


@dataclass(frozen=True)
class ImportProgress:
    """How far an import is, for a progress display: `phase` is "checking" (validating the messages), "preparing"
    (converting them to rows) or "writing" (storing them); `done` of `total` messages."""

    phase: str
    done: int
    total: int


PROGRESS_EVERY = 5000  # messages between two progress reports


@dataclass(frozen=True)
class ImportedDocument:
    """A document of an imported chat, checked (document_records.check_document): `message` is the index of its
    message in the chat's messages."""

    message: int
    document: Document
    created_at: datetime | None


@dataclass(frozen=True)
class ImportedConversation:
    title: str
    system_prompt: str | None
    created_at: datetime | None
    messages: tuple[ImportedMessage, ...]
    documents: tuple[ImportedDocument, ...] = ()
    shown: int | None = None  # the index of the last message of the branch on screen (None: the last message)


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


def to_json(conversation: ConversationInfo, messages: list[MessageInfo],
            documents: Mapping[int, Sequence[tuple[DocumentInfo, Document]]] | None = None,
            shown: int | None = None) -> dict:
    """The exchange format: everything needed to rebuild the conversation, nothing tied to this database (ids) or to
    a model (a document's token count). messages: the whole tree, each after its parent (oldest first does);
    shown: the id of the last message on screen. documents: (its record, the document) by message id, as
    DocumentShelf.for_export gives them; one whose message is not among `messages` is left out."""
    index_of = {m.id: index for index, m in enumerate(messages)}
    attached = [(index_of[message_id], info, document) for message_id, pairs in (documents or {}).items()
                if message_id in index_of for info, document in pairs]
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
                "parent": index_of.get(m.parent_id) if m.parent_id is not None else None,
            }
            for m in messages
        ],
        "shown": index_of.get(shown) if shown is not None else None,
        "documents": [_document_json(index, info, document) for index, info, document in sorted(
            attached, key=lambda item: (item[0], item[1].id))],
    }


def _document_json(message: int, info: DocumentInfo, document: Document) -> dict:
    return {
        "message": message,
        "name": document.name,
        "kind": document.kind,
        "created_at": info.created_at.isoformat(),
        "size_bytes": document.size_bytes,
        "sha256": document.sha256,
        "pages": document.pages,
        "page_starts": list(document.page_starts),
        "text": document.text,
        "passages": [[p.start, p.end, p.page] for p in document.passages],
    }


def parse_json(data: Any, on_progress: Callable[[ImportProgress], None] | None = None) -> ImportedConversation:
    """Validate an exported conversation (a dict, or JSON text/bytes); StorageError says what is wrong.
    on_progress, if given, hears how many messages are checked, every PROGRESS_EVERY and at the end."""
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data, parse_int=_whole_number)
        except (ValueError, RecursionError) as error:
            raise StorageError(f"not a specchat conversation: the file is not valid JSON ({error})") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StorageError(f'not a specchat conversation: expected a JSON object with "format": "{FORMAT}"')
    version = data.get("version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise StorageError(f"unsupported specchat conversation version {quoted(version)} (this specchat reads "
                           f"{' and '.join(map(str, READ_VERSIONS))})")
    messages = _field(data, "messages", list, "conversation")
    parsed = _parse_messages(messages, on_progress, tree=version >= 3)
    return ImportedConversation(
        title=_title(data),
        system_prompt=_optional_str(data, "system_prompt", "conversation"),
        created_at=_optional_time(data, "conversation"),
        messages=parsed,
        documents=_parse_documents(data.get("documents", []) if version >= 2 else [], len(messages)),
        shown=_shown(data, len(messages)) if version >= 3 else None,
    )


def _shown(data: dict, message_count: int) -> int | None:
    """The "shown" index of a version 3 file: a message's, or null (the last message)."""
    shown = data.get("shown")
    if shown is not None and not is_whole(shown, 0, message_count - 1):
        raise StorageError(f'conversation: "shown" must be the index of a message or null, not {quoted(shown)}')
    return shown


def _parse_messages(messages: list, on_progress: Callable[[ImportProgress], None] | None,
                    tree: bool = False) -> tuple[ImportedMessage, ...]:
    """The messages, checked; `tree` (version 3): each names its parent, an earlier message, else each follows the
    one before it."""
    parsed = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        parent = _parent(message, i, where) if tree else (i - 1 if i else None)
        parsed.append(_parse_message(message, where, parent))
        if on_progress is not None and (i + 1) % PROGRESS_EVERY == 0:
            on_progress(ImportProgress("checking", i + 1, len(messages)))
    if on_progress is not None:
        on_progress(ImportProgress("checking", len(messages), len(messages)))
    return tuple(parsed)


def _parent(data: Any, index: int, where: str) -> int | None:
    parent = data.get("parent") if isinstance(data, dict) else None
    if parent is not None and not is_whole(parent, 0, index - 1):
        raise StorageError(f'{where}: "parent" must be the index of an earlier message or null, not {quoted(parent)}')
    return parent


def _parse_message(data: Any, where: str, parent: int | None = None) -> ImportedMessage:
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
        parent=parent,
    )


def _parse_documents(documents: Any, message_count: int) -> tuple[ImportedDocument, ...]:
    """The "documents" list, each checked, at most MAX_DOCUMENTS_PER_MESSAGE on one message."""
    if not isinstance(documents, list) or len(documents) > MAX_DOCUMENTS_PER_MESSAGE * message_count:
        raise StorageError(f'conversation: "documents" must be a list of at most {MAX_DOCUMENTS_PER_MESSAGE} per '
                           f"message, not {quoted(documents)}")
    parsed = tuple(_parse_document(item, message_count, f"documents[{i}]") for i, item in enumerate(documents))
    per_message: dict[int, int] = {}
    for item in parsed:
        per_message[item.message] = per_message.get(item.message, 0) + 1
        if per_message[item.message] > MAX_DOCUMENTS_PER_MESSAGE:
            raise StorageError(f"messages[{item.message}] has more than {MAX_DOCUMENTS_PER_MESSAGE} documents")
    return parsed


def _parse_document(data: Any, message_count: int, where: str) -> ImportedDocument:
    """One document of the "documents" list: its fields checked here and by document_records.check_document."""
    if not isinstance(data, dict):
        raise StorageError(f"{where} must be an object")
    message = data.get("message")
    if not is_whole(message, 0, message_count - 1):
        raise StorageError(f'{where}: "message" must be the index of a message (0 to {message_count - 1}), '
                           f"not {quoted(message)}")
    text = _field(data, "text", str, where)
    starts = data.get("page_starts", [])
    if not isinstance(starts, list):
        raise StorageError(f'{where}: "page_starts" must be a list, not {quoted(starts)}')
    document = Document(name=_field(data, "name", str, where), kind=data.get("kind"), text=text,
                        pages=data.get("pages"), page_starts=tuple(starts), sha256=data.get("sha256"),
                        size_bytes=data.get("size_bytes"), passages=_parse_passages(data.get("passages"), text, where))
    check_document(document, where)
    return ImportedDocument(message=message, document=document, created_at=_optional_time(data, where))


def _parse_passages(passages: Any, text: str, where: str) -> tuple[Passage, ...]:
    """[[start, end, page], ...] as Passages numbered in order, their text cut from the document's."""
    if not isinstance(passages, list) or len(passages) > MAX_PASSAGES:
        raise StorageError(f'{where}: "passages" must be a list of at most {MAX_PASSAGES:,} [start, end, page], '
                           f"not {quoted(passages)}")
    parsed = []
    for index, passage in enumerate(passages):
        if not isinstance(passage, list) or len(passage) != 3:
            raise StorageError(f"{where}.passages[{index}] must be [start, end, page]")
        start, end, page = passage
        if not (is_whole(start, 0, len(text)) and is_whole(end, start, len(text))):
            raise StorageError(f"{where}.passages[{index}]: [{quoted(start)}, {quoted(end)}] is outside the text "
                               f"(length {len(text):,})")
        parsed.append(Passage(position=index, page=page, start=start, end=end, text=text[start:end]))
    return tuple(parsed)


def _whole_number(digits: str) -> int:
    """A JSON integer as json.loads reads it, refused past 20 digits (the database keeps 64-bit integers) with a
    message of ours rather than Python's own limit on long numbers."""
    if len(digits.lstrip("-")) > 20:
        raise StorageError(f"not a specchat conversation: it holds a {len(digits.lstrip('-')):,}-digit number, and "
                           "no field of a chat is so large")
    return int(digits)


def _title(data: dict) -> str:
    title = one_line(_field(data, "title", str, "conversation"))  # no control character or bidi mark in the list
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

