"""The main window: conversations on the left, the live transcript and the composer on the right."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QInputDialog, QLabel, QMainWindow, QMessageBox, QProgressBar,
                               QPushButton, QSplitter, QVBoxLayout, QWidget)

from ..chats import OpenChat, ReplyBegan, ReplyEnded, ReplySpans, StepBatch
from ..chats.continuation import can_continue
from ..chats.reply_controller import StreamingReply
from ..core.errors import SpecchatError, StorageError
from ..engine.decoding.events import GenerationResult
from .api_server import ApiServerSwitch
from .attachments import Attachments, attached_to
from .banner import ErrorBanner
from .chat_files import ChatFiles
from .chat_pages import ChatPages
from .composer import Composer
from .plain import ElidedLabel
from .remote_target import RemoteTargetSwitch
from .reply_workers import GenerationWorker
from .session import ChatSession
from .settings import SettingsDialog
from .sidebar import Sidebar
from .theme import current_theme
from .transcript import MessageView, Transcript, branch_of, code_blocks

DELETE_QUESTION = "Delete this message and everything under it, on every branch from it? This cannot be undone."


class MainWindow(QMainWindow):
    """The chat window: it reads and writes its chats through session.conversations, and its replies run through
    session.replies (chats/reply_controller.py: fit, begin, gather and save the steps, finish), each of whose calls
    returns what the window draws; it never touches the Store itself.

    `chat` is the open chat as stored (chats.OpenChat), read when it is opened and kept up to date by what the
    window and the controller write: a reply reads nothing back, and the whole chat is drawn once, as it ends."""

    reply_finished = Signal()  # for tests: a reply (finished, stopped or failed) is on screen and on disk

    def __init__(self, session: ChatSession):
        super().__init__()
        self.session = session
        self.conversations = session.conversations
        self.setWindowTitle("specchat")
        self.replies = session.replies
        self.conversation_id: int | None = None
        self.chat: OpenChat | None = None
        self._cancel: threading.Event | None = None  # how to stop the reply streaming now, if any
        self._waiting: int | None = None  # the chat whose message, sent while the model loaded, awaits its reply
        # The message being edited, as (its conversation, its position, its id): sending adds a sibling of it (a
        # branch), in that conversation only; opening another chat or starting a new one ends the edit.
        self._editing: tuple[int, int, int] | None = None
        self.race_window = None
        self.dashboard = None
        self._build()
        self.files = ChatFiles(self)  # Export and Import (an import runs on the session's background thread)
        session.status_changed.connect(self._on_model_status)
        session.stats_changed.connect(self._refresh_session_stats)
        self._restore_geometry()
        self.refresh_conversations()
        self.transcript.set_messages([])  # the welcome text
        self._refresh_session_stats()
        self._on_model_status()

    @property
    def active(self) -> StreamingReply | None:
        """The reply streaming now (the reply controller's), or None."""
        return self.replies.active

    # -- layout ---------------------------------------------------------------------------------------------------

    def _build(self) -> None:
        """The window's widgets: the chat list beside the chat (its bar, banner, transcript and composer), and the
        status bar's model and chat figures."""
        self.splitter = QSplitter()
        self.sidebar = Sidebar(self)  # New chat, New folder, the search box, the chats and folders, the hits
        self.search, self.conversation_list = self.sidebar.search, self.sidebar.lists
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(self._build_chat())
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([240, 760])
        self.setCentralWidget(self.splitter)

        # Model names (read from files and servers) and the chat's figures share the status bar: both give way,
        # cut with "…", the model's first (its stretch), so that they never run into each other.
        self.model_label = ElidedLabel(minimum_width=120)
        self.load_progress = QProgressBar(maximumWidth=160, textVisible=False)
        self.load_progress.setRange(0, 0)
        self.session_label = ElidedLabel(minimum_width=120)
        self.statusBar().addWidget(self.model_label, 1)
        self.statusBar().addWidget(self.load_progress)
        self.statusBar().addPermanentWidget(self.session_label)
        self._build_actions()

    def _build_chat_bar(self) -> QHBoxLayout:
        """The bar above the chat: the drafts' legend and options, the system prompt, the race and statistics."""
        self.highlight_box = QCheckBox("Highlight drafts", checked=True)
        self.rejected_box = QCheckBox("Show rejected", checked=False)
        for box in (self.highlight_box, self.rejected_box):
            box.toggled.connect(self._on_highlight_options)
        legend = QLabel()
        legend.setTextFormat(Qt.TextFormat.RichText)
        legend.setText(self._legend_html())
        legend.setToolTip("Green: tokens a draft proposed and the target accepted. Plain: tokens the target "
                          "generated itself. Struck through: draft proposals the target rejected.")
        self.system_button = QPushButton("System prompt…")
        self.system_button.clicked.connect(self.edit_system_prompt)
        self.race_button = QPushButton("Race…")
        self.race_button.setToolTip("Race plain decoding against the drafters on the prompt in the box "
                                    "(Ctrl+Shift+R)")
        self.race_button.clicked.connect(self.open_race)
        self.dashboard_button = QPushButton("Statistics…")
        self.dashboard_button.setToolTip("Charts of every reply's speedup and acceptance (Ctrl+Shift+D)")
        self.dashboard_button.clicked.connect(self.open_dashboard)
        bar = QHBoxLayout()
        bar.addWidget(legend)
        bar.addStretch(1)
        bar.addWidget(self.highlight_box)
        bar.addWidget(self.rejected_box)
        bar.addWidget(self.system_button)
        bar.addWidget(self.race_button)
        bar.addWidget(self.dashboard_button)
        return bar

    def _build_chat(self) -> QWidget:
        """The chat: its bar, the banner, the transcript and the composer with Send and Stop."""
        bar = self._build_chat_bar()
        self.banner = ErrorBanner()
        self.transcript = Transcript()
        self.transcript.action_requested.connect(self._on_transcript_action)
        # A long chat's transcript draws what is near its view; these give it the rest, reading older messages
        self.pages = ChatPages(lambda: self.chat, self._view, lambda: next(
            (m.message_id for m in self.transcript.messages[:1]), None), self._show_error)
        self.transcript.pager.pages = self.pages
        self.composer = Composer()
        self.composer.submitted.connect(self.send)
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.stop_button.setVisible(False)
        self.attachments = Attachments(self, self.composer)  # the paperclip, the chips and the context meter
        composer_row = QHBoxLayout()
        composer_row.addWidget(self.composer, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.attachments.attach_button)
        buttons.addStretch(1)
        composer_row.addLayout(buttons)

        chat = QWidget()
        chat_layout = QVBoxLayout(chat)
        chat_layout.setContentsMargins(4, 8, 8, 8)
        chat_layout.addLayout(bar)
        chat_layout.addWidget(self.banner)
        chat_layout.addWidget(self.transcript, 1)
        chat_layout.addWidget(self.attachments.tray)
        chat_layout.addLayout(composer_row)
        chat_layout.addWidget(self.attachments.meter)
        return chat

    def _build_actions(self) -> None:
        def action(text, shortcut, slot, menu):
            item = QAction(text, self)
            item.setShortcut(QKeySequence(shortcut))
            item.triggered.connect(slot)
            menu.addAction(item)
            return item

        chat_menu = self.menuBar().addMenu("&Chat")
        action("&New chat", "Ctrl+N", self.new_conversation, chat_menu)
        action("&Search chats", "Ctrl+F", lambda: self.search.setFocus(), chat_menu)
        action("S&top reply", "Esc", self.stop, chat_menu)
        action("&Regenerate last reply", "Ctrl+R", self.regenerate, chat_menu)
        action("Pre&vious version", "Alt+Left", lambda: self._flip_last("previous"), chat_menu)
        action("Ne&xt version", "Alt+Right", lambda: self._flip_last("next"), chat_menu)
        chat_menu.addSeparator()
        action("Export as &Markdown…", "Ctrl+Shift+M", lambda: self.files.export("md"), chat_menu)
        action("Export as &JSON…", "Ctrl+Shift+J", lambda: self.files.export("json"), chat_menu)
        action("&Import JSON…", "Ctrl+I", lambda: self.files.import_chat(), chat_menu)
        chat_menu.addSeparator()
        action("&Quit", "Ctrl+Q", self.close, chat_menu)
        view_menu = self.menuBar().addMenu("&View")
        action("&Race drafters side by side…", "Ctrl+Shift+R", self.open_race, view_menu)
        action("Statistics &dashboard…", "Ctrl+Shift+D", self.open_dashboard, view_menu)
        settings_menu = self.menuBar().addMenu("&Settings")
        action("&Preferences…", "Ctrl+,", self.open_settings, settings_menu)
        help_menu = self.menuBar().addMenu("&Help")
        action("&About specchat", "F1", self.open_about, help_menu)
        self.api_server = ApiServerSwitch(self, self.session)  # the API menu, before Help
        self.remote_target = RemoteTargetSwitch(self, self.session, self.api_server.menu)

    def _legend_html(self) -> str:
        theme = current_theme()
        return (f"<span style='background:{theme.draft_background.name()}'>&nbsp;accepted draft&nbsp;</span>"
                f"&nbsp;&nbsp;target&nbsp;&nbsp;<span style='color:{theme.rejected_text.name()};"
                f"text-decoration:line-through'>rejected</span>")

    # -- conversations --------------------------------------------------------------------------------------------

    def refresh_conversations(self) -> None:
        """Reads the chat list again (the sidebar's tree, and its hits while searching), the open chat selected."""
        self.sidebar.refresh()

    def new_conversation(self) -> None:
        if self._busy():
            return
        self._end_edit()
        self.conversation_id = None
        self.chat = None
        self.sidebar.select(None)
        self.transcript.set_messages([])
        self.attachments.chat_changed()
        self.composer.setFocus()

    def open_conversation(self, conversation_id: int) -> None:
        """Shows the chat, read in one go with its replies' footers (Conversations.open). An imported chat seen for
        the first time joins the past replies the drafters read: the only write opening a chat can make."""
        if self._editing is not None and self._editing[0] != conversation_id:
            self._end_edit()
        self.conversation_id = conversation_id
        self.chat = self.conversations.open(conversation_id)
        self.transcript.set_messages(self._views())
        self.attachments.chat_changed()
        if not self.chat.in_history:
            self.session.include_in_history(conversation_id)  # now seen: its replies may be drafted from
        self._refresh_session_stats()

    def _open_chat(self) -> OpenChat:
        """The open chat in memory; read first when it is not (a chat chosen by its id alone, or one that a refused
        write left unsure), so that it is never read after this reply's writes."""
        if self.chat is None or self.chat.conversation_id != self.conversation_id or self.chat.stale:
            self.chat = self.conversations.open(self.conversation_id)
        return self.chat

    def _end_edit(self) -> None:
        """Leaves editing: the text stays in the box, and sending it adds a new message instead of replacing one."""
        if self._editing is not None:
            self._editing = None
            self.statusBar().showMessage("Editing ended: sending now adds a new message.", 5000)

    def _views(self) -> list[MessageView]:
        """What the transcript is given of the open chat: its messages from the first one drawn (a chat just opened:
        its last screen; the transcript asks self.pages for the others as its view nears them)."""
        return self.pages.shown()

    def _view(self, m) -> MessageView:
        """How the transcript shows the open chat's message `m`: with its spans (and the rejected proposals seen
        this session) and footer, all from memory."""
        chat, rejected = self.chat, self.replies.rejected
        return MessageView(m.id, m.role, m.text, ReplySpans.from_json(m.spans, rejected.get(m.id)), m.stopped,
                           chat.footers.get(m.id, ""), **attached_to(chat, m.id), branch=branch_of(m),
                           continuable=m is chat.messages[-1] and can_continue(m))

    def edit_system_prompt(self) -> None:
        if self.conversation_id is None:
            made = self.conversations.create("New chat")
            self.conversation_id, self.chat = made.id, OpenChat.of(made)
            self.refresh_conversations()
        chat = self._open_chat()
        text, ok = QInputDialog.getMultiLineText(self, "System prompt", "Instructions for this chat:",
                                                 chat.system_prompt or "")
        if ok:
            chat.system_prompt = self.conversations.set_system_prompt(chat.conversation_id,
                                                                      text.strip() or None).system_prompt

    # -- sending and streaming ------------------------------------------------------------------------------------

    def send(self) -> None:
        """Saves the message in the box to the open chat (a new one if none is open; replacing the message being
        edited and what followed) and starts the reply to it."""
        text = self.composer.toPlainText().strip()
        if not text or self._busy():
            return
        if not self.session.ready and not self.session.loading:
            self.statusBar().showMessage("No model is loaded (Settings chooses one); your message stays in the box.",
                                         5000)
            return
        if self.session.device_busy():
            self.statusBar().showMessage("A race or benchmark is using the model; your message stays in the box "
                                         "until it ends.", 5000)
            return
        if self.attachments.reading():
            self.statusBar().showMessage("A document is still being read: send once it is attached.", 5000)
            return
        try:
            if self.conversation_id is None:
                made = self.conversations.start(text)
                self.conversation_id, self.chat = made.id, OpenChat.of(made)
            chat = self._open_chat()
            edited = chat.message(self._editing[2]) if self._editing and self._editing[0] == chat.conversation_id \
                else None
            self.conversations.ask(chat, text, self.attachments.documents(), self.attachments.known_tokens(),
                                   instead_of=edited)
            self._editing = None
        except StorageError as error:  # the message is not saved: it stays in the box (its chips too), to send again
            self._show_error(f"Your message could not be saved ({error}). It is still in the box: send it again "
                             "when the database is free.")
            return
        self.banner.hide()  # an earlier error (say, the same message refused) is over now that it is saved
        self.composer.clear()
        self.attachments.sent()
        self.refresh_conversations()
        self.transcript.show_messages(self._views())  # the message just sent, drawn after what is shown
        if self.session.loading:  # saved now; its reply starts when the model is ready (_on_model_status)
            self._waiting = self.conversation_id
            self.transcript.show_pending("The model is still loading: this reply starts as soon as it is ready.")
            return
        self._start_reply()

    def _start_reply(self, sample_at: float | None = None, continuing: int | None = None) -> None:
        """Starts the reply to the open chat (or goes on with its last reply, `continuing`: ReplyController's
        continue_reply): ReplyController.start fits its prompt once and writes its rows, the window draws its start,
        and its job goes to the model thread, whose batches of steps come back to _on_steps; says why when it
        cannot start."""
        try:
            began = (self.replies.start(self._open_chat(), self.session.reply_engine(), sample_at=sample_at)
                     if continuing is None else
                     self.replies.continue_reply(self._open_chat(), self.session.reply_engine(), continuing))
        except StorageError as error:
            self._show_error(f"The reply could not start: {error}")
            return
        except SpecchatError as error:  # a drafter this pair cannot run, a last message too long
            self._show_error(str(error))
            return
        self._on_reply_began(began)
        self._cancel = cancel = threading.Event()
        worker = GenerationWorker(began.job, cancel)
        worker.yielded.connect(self._on_steps)
        worker.returned.connect(self._on_finished)
        worker.errored.connect(self._on_failed)
        self.session.model_thread.submit(worker)

    def _on_reply_began(self, began: ReplyBegan) -> None:
        """The reply's rows are on disk: its region opens at the end of the chat, and the window streams."""
        self.transcript.begin_reply(began.note, tuple(source.label for source in began.sources), began.message_id,
                                    began.text, began.spans)
        if began.note:
            self.statusBar().showMessage(began.note, 15000)
        self._set_generating(True)
        self.session.claim_device("chat")

    def _on_steps(self, batch: StepBatch) -> None:
        """A frame's steps (reply_workers.frames batches them): the controller gathers them and now and then saves
        the reply so far; the window appends their text to the reply's region (draft-accepted text in its colour),
        says the speed, and says a refused save."""
        arrived = self.replies.steps(batch, time.perf_counter())
        if arrived is None:
            return
        for event in arrived.events:
            self.transcript.append_stream(event)
        stats = arrived.stats
        self.statusBar().showMessage(f"{stats.new_tokens} tokens · {stats.tokens_per_s:.1f} tok/s")
        if arrived.trouble:
            self._show_error(arrived.trouble)

    def _on_finished(self, result: GenerationResult) -> None:
        self._on_reply_ended(self.replies.finish(result))

    def _on_failed(self, message: str) -> None:
        self._on_reply_ended(self.replies.fail(message))

    def _on_reply_ended(self, ended: ReplyEnded) -> None:
        """The reply ended, saved or not: a completed run first tells the windows that the statistics changed; the
        window is freed (sidebar, Send, the device claim), the chat is drawn once, with the reply as stored (or from
        memory, "not saved", with a banner saying so), and then tests (and anything waiting) learn the reply
        ended."""
        if ended.runs_changed:
            self.session.stats_changed.emit()  # (this window's figures among them)
        self._end_reply()
        if self.conversation_id == ended.conversation_id:
            stored = self.chat.message(ended.message_id) if self.chat is not None else None
            self.transcript.end_reply(MessageView(ended.message_id, "assistant", ended.text, ended.spans,
                                                  ended.stopped, ended.footer, **attached_to(self.chat,
                                                                                             ended.message_id),
                                                  branch=branch_of(stored) if stored else (1, 1),
                                                  continuable=can_continue(stored)))
        if ended.problem:
            self._show_error(ended.problem)
        if not ended.runs_changed:  # (when it changed, stats_changed has refreshed the figures already)
            self._refresh_session_stats()
        if ended.saved and ended.note:
            self.statusBar().showMessage(ended.note, 15000)
        self.reply_finished.emit()

    def _end_reply(self) -> None:
        if self._cancel is not None:
            self.session.release_device("chat")
        self._cancel = None
        self._set_generating(False)
        self.statusBar().clearMessage()

    def stop(self) -> None:
        if self._cancel is not None:
            self._cancel.set()

    def regenerate(self) -> None:
        """Adds another reply beside the chat's last one (a branch: the last stays, one flip away), sampled when the
        chat decodes greedily (Settings: Regenerate temperature); answers the last message when it has no reply. The
        chat is read afresh first (its system prompt may have changed), before the reply writes anything."""
        if self._busy() or self.conversation_id is None or not self.session.ready:
            return
        chat = self.chat = self.conversations.open(self.conversation_id)
        last = chat.last_reply()
        try:
            if last is not None:
                self.conversations.branch_before(chat, last)
        except StorageError as error:
            self._show_error(f"The reply could not be regenerated: {error}")
            return
        self.transcript.show_messages(self._views())
        if chat.messages:
            self._start_reply(sample_at=self.session.settings.regenerate_temperature)

    def _on_transcript_action(self, action: str, message_id: int) -> None:
        chat = self.chat if self.chat is not None and self.chat.conversation_id == self.conversation_id else None
        message = chat.message(message_id) if chat is not None else self.conversations.message(self.conversation_id,
                                                                                                message_id)
        if action == "regenerate":
            self.regenerate()
        elif action == "continue":
            if not self._busy() and self.session.ready:
                self._start_reply(continuing=message_id)
        elif action in ("previous", "next", "fork", "delete"):
            self._branch_action(action, message_id)
        elif action.startswith(("document:", "source:")):
            self.attachments.open_link(action, message_id)
        elif message is None:
            return
        elif action == "copy":
            QGuiApplication.clipboard().setText(message.text)
            self.statusBar().showMessage("Copied the message.", 2000)
        elif action.startswith("copy-code:"):
            blocks = code_blocks(message.text)
            index = int(action.split(":")[1])
            if index < len(blocks):
                QGuiApplication.clipboard().setText(blocks[index])
                self.statusBar().showMessage(f"Copied code block {index + 1}.", 2000)
        elif action == "edit" and not self._busy():
            self.composer.setPlainText(message.text)
            self._editing = (self.conversation_id, message.position, message.id)
            self.composer.setFocus()
            self.statusBar().showMessage("Editing: sending adds your new version beside this one (‹ › flips "
                                         "between them).", 5000)

    def _flip_last(self, action: str) -> None:
        """Alt+Left and Alt+Right: ‹ or › on the last message on screen that has other versions."""
        chat = self.chat if self.chat is not None and self.chat.conversation_id == self.conversation_id else None
        branched = [m for m in chat.messages if len(m.siblings) > 1] if chat is not None else []
        if branched:
            self._branch_action(action, branched[-1].id)

    def _branch_action(self, action: str, message_id: int) -> None:
        """‹ and › flip the message to its sibling before or after, and show what followed it; "fork" makes a new
        chat of the branch down to the message and opens it; "delete", once the user agrees, deletes the message
        and everything under it (every branch from it), and shows the branch left."""
        if self._busy() or self.conversation_id is None:
            return
        try:
            if action == "delete":
                if QMessageBox.question(self, "Delete message", DELETE_QUESTION) == QMessageBox.StandardButton.Yes:
                    self._end_edit()
                    gone = self.conversations.delete_message(self.conversation_id, message_id)
                    self.open_conversation(self.conversation_id)
                    self.refresh_conversations()
                    self.statusBar().showMessage(f"Deleted {gone} message{'s' * (gone != 1)}.", 5000)
                return
            if action == "fork":
                made = self.conversations.fork(self.conversation_id, message_id)
                self.open_conversation(made.id)
                self.refresh_conversations()
                self.statusBar().showMessage(f"Branched into a new chat: “{made.title}”.", 5000)
                return
            self.chat = self.conversations.flip(self._open_chat(), message_id, -1 if action == "previous" else 1)
        except StorageError as error:
            self._show_error(f"That could not be done ({error}); the chat is as it was.")
            return
        self.transcript.show_messages(self._views())

    # -- race and dashboard ---------------------------------------------------------------------------------------

    def open_race(self) -> None:
        """The race window (one per main window), primed with the box's prompt or OpenChat.question_as_read."""
        from .race import RaceWindow

        if self.race_window is None:
            self.race_window = RaceWindow(self.session, self)  # its own window, deleted with this one
        prompt = self.composer.toPlainText().strip()
        if not prompt and self.conversation_id is not None:  # the last question, with the documents it was about
            prompt = self._open_chat().question_as_read()
        if prompt and not self.race_window.running():
            self.race_window.prompt.setPlainText(prompt)
        self.race_window.show()
        self.race_window.raise_()
        self.race_window.activateWindow()

    def open_dashboard(self) -> None:
        from .dashboard import DashboardWindow

        if self.dashboard is None:
            self.dashboard = DashboardWindow(self.session, self)
        self.dashboard.refresh()
        self.dashboard.show()
        self.dashboard.raise_()
        self.dashboard.activateWindow()

    def open_about(self) -> None:
        from .about import AboutDialog

        AboutDialog(self).exec()

    # -- settings, status, errors ---------------------------------------------------------------------------------

    def open_settings(self) -> None:
        dialog = SettingsDialog(self.session.settings, self.session.check_pair, self,
                                check_thread=self.session.background)
        dialog.download_requested.connect(lambda hub_id: self.session.download(hub_id, dialog.download_progress))
        if dialog.exec():
            self.session.apply_settings(dialog.settings())

    def _on_model_status(self) -> None:
        self.model_label.set_full_text(self.session.status_text())
        self.load_progress.setVisible(self.session.loading)
        self.send_button.setEnabled((self.session.ready or self.session.loading) and self.active is None)
        self._answer_waiting()
        if self.session.error:
            self._show_error(self.session.error)
            self.session.error = None
        if self.session.note:
            self.banner.show_note(self.session.note)  # information, in the banner's calm style
            self.session.note = None

    def _answer_waiting(self) -> None:
        """A message sent while the model loaded gets its reply once the model is ready, if its chat is still open
        and nothing else runs; a model that failed to load leaves it saved, and the chat says so."""
        waiting = self._waiting
        if waiting is None or self.session.loading:
            return
        self._waiting = None
        if waiting != self.conversation_id or self._busy():
            return
        if not self.session.ready:
            self.transcript.show_pending("The model could not be loaded: your message is saved. Regenerate "
                                         "(Ctrl+R) answers it once a model is loaded.")
            return
        self._start_reply()

    def _refresh_session_stats(self) -> None:
        self.session_label.set_full_text(self.session.stats_text(self.conversation_id))

    def _on_highlight_options(self) -> None:
        self.transcript.set_highlighting(self.highlight_box.isChecked(), self.rejected_box.isChecked())

    def _set_generating(self, generating: bool) -> None:
        self.conversation_list.setEnabled(not generating)  # the reply belongs to the open chat
        self.send_button.setVisible(not generating)
        self.stop_button.setVisible(generating)
        self.send_button.setEnabled((self.session.ready or self.session.loading) and not generating)

    def _busy(self) -> bool:
        return self.active is not None

    def _show_error(self, message: str) -> None:
        """Errors appear inline above the chat (no modal dialog): the app stays usable while they are shown."""
        self.banner.show_message(message)

    # -- window state ---------------------------------------------------------------------------------------------

    def _restore_geometry(self) -> None:
        settings = QSettings()
        geometry = settings.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1100, 720)
        splitter = settings.value("window/splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)

    def closeEvent(self, event) -> None:
        settings = QSettings()
        settings.setValue("window/geometry", self.saveGeometry())
        settings.setValue("window/splitter", self.splitter.saveState())
        if self._cancel is not None:
            self._cancel.set()
        for window in (self.race_window, self.dashboard):
            if window is not None:
                window.close()
        self.api_server.shutdown()  # bounded: its threads must not outlive the window
        self.remote_target.stop()
        self.session.shutdown()  # cancels whatever else runs or waits, then ends the model thread
        super().closeEvent(event)
