"""The sidebar's models: the chat tree (pinned chats, folders, the other chats) with its drag and drop, and the list
of search hits with the delegate that draws their highlighted snippets.

Both are Qt models over plain records (the store's ConversationInfo, FolderInfo and MessageHit, read through
chats.Conversations): one row per chat, however many there are, no widget per chat. The tree writes nothing: a drop
emits `chats_dropped` with where the chats go, and the sidebar moves them (sidebar.py).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from PySide6.QtCore import (QAbstractItemModel, QAbstractListModel, QByteArray, QMimeData, QModelIndex, QRectF, QSize, Qt,
                            Signal)
from PySide6.QtGui import QAbstractTextDocumentLayout, QFont, QPalette, QTextDocument
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, QStyleOptionViewItem

from .theme import current_theme

CHAT_ID_ROLE = Qt.ItemDataRole.UserRole  # a chat row's conversation id (None on a group's row)
KIND_ROLE = Qt.ItemDataRole.UserRole + 1  # "chat", "pinned" or "folder"
FOLDER_ROLE = Qt.ItemDataRole.UserRole + 2  # a folder row's FolderInfo
HIT_ROLE = Qt.ItemDataRole.UserRole + 3  # a search hit's MessageHit
HTML_ROLE = Qt.ItemDataRole.UserRole + 4  # a search hit as HTML: the chat's title, then the snippet
MIME_TYPE = "application/x-specchat-chat-ids"
MAX_DROPPED = 100  # chats one drop moves at most (the view drags one; the bound is for data from elsewhere)
ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System"}


@dataclass
class Group:
    """A row with chats under it: the pinned chats (folder None) or a folder's."""

    folder: object | None  # a FolderInfo, None for the pinned chats
    chats: list = field(default_factory=list)  # ConversationInfo, in the store's order


@dataclass(frozen=True)
class DropTarget:
    """Where dropped chats go: pinned (their folder kept), or unpinned into `folder_id` (None: no folder)."""

    pin: bool = False
    folder_id: int | None = None


class ChatTreeModel(QAbstractItemModel):
    """The chats as a tree: a "Pinned" group first (when a chat is pinned), then every folder (with its number of
    chats, empty ones too, so that a chat can be dropped on them), then the chats in no folder. A pinned chat is
    listed under Pinned only. Top-level rows have internal id 0; a group's chats carry their group's row + 1."""

    chats_dropped = Signal(list, object)  # conversation ids, DropTarget

    def __init__(self, parent=None):
        super().__init__(parent)
        self._top: list = []  # Group or ConversationInfo
        self._where: dict[int, tuple[int, int | None]] = {}  # chat id -> (top row, row in its group or None)
        self._folder_icon = QApplication.style().standardIcon(QStyle.StandardPixmap.SP_DirIcon)

    def set_chats(self, chats: list, folders: list) -> None:
        """Shows `chats` (ConversationInfo, pinned first, then newest first: Store.list_conversations' order) and
        `folders` (FolderInfo, in their order); the views' indexes are reset."""
        self.beginResetModel()
        pinned = Group(None)
        groups = {folder.id: Group(folder) for folder in folders}
        loose = []
        for chat in chats:
            group = pinned if chat.pinned else groups.get(chat.folder_id)
            (group.chats if group is not None else loose).append(chat)
        self._top = ([pinned] if pinned.chats else []) + list(groups.values()) + loose
        self._where = {}
        for row, item in enumerate(self._top):
            if isinstance(item, Group):
                self._where.update((chat.id, (row, child)) for child, chat in enumerate(item.chats))
            else:
                self._where[item.id] = (row, None)
        self.endResetModel()

    def chat_index(self, conversation_id: int | None) -> QModelIndex:
        """The row of the chat, or an invalid index when it is not listed."""
        where = self._where.get(conversation_id)
        if where is None:
            return QModelIndex()
        row, child = where
        return self.index(row, 0) if child is None else self.index(child, 0, self.index(row, 0))

    def chat(self, conversation_id: int):
        """The listed chat's ConversationInfo, or None."""
        return self.item(self.chat_index(conversation_id))

    def item(self, index: QModelIndex):
        """The Group or ConversationInfo of a row; None for an invalid index."""
        if not index.isValid():
            return None
        group = index.internalId()
        if group == 0:
            return self._top[index.row()]
        return self._top[group - 1].chats[index.row()]

    # -- the model's interface ------------------------------------------------------------------------------------

    def index(self, row: int, column: int = 0, parent: QModelIndex = QModelIndex()) -> QModelIndex:
        if not self.hasIndex(row, column, parent):
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(row, column, 0)
        return self.createIndex(row, column, parent.row() + 1)

    def parent(self, index: QModelIndex | None = None):
        if index is None:
            return super().parent()  # QObject.parent()
        if not index.isValid() or index.internalId() == 0:
            return QModelIndex()
        return self.createIndex(index.internalId() - 1, 0, 0)

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:
        if not parent.isValid():
            return len(self._top)
        item = self.item(parent)
        return len(item.chats) if isinstance(item, Group) and parent.internalId() == 0 else 0

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:
        return 1

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        item = self.item(index)
        if item is None:
            return None
        if isinstance(item, Group):
            return self._group_data(item, role)
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            return item.title
        if role == CHAT_ID_ROLE:
            return item.id
        if role == KIND_ROLE:
            return "chat"
        return None

    def _group_data(self, group: Group, role: int):
        if role == Qt.ItemDataRole.DisplayRole:
            name = "Pinned" if group.folder is None else group.folder.name
            return f"{name}  ({len(group.chats)})"
        if role == Qt.ItemDataRole.ToolTipRole:
            return "Pinned chats" if group.folder is None else f"Folder “{group.folder.name}”: drop a chat here"
        if role == Qt.ItemDataRole.DecorationRole and group.folder is not None:
            return self._folder_icon
        if role == Qt.ItemDataRole.FontRole:
            font = QFont()
            font.setWeight(QFont.Weight.DemiBold)
            return font
        if role == KIND_ROLE:
            return "pinned" if group.folder is None else "folder"
        if role == FOLDER_ROLE:
            return group.folder
        return None

    def flags(self, index: QModelIndex) -> Qt.ItemFlag:
        enabled = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        if not index.isValid():
            return Qt.ItemFlag.ItemIsDropEnabled  # the top level: out of any folder
        if isinstance(self.item(index), Group):
            return enabled | Qt.ItemFlag.ItemIsDropEnabled
        return enabled | Qt.ItemFlag.ItemIsDragEnabled | Qt.ItemFlag.ItemNeverHasChildren

    # -- drag and drop --------------------------------------------------------------------------------------------

    def supportedDropActions(self) -> Qt.DropAction:
        return Qt.DropAction.MoveAction

    def supportedDragActions(self) -> Qt.DropAction:
        return Qt.DropAction.MoveAction

    def mimeTypes(self) -> list[str]:
        return [MIME_TYPE]

    def mimeData(self, indexes) -> QMimeData:
        """The dragged chats' ids, as "1,2,3" under MIME_TYPE."""
        ids = [str(chat.id) for index in indexes if not isinstance(chat := self.item(index), Group) and chat]
        data = QMimeData()
        data.setData(MIME_TYPE, QByteArray(",".join(dict.fromkeys(ids)).encode("ascii")))
        return data

    def canDropMimeData(self, data: QMimeData, action, row: int, column: int, parent: QModelIndex) -> bool:
        return bool(self.dropped_ids(data))

    def dropMimeData(self, data: QMimeData, action, row: int, column: int, parent: QModelIndex) -> bool:
        """Chats dropped on a folder go into it, on Pinned are pinned, on the top level (between the loose chats)
        leave their folder; emits chats_dropped, and the sidebar writes it. Data that names no listed chat is
        refused (False)."""
        if action == Qt.DropAction.IgnoreAction:
            return True
        ids = self.dropped_ids(data)
        if not ids:
            return False
        self.chats_dropped.emit(ids, self.drop_target(parent))
        return True

    def dropped_ids(self, data: QMimeData) -> list[int]:
        """The listed chats a drag carries (at most MAX_DROPPED); [] for anything else."""
        if data is None or not data.hasFormat(MIME_TYPE):
            return []
        raw = bytes(data.data(MIME_TYPE).data())[:MAX_DROPPED * 21]
        ids = [int(part) for part in raw.split(b",")[:MAX_DROPPED] if part.isdigit() and len(part) <= 19]
        return [i for i in dict.fromkeys(ids) if i in self._where]

    def drop_target(self, parent: QModelIndex) -> DropTarget:
        """Where a drop on `parent` puts chats: a chat's row stands for the group it is in."""
        if parent.isValid() and parent.internalId() != 0:
            parent = self.parent(parent)
        item = self.item(parent)
        if not isinstance(item, Group):
            return DropTarget()
        return DropTarget(pin=True) if item.folder is None else DropTarget(folder_id=item.folder.id)


class HitListModel(QAbstractListModel):
    """The search's hits (MessageHit), one row each: HTML_ROLE draws the chat's title and the highlighted
    snippet; the display text is the same as plain text."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.hits: list = []

    def set_hits(self, hits: list) -> None:
        self.beginResetModel()
        self.hits = list(hits)
        self.endResetModel()

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.hits)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or not 0 <= index.row() < len(self.hits):
            return None
        hit = self.hits[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{hit.title}\n{hit.snippet}" if hit.message_id is not None else hit.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return hit.title
        if role == HIT_ROLE:
            return hit
        if role == HTML_ROLE:
            return hit_html(hit)
        if role == CHAT_ID_ROLE:
            return hit.conversation_id
        return None


def hit_html(hit, muted: str | None = None) -> str:
    """A hit as rich text: its chat's title (bold, on one line) and, under it, who wrote the message and its
    snippet with the matched words on a highlight (a title that matches: the title's words highlighted), who wrote
    it in `muted` (a colour's name; None: the theme's). Every piece of stored text is escaped
    (MessageHit.snippet_html)."""
    theme = current_theme()
    mark = "<span style='background-color:%s; color:%s'>" % (("#7a5d00", "#ffffff") if theme.dark
                                                              else ("#ffe08a", "#000000"))
    muted = muted or theme.muted_text.name()
    if hit.message_id is None:
        return (f"<p style='white-space:pre; margin:0'><b>{hit.snippet_html(mark, '</span>')}</b></p>"
                f"<p style='margin:0; color:{muted}'>The chat's title</p>")
    who = ROLE_NAMES.get(hit.role, hit.role or "")
    return (f"<p style='white-space:pre; margin:0'><b>{html.escape(hit.title)}</b></p>"
            f"<p style='margin:0'><span style='color:{muted}'>{who}:</span> {hit.snippet_html(mark, '</span>')}</p>")


class HitDelegate(QStyledItemDelegate):
    """Draws a hit (hit_html, through a QTextDocument) in rows of LINES lines: the title, and the snippet's first
    lines, whole lines only."""

    LINES = 3
    PADDING = 4

    def paint(self, painter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        item = QStyleOptionViewItem(option)
        self.initStyleOption(item, index)
        item.text = ""
        style = item.widget.style() if item.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, item, painter, item.widget)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        text = option.palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        hit = index.data(HIT_ROLE)
        document = self._document(hit_html(hit, text.name() if selected else None) if hit else "", option)
        context = QAbstractTextDocumentLayout.PaintContext()
        palette = QPalette(option.palette)
        palette.setColor(QPalette.ColorRole.Text, text)
        context.palette = palette
        rect = option.rect.adjusted(self.PADDING, self.PADDING, -self.PADDING, -self.PADDING)
        clip = QRectF(0, 0, rect.width(), _whole_lines_height(document, rect.height()))
        painter.save()
        painter.translate(rect.topLeft())
        painter.setClipRect(clip)
        context.clip = clip
        document.documentLayout().draw(painter, context)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        return QSize(option.rect.width(), option.fontMetrics.lineSpacing() * self.LINES + 4 * self.PADDING)

    def _document(self, rich_text: str, option: QStyleOptionViewItem) -> QTextDocument:
        document = QTextDocument()
        document.setDocumentMargin(0)
        document.setDefaultFont(option.font)
        document.setTextWidth(max(option.rect.width() - 2 * self.PADDING, 40))
        document.setHtml(rich_text)
        return document


def _whole_lines_height(document: QTextDocument, height: float) -> float:
    """The height of the laid-out lines of `document` that fit whole in `height` (none is drawn cut in half)."""
    fitting, block = 0.0, document.begin()
    layout = document.documentLayout()
    while block.isValid():
        top = layout.blockBoundingRect(block).top()
        lines = block.layout()
        for number in range(lines.lineCount()):
            bottom = top + lines.lineAt(number).rect().bottom()
            if bottom > height:
                return fitting
            fitting = bottom
        block = block.next()
    return fitting
