"""The chat window's sidebar: New chat and New folder, the search box, and the chats as a tree (pinned, folders,
the rest) or, while the box holds words, the messages that hold them.

It reads and writes through the window's chats.Conversations (never the Store), and opens chats through the
window (MainWindow.open_conversation). The tree and the hits are Qt models over plain records (chat_list_model.py):
ten thousand chats are ten thousand rows of one view. A search waits SEARCH_DELAY_MS after the last key, so that
typing a word searches once; Enter or a click opens the hit's chat at its message, Escape goes back to the tree.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QModelIndex, QObject, Qt, QTimer
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QInputDialog, QLabel, QLineEdit, QListView, QMenu,
                               QMessageBox, QPushButton, QStackedWidget, QTreeView, QVBoxLayout, QWidget)

from ..core.errors import SpecchatError
from .chat_list_model import (CHAT_ID_ROLE, FOLDER_ROLE, HIT_ROLE, KIND_ROLE, ChatTreeModel, DropTarget, Group,
                              HitDelegate, HitListModel)

SEARCH_DELAY_MS = 200
SEARCH_LIMIT = 200  # message hits shown at most
TREE, HITS, NO_HITS = 0, 1, 2  # the pages of `lists`


class Sidebar(QWidget):
    """The sidebar of a MainWindow (`window`): `search` is the search box, `tree` the chats, `hits` the search's
    results, and `lists` the widget that shows one of them (disabled while a reply streams)."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.conversations = window.conversations
        self.model = ChatTreeModel(self)
        self.model.chats_dropped.connect(self._on_dropped)
        self.hit_model = HitListModel(self)
        self._collapsed: set[object] = set()  # folder ids (and "pinned") the user folded
        self._search_timer = QTimer(self, singleShot=True, interval=SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(self.run_search)
        self._build()

    def _build(self) -> None:
        self.new_button = QPushButton("+  New chat")
        self.new_button.clicked.connect(self.window.new_conversation)
        self.folder_button = QPushButton("New folder")
        self.folder_button.setToolTip("Make a folder; drag chats onto it")
        self.folder_button.clicked.connect(lambda: self.new_folder())
        self.search = QLineEdit(placeholderText="Search chats and messages…", clearButtonEnabled=True)
        self.search.textChanged.connect(self._on_search_text)
        self.search.returnPressed.connect(self.open_current_hit)
        self.search.installEventFilter(self)
        self.tree = self._build_tree()
        self.hits = QListView()
        self.hits.setModel(self.hit_model)
        self.hits.setItemDelegate(HitDelegate(self.hits))
        self.hits.setUniformItemSizes(True)
        self.hits.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.hits.clicked.connect(self.open_hit)
        self.hits.installEventFilter(self)
        self.no_hits = QLabel("No chat or message holds these words.", wordWrap=True,
                              alignment=Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.lists = QStackedWidget()
        for page in (self.tree, self.hits, self.no_hits):
            self.lists.addWidget(page)
        buttons = QHBoxLayout()
        buttons.addWidget(self.new_button, 1)
        buttons.addWidget(self.folder_button)
        side = QVBoxLayout(self)
        side.setContentsMargins(8, 8, 4, 8)
        side.addLayout(buttons)
        side.addWidget(self.search)
        side.addWidget(self.lists, 1)

    def _build_tree(self) -> QTreeView:
        tree = QTreeView()
        tree.setModel(self.model)
        tree.setHeaderHidden(True)
        tree.setUniformRowHeights(True)
        tree.setIndentation(14)
        tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        tree.setTextElideMode(Qt.TextElideMode.ElideRight)
        tree.setStyleSheet("QTreeView::item { padding: 5px 2px; }")
        tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        tree.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        tree.setDefaultDropAction(Qt.DropAction.MoveAction)
        tree.setDropIndicatorShown(True)
        tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        tree.customContextMenuRequested.connect(self._menu)
        tree.selectionModel().currentChanged.connect(self._on_current)
        tree.expanded.connect(lambda index: self._collapsed.discard(self._group_key(index)))
        tree.collapsed.connect(lambda index: self._collapsed.add(self._group_key(index)))
        return tree

    # -- the tree -------------------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Reads the chats and folders again and shows them, the open chat still selected and the folders folded
        as they were; the search's hits are read again too while the box holds words."""
        try:
            chats, folders = self.conversations.find(), self.conversations.folders()
        except SpecchatError as error:
            self.window.banner.show_message(f"The chat list could not be read: {error}")
            return
        self.model.set_chats(chats, folders)
        for row in range(self.model.rowCount()):
            index = self.model.index(row, 0)
            if isinstance(self.model.item(index), Group):
                self.tree.setExpanded(index, self._group_key(index) not in self._collapsed)
        self.select(self.window.conversation_id)
        if self.search.text().strip():
            self.run_search()

    def select(self, conversation_id: int | None) -> None:
        """Marks the chat as the one open (None: none), without opening it again."""
        index = self.model.chat_index(conversation_id)
        selection = self.tree.selectionModel()
        selection.blockSignals(True)
        try:
            if index.isValid():
                self.tree.setCurrentIndex(index)
                self.tree.scrollTo(index)
            else:
                self.tree.clearSelection()
                self.tree.setCurrentIndex(QModelIndex())
        finally:
            selection.blockSignals(False)
        self.tree.viewport().update()

    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        """A chat chosen in the tree opens (not while a reply streams: it belongs to the open chat)."""
        conversation_id = current.data(CHAT_ID_ROLE) if current.isValid() else None
        if conversation_id is None or self.window.active is not None:
            return
        if conversation_id != self.window.conversation_id:
            self.window.open_conversation(conversation_id)

    def _group_key(self, index: QModelIndex):
        folder = index.data(FOLDER_ROLE)
        return "pinned" if folder is None else folder.id

    # -- menus ----------------------------------------------------------------------------------------------------

    def _menu(self, point) -> None:
        index = self.tree.indexAt(point)
        kind = index.data(KIND_ROLE) if index.isValid() else None
        menu = QMenu(self)
        if kind == "chat":
            self._chat_menu(menu, self.model.item(index))
        elif kind == "folder":
            folder = index.data(FOLDER_ROLE)
            menu.addAction("Rename…", lambda: self.rename_folder(folder.id, folder.name))
            menu.addAction("Delete folder (chats kept)", lambda: self.delete_folder(folder.id))
        else:
            menu.addAction("New folder…", lambda: self.new_folder())
        menu.exec(self.tree.viewport().mapToGlobal(point))

    def _chat_menu(self, menu: QMenu, chat) -> None:
        menu.addAction("Unpin" if chat.pinned else "Pin", lambda: self.pin(chat.id, not chat.pinned))
        move = menu.addMenu("Move to folder")
        for row in range(self.model.rowCount()):
            folder = self.model.index(row, 0).data(FOLDER_ROLE)
            if folder is not None:
                action = move.addAction(folder.name, lambda f=folder.id: self.move([chat.id], DropTarget(
                    folder_id=f)))
                action.setCheckable(True)
                action.setChecked(folder.id == chat.folder_id)
        move.addSeparator()
        move.addAction("New folder…", lambda: self.new_folder(chat.id))
        move.addAction("No folder", lambda: self.move([chat.id], DropTarget())).setEnabled(
            chat.folder_id is not None or chat.pinned)
        menu.addSeparator()
        menu.addAction("Rename…", lambda: self.rename_chat(chat.id, chat.title))
        menu.addAction("Delete…", lambda: self.delete_chat(chat.id, chat.title))

    # -- what the menus and drops do ------------------------------------------------------------------------------

    def _write(self, what: str, operation, rebuild_later: bool = False) -> bool:
        """Runs a write through Conversations; a refusal (a taken name, a locked database) goes to the banner.
        Returns whether it was written; the list is read again either way (with `rebuild_later`, once the events
        being handled are over: a drop's, whose view still holds the rows)."""
        try:
            operation()
            return True
        except SpecchatError as error:
            self.window.banner.show_message(f"{what}: {error}")
            return False
        finally:
            if rebuild_later:
                QTimer.singleShot(0, self.refresh)
            else:
                self.refresh()

    def pin(self, conversation_id: int, pinned: bool) -> None:
        self._write("The chat could not be pinned", lambda: self.conversations.pin(conversation_id, pinned))

    def move(self, conversation_ids: list[int], target: DropTarget) -> None:
        """Puts the chats where `target` says: pinned, or unpinned into its folder (None: no folder)."""
        self._write("The chat could not be moved", lambda: self._place(conversation_ids, target))

    def _place(self, conversation_ids: list[int], target: DropTarget) -> None:
        for conversation_id in conversation_ids:
            if target.pin:
                self.conversations.pin(conversation_id, True)
                continue
            chat = self.model.chat(conversation_id)
            if chat is not None and chat.pinned:
                self.conversations.pin(conversation_id, False)
            self.conversations.move_to_folder(conversation_id, target.folder_id)

    def _on_dropped(self, conversation_ids: list, target: DropTarget) -> None:
        """A drop is written at once, and the tree rebuilt after the drag has ended (not under the view's feet)."""
        self._write("The chat could not be moved", lambda: self._place(conversation_ids, target), rebuild_later=True)

    def new_folder(self, conversation_id: int | None = None) -> None:
        """Asks for a name and makes the folder; with `conversation_id`, moves that chat into it."""
        name, ok = QInputDialog.getText(self, "New folder", "Name:")
        if not ok or not name.strip():
            return

        def create():
            folder = self.conversations.create_folder(name)
            if conversation_id is not None:
                self._place([conversation_id], DropTarget(folder_id=folder.id))
        self._write("The folder could not be made", create)

    def rename_folder(self, folder_id: int, name: str) -> None:
        new_name, ok = QInputDialog.getText(self, "Rename folder", "Name:", text=name)
        if ok and new_name.strip():
            self._write("The folder could not be renamed",
                        lambda: self.conversations.rename_folder(folder_id, new_name))

    def delete_folder(self, folder_id: int) -> None:
        """Deletes the folder; its chats go back to the top level."""
        self._collapsed.discard(folder_id)
        self._write("The folder could not be deleted", lambda: self.conversations.delete_folder(folder_id))

    def rename_chat(self, conversation_id: int, title: str) -> None:
        new_title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=title)
        if ok and new_title.strip():
            self._write("The chat could not be renamed",
                        lambda: self.conversations.rename(conversation_id, new_title.strip()))

    def delete_chat(self, conversation_id: int, title: str, confirm: bool = True) -> None:
        """Deletes the chat (after asking, with `confirm`); not the one a reply streams into. A chat open on screen
        gives way to a new one."""
        active = self.window.active
        if active is not None and active.conversation_id == conversation_id:
            return
        if confirm and QMessageBox.question(self, "Delete chat", f"Delete “{title}” and all its messages?"
                                            ) != QMessageBox.StandardButton.Yes:
            return
        if self._write("The chat could not be deleted", lambda: self.conversations.delete(conversation_id)) \
                and self.window.conversation_id == conversation_id:
            self.window.new_conversation()

    # -- search ---------------------------------------------------------------------------------------------------

    def _on_search_text(self, text: str) -> None:
        if text.strip():
            self._search_timer.start()  # (again: the search runs SEARCH_DELAY_MS after the last key)
        else:
            self._search_timer.stop()
            self.lists.setCurrentIndex(TREE)

    def run_search(self) -> None:
        """Searches now for the box's words and shows the hits (the first one current), or says there are none."""
        self._search_timer.stop()
        query = self.search.text()
        if not query.strip():
            return
        try:
            hits = self.conversations.search_messages(query, SEARCH_LIMIT)
        except SpecchatError as error:
            self.window.banner.show_message(f"The search failed: {error}")
            return
        self.hit_model.set_hits(hits)
        self.lists.setCurrentIndex(HITS if hits else NO_HITS)
        if hits:
            self.hits.setCurrentIndex(self.hit_model.index(0, 0))

    def open_current_hit(self) -> None:
        """Enter: searches at once if the last keys are not searched yet, then opens the current hit."""
        if self._search_timer.isActive():
            self.run_search()
        if self.lists.currentIndex() == HITS:
            self.open_hit(self.hits.currentIndex())

    def open_hit(self, index: QModelIndex) -> None:
        hit = index.data(HIT_ROLE) if index.isValid() else None
        if hit is not None:
            self.open_at(hit.conversation_id, hit.message_id)

    def open_at(self, conversation_id: int, message_id: int | None) -> None:
        """Opens the chat on the branch through the message and scrolls to it (message_id None: a title hit, the
        chat as it was left). Not while a reply streams."""
        window = self.window
        if window.active is not None:
            window.statusBar().showMessage("A reply is streaming: open another chat when it ends.", 4000)
            return
        try:
            if message_id is not None and hasattr(self.conversations, "show_branch"):
                self.conversations.show_branch(conversation_id, message_id)
            window.open_conversation(conversation_id)
        except SpecchatError as error:
            window.banner.show_message(f"That chat could not be opened: {error}")
            return
        self.select(conversation_id)
        if message_id is not None:
            window.transcript.scroll_to_message(message_id)

    def clear_search(self) -> None:
        """Escape: back to the tree."""
        self.search.clear()
        self.lists.setCurrentIndex(TREE)
        self.tree.setFocus()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Escape in the box or the hits clears the search (before the window's Esc, Stop, takes it: only while
        the box holds words); Enter in the hits opens the current one; Down in the box goes to the hits."""
        kind = event.type()
        if kind not in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress):
            return False
        key = event.key()
        if key == Qt.Key.Key_Escape and self.search.text():
            event.accept()
            if kind == QEvent.Type.KeyPress:
                self.clear_search()
            return True
        if kind == QEvent.Type.KeyPress and watched is self.hits and key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.open_hit(self.hits.currentIndex())
            return True
        if kind == QEvent.Type.KeyPress and watched is self.search and key == Qt.Key.Key_Down \
                and self.lists.currentIndex() == HITS:
            self.hits.setFocus()
            return True
        return False
