"""The window's sidebar (ui/sidebar.py, ui/chat_list_model.py): pinned chats and folders in one tree model, drag and
drop through the model's mime data, the context menu, and the search that opens a chat at the message found."""

import time
from datetime import datetime, timezone

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import QMenu, QTreeView

from specchat.storage.records import ConversationInfo, FolderInfo
from specchat.ui.chat_list_model import CHAT_ID_ROLE, HTML_ROLE, KIND_ROLE, ChatTreeModel
from specchat.ui.sidebar import HITS, NO_HITS, TREE

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def rows(model, parent=QModelIndex()):
    """The tree as text: each row's display text, a group's rows indented under it."""
    shown = []
    for row in range(model.rowCount(parent)):
        index = model.index(row, 0, parent)
        shown.append(("  " if parent.isValid() else "") + index.data())
        shown += rows(model, index)
    return shown


def test_ten_thousand_chats_are_rows_of_one_model(qtbot):
    folders = [FolderInfo(i, f"Folder {i}", NOW) for i in range(1, 21)]
    chats = [ConversationInfo(i, f"Chat {i}", None, NOW, NOW, pinned=i <= 5, folder_id=i % 21 or None)
             for i in range(1, 10_001)]
    model = ChatTreeModel()
    view = QTreeView()
    qtbot.addWidget(view)
    started = time.perf_counter()
    model.set_chats(chats, folders)
    view.setModel(model)
    view.setUniformRowHeights(True)
    view.expandAll()
    view.show()
    qtbot.waitExposed(view)
    assert time.perf_counter() - started < 5  # a smoke bound; the figures are in docs/performance.md
    pinned = model.index(0, 0)
    assert pinned.data(KIND_ROLE) == "pinned" and model.rowCount(pinned) == 5
    assert model.chat_index(10_000).data(CHAT_ID_ROLE) == 10_000
    assert model.rowCount() == 1 + 20 + sum(1 for c in chats if not c.pinned and c.folder_id is None)
    assert view.findChildren(QTreeView) == []  # one view, no widget per chat


def test_pinned_first_then_folders_then_the_other_chats(qtbot, make_window, store):
    work = store.chat_list.create_folder("Work")
    store.chat_list.create_folder("Empty")
    plan = store.create_conversation("Plan")
    notes = store.create_conversation("Notes")
    store.create_conversation("Loose")
    store.chat_list.move(plan.id, work.id)
    store.chat_list.pin(notes.id, True)
    window = make_window()
    assert rows(window.sidebar.model) == ["Pinned  (1)", "  Notes", "Empty  (0)", "Work  (1)", "  Plan", "Loose"]


def test_dragging_a_chat_moves_it_between_folders_the_top_level_and_pinned(qtbot, make_window, store):
    folder = store.chat_list.create_folder("Work")
    chat = store.create_conversation("Draft")
    window = make_window()
    model = window.sidebar.model
    data = model.mimeData([model.chat_index(chat.id)])
    folder_row = next(model.index(r, 0) for r in range(model.rowCount()) if model.index(r, 0).data(KIND_ROLE)
                      == "folder")
    assert model.canDropMimeData(data, Qt.DropAction.MoveAction, -1, -1, folder_row)
    assert model.dropMimeData(data, Qt.DropAction.MoveAction, -1, -1, folder_row)
    assert store.conversation(chat.id).folder_id == folder.id  # written at once
    qtbot.waitUntil(lambda: rows(model) == ["Work  (1)", "  Draft"])  # the tree rebuilt once the drop is over

    data = model.mimeData([model.chat_index(chat.id)])
    assert model.dropMimeData(data, Qt.DropAction.MoveAction, 0, 0, QModelIndex())  # between the top rows
    qtbot.waitUntil(lambda: rows(model) == ["Work  (0)", "Draft"])
    assert store.conversation(chat.id).folder_id is None

    store.chat_list.move(chat.id, folder.id)
    window.refresh_conversations()
    data = model.mimeData([model.chat_index(chat.id)])
    store.chat_list.pin(store.create_conversation("Other").id, True)
    window.refresh_conversations()
    assert model.dropMimeData(data, Qt.DropAction.MoveAction, -1, -1, model.index(0, 0))  # onto "Pinned"
    qtbot.waitUntil(lambda: rows(model)[:3] == ["Pinned  (2)", "  Other", "  Draft"])
    assert store.conversation(chat.id).folder_id == folder.id  # pinned, its folder kept for when it is unpinned


def test_foreign_drops_are_refused(qtbot, make_window, store):
    from PySide6.QtCore import QByteArray, QMimeData

    from specchat.ui.chat_list_model import MIME_TYPE

    store.create_conversation("Only")
    model = make_window().sidebar.model
    for payload in (b"", b"99999", b"-1,abc", b"1" * 5000, b",,,"):
        data = QMimeData()
        data.setData(MIME_TYPE, QByteArray(payload))
        assert not model.dropMimeData(data, Qt.DropAction.MoveAction, -1, -1, QModelIndex())
    text = QMimeData()
    text.setText("1")
    assert not model.canDropMimeData(text, Qt.DropAction.MoveAction, -1, -1, QModelIndex())


def test_the_context_menu_pins_moves_and_the_selection_stays(qtbot, make_window, store):
    folder = store.chat_list.create_folder("Ideas")
    first = store.create_conversation("First")
    second = store.create_conversation("Second")
    window = make_window()
    sidebar = window.sidebar
    window.open_conversation(first.id)
    window.refresh_conversations()
    assert sidebar.tree.currentIndex().data(CHAT_ID_ROLE) == first.id

    def act(chat_id, *path):
        menu = root = QMenu()  # (root: the submenus are its children)
        sidebar._chat_menu(root, sidebar.model.chat(chat_id))
        for text in path[:-1]:
            menu = next(a.menu() for a in menu.actions() if a.text() == text)
        next(a for a in menu.actions() if a.text() == path[-1]).trigger()

    act(first.id, "Pin")
    assert store.conversation(first.id).pinned
    act(second.id, "Move to folder", "Ideas")
    assert store.conversation(second.id).folder_id == folder.id
    act(first.id, "Move to folder", "Ideas")  # moving a pinned chat into a folder unpins it
    assert not store.conversation(first.id).pinned and store.conversation(first.id).folder_id == folder.id
    assert rows(sidebar.model) == ["Ideas  (2)", "  Second", "  First"]
    assert sidebar.tree.currentIndex().data(CHAT_ID_ROLE) == first.id  # still the open chat, selected
    sidebar.delete_folder(folder.id)
    assert rows(sidebar.model) == ["Second", "First"] and store.conversation(second.id).title == "Second"
    assert sidebar.tree.currentIndex().data(CHAT_ID_ROLE) == first.id


def test_a_taken_folder_name_is_said_in_the_banner(qtbot, make_window, store, monkeypatch):
    from PySide6.QtWidgets import QInputDialog

    store.chat_list.create_folder("Work")
    window = make_window()
    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *args, **kwargs: ("work", True)))
    window.sidebar.new_folder()
    assert "already" in window.banner.label.text() and len(store.chat_list.folders()) == 1


def test_search_shows_hits_and_enter_opens_the_chat_at_the_message(qtbot, make_window, store):
    chat = store.create_conversation("Long chat")
    for n in range(40):
        store.add_message(chat.id, "user" if n % 2 == 0 else "assistant", f"Filler message {n}.\n\n" * 3)
    target = store.add_message(chat.id, "user", "Where is the <lighthouse> & its keeper?")
    for n in range(40):
        store.add_message(chat.id, "assistant" if n % 2 == 0 else "user", f"More filler {n}.\n\n" * 3)
    other = store.create_conversation("Elsewhere")
    window = make_window()
    window.open_conversation(other.id)
    scrolled = []
    scroll_to_message = window.transcript.scroll_to_message
    window.transcript.scroll_to_message = lambda message_id: scrolled.append(
        (message_id, scroll_to_message(message_id)))

    qtbot.keyClicks(window.search, "lighthouse")
    assert window.conversation_list.currentIndex() == TREE  # not yet: the search waits for the typing to stop
    qtbot.waitUntil(lambda: window.conversation_list.currentIndex() == HITS)
    hits = window.sidebar.hits
    html = hits.currentIndex().data(HTML_ROLE)
    assert "lighthouse</span>" in html and "&lt;" in html and "&amp;" in html and "<lighthouse>" not in html
    assert not hits.grab().isNull()  # the delegate paints
    qtbot.keyClick(window.search, Qt.Key.Key_Return)
    assert window.conversation_id == chat.id
    assert scrolled == [(target.id, True)]
    assert window.transcript.verticalScrollBar().value() > 0  # the message is far down the chat
    assert window.sidebar.tree.currentIndex().data(CHAT_ID_ROLE) == chat.id

    qtbot.keyClick(window.search, Qt.Key.Key_Escape)  # back to the tree (Esc does not reach Stop then)
    assert window.search.text() == "" and window.conversation_list.currentIndex() == TREE


def test_a_click_on_a_title_hit_opens_the_chat_and_no_match_says_so(qtbot, make_window, store):
    chat = store.create_conversation("Quarterly report")
    window = make_window()
    window.search.setText("quarterly")
    window.sidebar.run_search()
    hits = window.sidebar.hits
    index = hits.model().index(0, 0)
    qtbot.mouseClick(hits.viewport(), Qt.MouseButton.LeftButton, pos=hits.visualRect(index).center())
    assert window.conversation_id == chat.id
    window.search.setText("zeppelin")
    window.sidebar.run_search()
    assert window.conversation_list.currentIndex() == NO_HITS
    window.search.clear()
    assert window.conversation_list.currentIndex() == TREE


def test_a_hit_on_another_branch_opens_that_branch(qtbot, make_window, store):
    chat = store.create_conversation("Versions")
    first = store.add_message(chat.id, "user", "Tell me about otters")
    store.add_message(chat.id, "assistant", "Otters hold hands while they sleep.")
    edited = store.add_message(chat.id, "user", "Tell me about badgers", sibling_of=first.id)
    store.add_message(chat.id, "assistant", "Badgers dig setts.")
    window = make_window()
    assert [m.text for m in window.conversations.open(chat.id).messages][0] == "Tell me about badgers"  # on screen
    window.search.setText("otters sleep")
    window.sidebar.run_search()
    qtbot.keyClick(window.search, Qt.Key.Key_Return)
    shown = [m.text for m in window.chat.messages]
    assert shown == ["Tell me about otters", "Otters hold hands while they sleep."] and edited.id
    assert "Otters hold hands" in window.transcript.toPlainText()
