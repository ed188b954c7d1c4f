"""Documents attached to the message being typed, from the file to the chip and on to the sent message.

A file comes from the paperclip button's dialog, a drop on the window, or a paste in the composer (ui/composer.py).
Each is read on the session's background thread (documents.reading.read_document, which bounds its size, pages and
time and hears Cancel between chunks and pages), one after another: the tray above the composer says which is being
read and how far ("Reading report.pdf… 40%"), with Cancel. A document read becomes a chip; a file that cannot be
read is said on the tray's red line, and the text typed and the other chips stay. Send hands the chips' documents to
Conversations.ask with the message (MainWindow.send), and once it is saved the chips go. A sent message shows its
documents as chips in the transcript, and a reply the sources it was given; clicking either opens the text in a
DocumentViewer. The context meter under the composer (ui/context_meter.py) measures the next send with the chips.
Only plain data crosses threads: a path, the cancel event and the tokenizer in, percents and a Document out.

Tokens are counted on the same background thread, never on the GUI thread (a megabyte takes two seconds): a
document's as it is read; after a model change, each chip's again, the chip saying "counting tokens…" until its
count is in; and the texts the meter's plan owes (DeferredCounts: a stored document without a count, passages read
for the first time under this model), the meter guessing them and saying "counting tokens…" until then.
"""

from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QEvent, QObject, QSettings, QStandardPaths, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFileDialog, QToolButton

from ..chats import OpenChat
from ..chats.context_plan import COUNTING, ContextMeter, DeferredCounts, counter_for
from ..core.errors import DocumentError
from ..core.formatting import format_size
from ..documents.formats import KIND_BY_SUFFIX
from ..documents.document import Document
from ..documents.reading import read_document, shown_name
from ..engine.chat_engine import PromptFitter
from .attachment_tray import AttachmentTray, paperclip_icon
from .composer import MAX_FILES_AT_ONCE, dropped_files
from .context_meter import ContextMeterPanel
from .document_viewer import DocumentViewer
from .workers import FunctionWorker, ReportingWorker, log_unexpected

MAX_PENDING = MAX_FILES_AT_ONCE  # documents one message may take from the window
KIND_LABELS = {"text": "Text", "markdown": "Markdown", "code": "Code", "pdf": "PDF", "docx": "Word (DOCX)",
               "html": "HTML"}


@dataclass(frozen=True)
class Attachment:
    """A document read for the message being typed, and its tokens under the model loaded now (None: no local
    model, or `counting`: being counted on the background thread after a model change)."""

    document: Document
    tokens: int | None = None
    counting: bool = False


def chip_text(document: Document, tokens: int | None = None, counting: bool = False) -> str:
    """What a chip says: "report.pdf · 12 pages · 3,400 tokens" (pages for a format that has them, tokens when
    counted; "counting tokens…" while `counting`)."""
    parts = [document.name]
    if document.pages is not None:
        parts.append(f"{document.pages:,} page{'s' if document.pages != 1 else ''}")
    if tokens is not None:
        parts.append(f"{tokens:,} tokens")
    elif counting:
        parts.append(COUNTING)
    return " · ".join(parts)


ATTACH_FOLDER_KEY = "attachments/folder"  # QSettings: the folder files were last attached from


def start_folder(settings: QSettings) -> str:
    """Where the paperclip's dialog opens: the folder files were last attached from while it is still there, else
    the user's Documents folder, else their home; never the folder specchat happened to be started in."""
    kept = settings.value(ATTACH_FOLDER_KEY)
    if isinstance(kept, str) and os.path.isdir(kept):
        return kept
    documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return documents if documents and os.path.isdir(documents) else os.path.expanduser("~")


def file_filter() -> str:
    """The file dialog's filter: every format specchat reads, then each kind (documents.formats' list), then all."""
    by_kind: dict[str, list[str]] = {}
    for suffix, kind in KIND_BY_SUFFIX.items():
        by_kind.setdefault(kind, []).append(f"*{suffix}")
    every = " ".join(pattern for patterns in by_kind.values() for pattern in patterns)
    kinds = [f"{KIND_LABELS[kind]} ({' '.join(patterns)})" for kind, patterns in by_kind.items()]
    return ";;".join([f"Documents ({every})", *kinds, "All files (*)"])


def read_attachment(path: str, cancel: threading.Event, report, tokenizer) -> Attachment:
    """Reads the file at `path` (on the background thread), reporting whole percents through `report`, and counts
    its tokens with `tokenizer` (None: not counted), warming the counts the meter reads. Raises DocumentError (its
    ReadCancelled when `cancel` was set); an unexpected failure becomes one too, in a plain line, its traceback on
    stderr."""
    said = [-1]

    def progress(fraction: float) -> None:
        percent = max(0, min(100, int(fraction * 100)))
        if percent != said[0]:
            said[0] = percent
            report(percent)

    try:
        document = read_document(Path(path), cancel=cancel, progress=progress)
        tokens = _counted(document, tokenizer) if tokenizer is not None else None
    except DocumentError:
        raise
    except Exception as error:  # a bug in a reader, or memory: said plainly, the window goes on
        log_unexpected(error)
        raise DocumentError(f"{shown_name(Path(path).name)} could not be read: something unexpected went wrong "
                            f"({type(error).__name__}). It was not attached.") from error
    return Attachment(document, tokens)


def _counted(document: Document, tokenizer) -> int:
    """The document's tokens under `tokenizer`, counted with its passages (texts_to_count), here on the background
    thread."""
    count = counter_for(tokenizer)
    for text in texts_to_count(document):
        count(text)
    return count(document.text)


def texts_to_count(document: Document) -> list[str]:
    """What is counted of a document off the GUI thread: its passages, so that the meter's plan (which counts them
    when the document does not fit whole) finds them counted, then its text (counted last, remembered longest)."""
    return [passage.text for passage in document.passages] + [document.text]


def count_texts(tokenizer, texts: list[str], cancel: threading.Event) -> None:
    """Counts `texts` with `tokenizer`'s TokenCounter (on the background thread), which remembers them for the GUI
    thread's plans; stops at the next text once `cancel` is set."""
    count = counter_for(tokenizer)
    for text in texts:
        if cancel.is_set():
            return
        count(text)


def attached_to(chat: OpenChat | None, message_id: int | None) -> dict:
    """The MessageView fields of message `message_id`'s documents (a user message's chips), sources (what a
    reply was given) and copied spans (a reply's drafts found in a document, for their tooltips), from the open
    chat in memory."""
    if chat is None or message_id is None:
        return {}
    documents = tuple((d.document_id, chip_text(d.document, d.tokens)) for d in chat.documents
                      if d.message_id == message_id and d.document_id is not None)
    sources = tuple(source.label for source in chat.sources.get(message_id, ()))
    return {"documents": documents, "sources": sources, "copied": chat.copied_sources(message_id)}


def local_prompts(session) -> PromptFitter | None:
    """The loaded local model's PromptFitter (its tokenizer and window), or None: no model ready, or the replies
    come from a remote engine, which fits its prompt itself."""
    if session.remote is not None or not session.ready or session.engines is None:
        return None
    return session.engines.fitter()


class FileRead(QObject):
    """One file queued or being read: its job on the background thread and its Cancel. A QObject child of the
    Attachments, so that what the job reports after the window is gone is dropped with it."""

    def __init__(self, owner: Attachments, path: str, tokenizer):
        super().__init__(owner)
        self.owner = owner
        self.name = shown_name(Path(path).name)
        self.cancel = threading.Event()
        self.percent = 0
        self.job = ReportingWorker(lambda report: read_attachment(path, self.cancel, report, tokenizer),
                                   self.cancel, if_not_run=None)
        self.job.yielded.connect(self._on_progress)
        self.job.returned.connect(self._on_read)
        self.job.errored.connect(self._on_failed)

    def _on_progress(self, percent: int) -> None:
        self.percent = percent
        self.owner._show_reading()

    def _on_read(self, attachment: Attachment | None) -> None:
        self.owner._ended(self, attachment, None)

    def _on_failed(self, message: str) -> None:
        self.owner._ended(self, None, message)


class Attachments(QObject):
    """The window's attachments: the paperclip button, the tray and the context meter (widgets the window lays
    out), the files being read, and the documents pending for the message being typed. The window calls
    documents() and sent() around Conversations.ask, chat_changed() when another chat opens, and open_link() for
    the transcript's document and source links."""

    read_ended = Signal()  # for tests: a read ended (a chip added, a problem said, or cancelled)
    counted = Signal()  # for tests: a count on the background thread ended, and the chips and the meter took it

    def __init__(self, window, composer):
        super().__init__(window)
        self.window, self.session, self.composer = window, window.session, composer
        self.pending: list[Attachment] = []
        self.reads: list[FileRead] = []  # in the order they were queued; the first is being read
        self.count_job: FunctionWorker | None = None  # the count on the background thread, if one runs or waits
        self._counting_with = None  # its tokenizer
        self._uncountable: weakref.WeakSet = weakref.WeakSet()  # tokenizers whose background count failed
        self.tray = AttachmentTray()
        self.tray.cancel_requested.connect(self.cancel_read)
        self.tray.remove_requested.connect(self.remove)
        self.meter = ContextMeterPanel(self.measure)
        self.attach_button = QToolButton(toolTip="Attach a document", autoRaise=False)
        self.attach_button.setIcon(paperclip_icon(window.palette().color(QPalette.ColorRole.ButtonText)))
        self.attach_button.clicked.connect(self.choose_files)
        composer.files_given.connect(self.attach_files)
        composer.textChanged.connect(self.meter.schedule)
        self.session.status_changed.connect(self._on_model_changed)
        window.reply_finished.connect(self.meter.refresh)
        window.setAcceptDrops(True)
        window.installEventFilter(self)
        self.meter.refresh()

    # -- adding ---------------------------------------------------------------------------------------------------

    def choose_files(self) -> None:
        """The paperclip: asks for files, in the formats specchat reads, from the folder the last ones came from
        (start_folder), and attaches them."""
        settings = QSettings()
        paths, _ = QFileDialog.getOpenFileNames(self.window, "Attach documents", start_folder(settings), file_filter())
        if paths:
            settings.setValue(ATTACH_FOLDER_KEY, os.path.dirname(os.path.abspath(paths[0])))
            self.attach_files(paths)

    def attach_files(self, paths: list[str]) -> None:
        """Queues each file to be read on the background thread (a chip appears for each once it is read); the
        message and chips already there stay. Files beyond MAX_PENDING are refused, said on the tray."""
        room = MAX_PENDING - len(self.pending) - len(self.reads)
        if len(paths) > room:
            self.tray.problem.show_message(f"A message takes at most {MAX_PENDING} documents: "
                                           f"{len(paths) - max(room, 0)} of these were not attached.")
        prompts = local_prompts(self.session)
        for path in paths[:max(room, 0)]:
            read = FileRead(self, str(path), prompts.tokenizer if prompts is not None else None)
            self.reads.append(read)
            self.session.background.submit(read.job)
        self._show_reading()

    def eventFilter(self, watched, event) -> bool:
        """Files dragged onto the window (anywhere a widget does not take them itself) are attached when dropped."""
        if watched is self.window and event.type() in (QEvent.Type.DragEnter, QEvent.Type.DragMove,
                                                       QEvent.Type.Drop):
            files = dropped_files(event.mimeData())
            if files:
                event.acceptProposedAction()
                if event.type() == QEvent.Type.Drop:
                    self.attach_files(files)
                return True
        return super().eventFilter(watched, event)

    # -- reading --------------------------------------------------------------------------------------------------

    def reading(self) -> bool:
        """Whether files are being read (Send waits for them: a message goes with all its documents)."""
        return bool(self.reads)

    def cancel_read(self) -> None:
        """Cancel: stops reading the file being read (at its next chunk or page); the next one in line goes on."""
        if self.reads:
            self.reads[0].cancel.set()

    def _show_reading(self) -> None:
        if not self.reads:
            self.tray.hide_reading()
            return
        first, waiting = self.reads[0], len(self.reads) - 1
        more = f"   ({waiting} more waiting)" if waiting else ""
        self.tray.show_reading(f"Reading {first.name}… {first.percent}%{more}", first.percent)

    def _ended(self, read: FileRead, attachment: Attachment | None, message: str | None) -> None:
        """A read ended: its document becomes a chip, or the tray says why not (nothing for a cancelled read)."""
        if read in self.reads:
            self.reads.remove(read)
        read.deleteLater()
        if read.cancel.is_set():
            self.window.statusBar().showMessage(f"Stopped reading {read.name}.", 4000)
        elif message is not None:
            self.tray.problem.show_message(message)
        elif attachment is not None:
            self._add(attachment)
        self._show_reading()
        self.read_ended.emit()

    def _add(self, attachment: Attachment) -> None:
        if any(p.document.sha256 == attachment.document.sha256 for p in self.pending):
            self.tray.problem.show_message(f"{attachment.document.name} is attached already.")
            return
        self.pending.append(attachment)
        self.tray.add_chip(chip_text(attachment.document, attachment.tokens), attachment)
        self._recount_chips()  # read under a model since changed: counted again under this one
        self.meter.refresh()

    # -- the message's documents ----------------------------------------------------------------------------------

    def documents(self) -> list[Document]:
        """The documents to send with the message, in the order they were attached."""
        return [attachment.document for attachment in self.pending]

    def known_tokens(self) -> Callable[[str], int | None] | None:
        """The loaded model's remembered token counts (TokenCounter.known: a text counted where it was read, else
        None; nothing is counted here, on the GUI thread), for the documents sent with a message, whose chips then
        give their tokens; None without a local model."""
        prompts = local_prompts(self.session)
        return counter_for(prompts.tokenizer).known if prompts is not None else None

    def remove(self, attachment: Attachment) -> None:
        """A chip's ×: the document is not sent."""
        self.pending = [p for p in self.pending if p is not attachment]
        self.tray.remove_chip(attachment)
        self.meter.refresh()

    def sent(self) -> None:
        """The message and its documents are saved: the chips (and any problem said) go."""
        self.pending = []
        self.tray.clear_chips()
        self.tray.problem.hide()
        self.meter.refresh()

    def chat_changed(self) -> None:
        """Another chat (or none) is open: the meter measures it."""
        self.meter.refresh()

    def _on_model_changed(self) -> None:
        """Another model (or a remote engine, or none): the chips count their tokens with it, and the meter too."""
        self._recount_chips()
        self.meter.schedule()

    def _recount_chips(self) -> None:
        """Each chip's tokens under the model loaded now: at once when its TokenCounter knows them, else "counting
        tokens…" while the background thread counts them (count_later); no count without a local model."""
        prompts = local_prompts(self.session)
        counter = counter_for(prompts.tokenizer) if prompts is not None else None
        countable = counter is not None and prompts.tokenizer not in self._uncountable
        owed: list[str] = []
        for index, attachment in enumerate(self.pending):
            tokens = counter.known(attachment.document.text) if counter is not None else None
            counting = countable and tokens is None
            if counting:
                owed += texts_to_count(attachment.document)
            if (tokens, counting) != (attachment.tokens, attachment.counting):
                self.pending[index] = updated = replace(attachment, tokens=tokens, counting=counting)
                chip = next(c for c in self.tray.chips if c.key is attachment)
                chip.key = updated
                chip.set_text(chip_text(updated.document, tokens, counting))
        if owed:
            self.count_later(prompts.tokenizer, owed)

    # -- counting off the GUI thread ------------------------------------------------------------------------------

    def count_later(self, tokenizer, texts: list[str]) -> bool:
        """Counts `texts` with `tokenizer` on the session's background thread (count_texts), after the reads queued
        before; when the count is in, the chips and the meter take it (_on_counted). One count at a time: while one
        runs, what more is owed is asked for again when it ends. False when counting with this tokenizer failed
        before (the caller shows its guess, not "counting tokens…")."""
        if tokenizer in self._uncountable:
            return False
        if self.count_job is None:
            cancel = threading.Event()
            job = FunctionWorker(lambda: count_texts(tokenizer, texts, cancel), cancel, if_not_run=None)
            job.returned.connect(self._on_counted)
            job.errored.connect(self._on_count_failed)
            try:
                self.session.background.submit(job)
            except RuntimeError:  # the session has shut down (the window is closing): nothing more is counted
                return False
            self.count_job, self._counting_with = job, tokenizer
        return True

    def _on_counted(self, _nothing=None) -> None:
        """The count on the background thread ended: the chips and the meter take what it counted (and ask for
        what is still owed), unless it was stopped (the window is closing)."""
        job, self.count_job, self._counting_with = self.count_job, None, None
        if job is not None and job.cancel.is_set():
            return
        self._recount_chips()
        self.meter.refresh()
        self.counted.emit()

    def _on_count_failed(self, _message: str) -> None:
        """The count on the background thread failed (its traceback is on stderr): the chips and the meter show what
        they know and guess the rest, without counting with this tokenizer again."""
        if self._counting_with is not None:
            self._uncountable.add(self._counting_with)
        self._on_counted()

    # -- the meter ------------------------------------------------------------------------------------------------

    def measure(self) -> ContextMeter | None:
        """The context meter of sending the composer's text now, with the pending documents, in the open chat (cut
        where an edit will cut it); None without a local model. What the model's TokenCounter has not counted yet
        is guessed, and counted on the background thread (count_later), after which the meter is measured again."""
        prompts = local_prompts(self.session)
        if prompts is None:
            return None
        window = self.window
        chat = window.chat if window.chat is not None and window.chat.conversation_id == window.conversation_id \
            else OpenChat(-1)
        editing = window._editing
        if editing is not None and editing[0] == chat.conversation_id:
            chat = replace(chat, messages=list(chat.messages), documents=list(chat.documents))
            chat.cut_from(editing[1])
        search = window.conversations.search_for(chat.conversation_id) if chat.documents else None
        deferred = DeferredCounts(counter_for(prompts.tokenizer))  # never waits for the tokenizer (module's note)
        typed, pending = self.composer.toPlainText().strip(), self.documents()
        meter = chat.plan(prompts, self.session.settings.max_new_tokens, search,
                          typed=typed, pending=pending, deferred=deferred).meter
        if not typed and not pending:  # nothing to send yet: not even the markers of a turn
            meter = replace(meter, message=0)
        owed = deferred.owed
        return replace(meter, counting=True) if owed and self.count_later(prompts.tokenizer, owed) else meter

    # -- the transcript's links -----------------------------------------------------------------------------------

    def open_link(self, action: str, message_id: int) -> DocumentViewer | None:
        """A document chip under a sent message ("document:ID") or a reply's source ("source:N"): opens what it
        names in a viewer beside the chat; returns it (None when the chat no longer holds it)."""
        chat = self.window.chat
        kind, _, number = action.partition(":")
        if chat is None or not number.isdigit():
            return None
        if kind == "document":
            return self._show_document(chat, int(number))
        active = self.window.active
        sources = chat.sources.get(message_id) or (active.sources if active and active.message_id == message_id
                                                   else ())
        if int(number) >= len(sources):
            return None
        source = sources[int(number)]
        if source.passage is None:
            return self._show_document(chat, source.document_id)
        return self._show(DocumentViewer(source.label, "The passage the reply was given", source.text, self.window))

    def _show_document(self, chat: OpenChat, document_id: int | None) -> DocumentViewer | None:
        found = next((d.document for d in chat.documents if d.document_id == document_id), None)
        if found is None:
            return None
        details = [KIND_LABELS.get(found.kind, found.kind)]
        if found.pages is not None:
            details.append(f"{found.pages:,} page{'s' if found.pages != 1 else ''}")
        details += [f"{len(found.text):,} characters", format_size(found.size_bytes)]
        return self._show(DocumentViewer(found.name, " · ".join(details), found.text, self.window))

    @staticmethod
    def _show(viewer: DocumentViewer) -> DocumentViewer:
        viewer.show()
        viewer.raise_()
        return viewer
