"""Documents in a chat request: OpenAI's file content parts, `{"type": "file", "file": {"filename": "report.pdf",
"file_data": "<base64, or a data: URL with ;base64>"}}`, decoded and read as the window reads an attached file
(documents/reading.py), each attached to the user message that carried it.

Every byte is the client's, so everything is bounded (DocumentLimits): the request's body first (guard.py), then
the files per request, the decoded bytes of each and of all, the characters of text, and the time to read them all.
The cheap checks (how many, in which message, how large once decoded, as the base64's length says) run on the event
loop before the request takes its place in the line (check_file_parts); decoding and reading run on a thread of
their own (read_file_parts) and stop when the client leaves. Every failure is a 400 whose `param` is the part
(`messages.1.content.0`) and whose message names the file, with the reader's words: never a 500.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from ..chats.context_plan import ChatDocument, PromptPlan
from ..core.errors import DocumentError
from ..core.formatting import format_size
from ..documents.budget import ReadLimits
from ..documents.reading import document_from_bytes, shown_name
from .protocol import ApiError, ChatCompletionRequest, FilePart

NAME_CHARS = 100  # of a file's name kept (its extension always), under what reading.shown_name shortens
SUFFIX_CHARS = 16  # an extension longer than this is not one
# What a data: URL's media type says a file without a name is.
SUFFIX_BY_MEDIA_TYPE = {
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/html": ".html",
}


@dataclass(frozen=True)
class DocumentLimits:
    """The bounds on the documents of one request. max_files: file parts; max_file_bytes: one file, decoded;
    max_total_bytes: all of them, decoded (the body's 4 MiB of base64 holds about 3 MB); max_chars: characters of
    text read from one file; max_total_chars: from all of them (each is tokenized whole to see whether it fits);
    max_seconds: reading all of them."""

    max_files: int = 8
    max_file_bytes: int = 2_000_000
    max_total_bytes: int = 3_000_000
    max_chars: int = 2_000_000  # as many as a text file of max_file_bytes holds
    max_total_chars: int = 3_000_000
    max_seconds: float = 30.0

    def read_limits(self, seconds: float) -> ReadLimits:
        """The reader's limits for one file, with `seconds` left of the request's reading time."""
        return ReadLimits(max_bytes=self.max_file_bytes, max_chars=self.max_chars, max_seconds=seconds)


@dataclass(frozen=True)
class LocatedFile:
    """A file part with where it is: its `param` (messages.I.content.J), its message's role and the index of that
    message among the conversation's turns (user and assistant messages: the plan's message ids)."""

    param: str
    role: str
    turn: int
    part: FilePart


def located_files(request: ChatCompletionRequest) -> list[LocatedFile]:
    """The request's file parts in order, each with its place."""
    located, turn = [], -1
    for index, message in enumerate(request.messages):
        turn += message.role in ("user", "assistant")
        for part_index, part in message.files():
            located.append(LocatedFile(f"messages.{index}.content.{part_index}", message.role, turn, part))
    return located


def check_file_parts(request: ChatCompletionRequest, limits: DocumentLimits) -> None:
    """ApiError 400 before any work for file parts no reading can make valid: too many, in a message that is not
    the user's, by file_id, without data, or larger than the limits once decoded (as the base64's length says)."""
    files = located_files(request)
    if len(files) > limits.max_files:
        raise ApiError(400, f"the request carries {len(files)} files; this server reads at most {limits.max_files} "
                            "per request", param="messages", code="too_many_files")
    total = 0
    for located in files:
        file, param = located.part.file, located.param
        if located.role != "user":
            raise ApiError(400, f"{param}: files can be attached to user messages only", param=param)
        if file.file_id is not None:
            raise ApiError(400, f"{param}: file_id is not supported (this server has no Files API); send the file "
                                "itself, base64-encoded, in file.file_data", param=param, code="unsupported_parameter")
        if not file.file_data:
            raise ApiError(400, f"{param}: file.file_data is missing; send the file's bytes base64-encoded",
                           param=param)
        size = decoded_size(file.file_data)
        _refuse_file_size(size, shown_name(_base_name(file.filename) or "the file"), param, limits)
        total += size
    if total > limits.max_total_bytes:
        raise ApiError(400, f"the request's files come to {format_size(total)}; this server reads at most "
                            f"{format_size(limits.max_total_bytes)} of files per request", param="messages",
                       code="files_too_large")


def read_file_parts(request: ChatCompletionRequest, limits: DocumentLimits,
                    cancel: threading.Event | None = None) -> list[ChatDocument]:
    """The request's file parts decoded and read into documents (document ids from 1, in order), each attached to
    the turn that carried it; all within limits.max_seconds, stopping between chunks and pages once `cancel` is set
    (the client left). ApiError 400 naming the part and the file for any that cannot be decoded or read."""
    deadline = time.monotonic() + limits.max_seconds
    documents: list[ChatDocument] = []
    total_bytes = total_chars = 0
    for number, located in enumerate(located_files(request), 1):
        name, data = decoded_file(located.part, located.param, limits)
        total_bytes += len(data)
        if total_bytes > limits.max_total_bytes:
            raise ApiError(400, f"the request's files come to more than {format_size(limits.max_total_bytes)}, "
                                "the most this server reads per request", param="messages", code="files_too_large")
        document = _read(name, data, located.param, limits.read_limits(max(0.0, deadline - time.monotonic())),
                         cancel)
        total_chars += len(document.text)
        if total_chars > limits.max_total_chars:
            raise ApiError(400, f"{located.param}: with {document.name}, the request's files hold more than "
                                f"{limits.max_total_chars:,} characters of text, the most this server reads per "
                                "request", param=located.param, code="files_too_large")
        documents.append(ChatDocument(number, located.turn, document))
    return documents


def _read(name: str, data: bytes, param: str, limits: ReadLimits, cancel: threading.Event | None):
    """The Document of one file's bytes; ApiError 400 with the reader's message (which names the file)."""
    try:
        return document_from_bytes(name, data, limits, cancel)
    except DocumentError as error:
        raise ApiError(400, f"{param}: {error}", param=param, code="invalid_document") from None
    except Exception as error:  # a reader's bug on a hostile file is still this file's 400, not the server's 500
        raise ApiError(400, f"{param}: {shown_name(name)} could not be read ({type(error).__name__}); check that it "
                            "is a valid file of its kind", param=param, code="invalid_document") from None


def decoded_file(part: FilePart, param: str, limits: DocumentLimits) -> tuple[str, bytes]:
    """A file part's name (its extension kept: it says how the file is read) and its bytes: file_data decoded from
    base64 (plain, or a data: URL with ;base64; line breaks and spaces allowed). ApiError 400 for a data: URL that
    is not base64, data that is not base64, a file without a name whose kind nothing says, or one over
    max_file_bytes."""
    payload, media_type = part.file.file_data or "", None
    if payload[:5].lower() == "data:":
        head, comma, payload = payload.partition(",")
        if not comma or not head.lower().endswith(";base64"):
            raise ApiError(400, f"{param}: a data: URL in file.file_data must be base64 "
                                "(data:application/pdf;base64,...)", param=param)
        media_type = head[5:].split(";", 1)[0].strip().lower()
    name = file_name(part.file.filename, media_type, param)
    try:
        data = base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ApiError(400, f"{param}: the file_data of {shown_name(name)} is not valid base64 ({error}); send the "
                            "file's bytes base64-encoded (standard alphabet, with padding)", param=param,
                       code="invalid_base64") from None
    _refuse_file_size(len(data), shown_name(name), param, limits)
    return name, data


def file_name(filename: str | None, media_type: str | None, param: str) -> str:
    """The name a file is read by: the base name of `filename` (_base_name); without one, "document" with the
    extension its data: URL's media type says. ApiError 400 when nothing says what the file is."""
    base = _base_name(filename)
    if base:
        return base
    suffix = SUFFIX_BY_MEDIA_TYPE.get(media_type or "")
    if suffix is None:
        raise ApiError(400, f"{param}: the file has no name; give file.filename with its extension (report.pdf), "
                            "which says how it is read", param=param)
    return "document" + suffix


def _base_name(filename: str | None) -> str:
    """`filename` without the folders a client may have put in it, at most NAME_CHARS characters with its
    extension kept; "" when nothing is left (no name, ".", "..")."""
    base = (filename or "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    if base in (".", ".."):
        return ""
    stem, dot, suffix = base.rpartition(".")
    if dot and stem and len(suffix) <= SUFFIX_CHARS:
        return stem[:NAME_CHARS - 1 - len(suffix)] + "." + suffix
    return base[:NAME_CHARS]


def decoded_size(file_data: str) -> int:
    """How many bytes `file_data` (base64, or a data: URL with base64) decodes to, if it is valid, counted without
    decoding it: its base64 characters, less the padding."""
    payload = file_data.partition(",")[2] if file_data[:5].lower() == "data:" else file_data
    characters = len(payload) - sum(payload.count(space) for space in " \t\r\n")
    return max(0, characters * 3 // 4 - payload.rstrip().endswith("=") - payload.rstrip().endswith("=="))


def _refuse_file_size(size: int, name: str, param: str, limits: DocumentLimits) -> None:
    """ApiError 400 for a file of `size` bytes, decoded, over max_file_bytes."""
    if size > limits.max_file_bytes:
        raise ApiError(400, f"{param}: {name} is {format_size(size)}; this server reads at most "
                            f"{format_size(limits.max_file_bytes)} from one file", param=param,
                       code="file_too_large")


def documents_field(plan: PromptPlan, documents: Sequence[ChatDocument]) -> dict:
    """What a reply was given of its request's documents, for the `specchat` field of the answer: each document
    (name, kind, pages, read "whole" or as "passages"), the sources (each document whole, or each passage with its
    page and place: `label` as the prompt names it), and how many of the oldest messages were left out."""
    return {
        "documents": [{"name": d.name, "kind": d.document.kind, "pages": d.document.pages,
                       "read": "passages" if d.name in plan.meter.as_passages else "whole"} for d in documents],
        "sources": [{"name": s.name, "page": s.page, "passage": s.passage, "label": s.label} for s in plan.sources],
        "left_out_messages": plan.left_out,
    }
