"""Attaching documents in the window (issue 45): real files (text, PDF, DOCX) through the ways a user attaches them
(a drop on the window, a path pasted in the composer, the paperclip's dialog), read off the GUI thread with Cancel,
their chips, their rows stored with the message, their text in the reply's prompt, the chips and sources in the
transcript and the viewer they open, bad files said at the composer, and the context meter."""

import threading
import time

import docx
import pytest
import torch
from documents.document_files import pdf_with_pages
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QTimer, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QFileDialog

from specchat.chats.context_plan import MESSAGE_OVERHEAD, PASSAGES_INTRO
from specchat.core.errors import StorageError
from specchat.engine.loading.load import LoadedModel
from specchat.engine.loading.pair import ModelPair
from specchat.models.sources import ModelSource
from specchat.storage import document_shelf
from specchat.ui import attachments as attachments_module
from specchat.ui.context_meter import DEBOUNCE_MS
from specchat.ui.document_viewer import DocumentViewer

STREAM_TIMEOUT = 120000
READ_TIMEOUT = 30000
NOTES = "The library opens at nine and closes at six. Loans last three weeks; renewals are free."


def file_urls(paths) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
    return mime


def drop_on_window(qtbot, window, paths) -> None:
    """Drags `paths` over the window and drops them, as a file manager does (the chat itself takes no drops, so Qt
    hands them to the window), and waits for every read to end."""
    mime = file_urls(paths)
    enter = QDragEnterEvent(QPoint(300, 300), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(300, 300), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, drop)
    wait_for_reads(qtbot, window)


def paste(window, mime: QMimeData) -> None:
    """What Ctrl+V in the composer does with the clipboard's data."""
    window.composer.insertFromMimeData(mime)


def pasted_text(text: str) -> QMimeData:
    mime = QMimeData()
    mime.setText(text)
    return mime


def wait_for_reads(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.attachments.reading(), timeout=READ_TIMEOUT)


def chip_texts(window) -> list[str]:
    return [chip.text for chip in window.attachments.tray.chips]


def send_and_wait(qtbot, window, text):
    window.composer.setPlainText(text)
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()


def links(transcript, kind: str) -> list[tuple[str, str]]:
    """The transcript's links of `kind` ("document", "source"): (their text, their href)."""
    found = []
    block = transcript.document().begin()
    while block.isValid():
        iterator = block.begin()
        while not iterator.atEnd():
            fragment = iterator.fragment()
            href = fragment.charFormat().anchorHref()
            if href.startswith(f"specchat:{kind}:"):
                found.append((fragment.text().strip("\u00a0"), href))
            iterator += 1
        block = block.next()
    return found


def click(window, href: str) -> DocumentViewer:
    """Clicks the transcript's link `href` and returns the viewer it opened."""
    before = set(window.findChildren(DocumentViewer))
    window.transcript.anchorClicked.emit(QUrl(href))
    opened = [viewer for viewer in window.findChildren(DocumentViewer) if viewer not in before]
    assert len(opened) == 1
    return opened[0]


@pytest.fixture
def notes(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text(NOTES)
    return path


def test_a_dropped_text_file_is_sent_with_the_message_stored_and_read_by_the_reply(qtbot, make_window, store, notes):
    window = make_window()
    assert not window.transcript.viewport().acceptDrops()  # a drop on the chat reaches the window
    drop_on_window(qtbot, window, [notes])
    tokens = len(window.session.tokenizer(NOTES, add_special_tokens=False)["input_ids"])
    assert chip_texts(window) == [f"notes.txt · {tokens:,} tokens"]
    began = []
    start = window.replies.start
    window.replies.start = lambda chat, engine, **options: began.append(start(chat, engine, **options)) or began[-1]
    send_and_wait(qtbot, window, "When does the library open?")

    assert chip_texts(window) == [] and window.attachments.tray.chip_area.isHidden()
    messages = store.messages(window.conversation_id)
    stored = store.documents.of_chat(window.conversation_id)
    assert [(d.name, d.message_id, d.kind) for d in stored] == [("notes.txt", messages[0].id, "text")]
    assert store.documents.load(stored[0].id).text == NOTES
    prompt = window.session.tokenizer.decode(began[0].job.prompt_ids)
    assert NOTES in prompt and "When does the library open?" in prompt  # the reply read the document
    assert [s.name for s in began[0].sources] == ["notes.txt"]
    shown = window.transcript.toPlainText()
    assert "Sources: notes.txt" in shown and "first token" in shown  # the footer's time to the first token


def test_the_chip_on_a_sent_message_and_the_source_open_the_document(qtbot, make_window, notes):
    window = make_window()
    drop_on_window(qtbot, window, [notes])
    send_and_wait(qtbot, window, "When does the library open?")
    chips = links(window.transcript, "document")
    tokens = len(window.session.tokenizer(NOTES, add_special_tokens=False)["input_ids"])
    assert [text for text, _ in chips] == [f"notes.txt · {tokens:,} tokens"]  # the chip on the message: name, tokens
    viewer = click(window, chips[0][1])
    assert viewer.text.toPlainText() == NOTES and viewer.isVisible() and viewer.text.isReadOnly()
    viewer.find_box.setText("three weeks")
    assert viewer.find_next() and viewer.selected_text() == "three weeks"
    sources = links(window.transcript, "source")
    assert [text for text, _ in sources] == ["notes.txt"]
    assert click(window, sources[0][1]).text.toPlainText() == NOTES  # a whole document: the document itself
    chat_id = window.conversation_id
    window.new_conversation()
    window.open_conversation(chat_id)
    assert [text for text, _ in links(window.transcript, "document")] == [f"notes.txt · {tokens:,} tokens"]  # reopened


def test_a_pdf_pasted_as_a_path_and_a_docx_from_the_paperclip(qtbot, make_window, store, tmp_path, monkeypatch):
    window = make_window()
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(pdf_with_pages([["Quarterly report, page one."], ["Revenue rose by nine percent."],
                                    ["Costs fell on page three."]]))
    paper = docx.Document()
    paper.add_paragraph("Minutes of the meeting: the budget was approved.")
    word = tmp_path / "minutes.docx"
    paper.save(word)
    window.composer.setPlainText("Compare ")
    paste(window, pasted_text(f"  '{pdf}'\n"))  # a file manager's "copy path", quoted, with its newline
    wait_for_reads(qtbot, window)
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *args, **kwargs: ([str(word)], ""))
    window.attachments.attach_button.click()
    wait_for_reads(qtbot, window)
    assert window.composer.toPlainText() == "Compare "  # the path was attached, not pasted
    report_chip, minutes_chip = chip_texts(window)
    assert report_chip.startswith("report.pdf · 3 pages · ") and report_chip.endswith(" tokens")
    assert minutes_chip.startswith("minutes.docx · ") and "pages" not in minutes_chip
    paste(window, pasted_text("/no/such/file.txt is not a file"))
    assert "/no/such/file.txt is not a file" in window.composer.toPlainText()  # other text pastes as text
    send_and_wait(qtbot, window, "Compare them.")
    stored = store.documents.of_chat(window.conversation_id)
    assert [(d.name, d.kind, d.pages) for d in stored] == [("report.pdf", "pdf", 3), ("minutes.docx", "docx", None)]
    assert "Revenue rose by nine percent." in store.documents.load(stored[0].id).text


def widened(window, positions: int = 2048) -> None:
    """The window's pair swapped for the tiny model with a context window of `positions` (the fixture's 512 holds
    less than one 1,200-character passage of the byte tokenizer), its own draft."""
    from tiny_models import build_tiny_llama

    tokenizer = window.session.tokenizer
    model = build_tiny_llama(len(tokenizer), seed=0, max_positions=positions)
    model.generation_config.eos_token_id = None
    loaded = LoadedModel(ModelSource("folder", "tiny-wide"), model, tokenizer, torch.device("cpu"), torch.float32)
    window.session.pair = ModelPair(loaded, loaded)
    window.session.status_changed.emit()


def test_a_long_document_is_read_as_passages_with_their_pages_in_the_footer(qtbot, make_window, tmp_path):
    """A 6-page PDF of 3,600 characters does not fit a 2,048-token window whole: the reply reads the passages that
    match the question, and its footer names each with its page; a passage's link shows that passage."""
    window = make_window()
    widened(window)
    pdf = tmp_path / "long.pdf"
    pages = [[f"Page {n} line {i}: the archive keeps letters from {1900 + n * 10 + i}." for i in range(11)]
             for n in range(1, 7)]
    pdf.write_bytes(pdf_with_pages(pages))
    drop_on_window(qtbot, window, [pdf])
    window.composer.setPlainText("Which letters?")
    window.attachments.meter.refresh()
    assert window.attachments.meter.meter.window == 2048
    assert "long.pdf is too long to read whole" in window.attachments.meter.warning.text()
    assert window.attachments.meter.warning.isVisible()
    with qtbot.waitSignal(window.reply_finished, timeout=STREAM_TIMEOUT):
        window.send()
        assert window.banner.isHidden(), window.banner.label.text()  # the passages fit: the reply starts
    sources = links(window.transcript, "source")
    assert sources and all(text.startswith("long.pdf, p. ") for text, _ in sources)
    passage = click(window, sources[0][1]).text.toPlainText()
    assert passage.lstrip().startswith("Page ") and 600 <= len(passage) <= 1800
    window.open_race()  # the race reads what the reply read: the passages, not the document too long for it
    raced = window.race_window.prompt.toPlainText()
    assert raced.startswith(PASSAGES_INTRO) and raced.endswith("\n\nWhich letters?")
    assert raced.count('<passage source="long.pdf, p. ') == len(sources) and "<document" not in raced
    window.race_window.close()


def test_bad_files_are_said_at_the_composer_and_the_text_and_chips_stay(qtbot, make_window, notes, tmp_path):
    window = make_window()
    drop_on_window(qtbot, window, [notes])
    window.composer.setPlainText("My question")
    binary = tmp_path / "data.txt"
    binary.write_bytes(bytes(range(256)) * 64)
    drop_on_window(qtbot, window, [binary])
    problem = window.attachments.tray.problem
    assert problem.isVisible() and "data.txt" in problem.label.text()
    assert window.banner.isHidden()  # at the composer, not the banner above the chat
    problem.findChild(type(window.send_button)).click()  # Dismiss
    assert problem.isHidden()
    window.attachments.attach_files([str(tmp_path / "missing.md")])
    wait_for_reads(qtbot, window)
    assert problem.isVisible() and "missing.md" in problem.label.text()
    assert "\n" not in problem.label.text() and "Traceback" not in problem.label.text()
    assert window.composer.toPlainText() == "My question" and len(chip_texts(window)) == 1


def test_an_unexpected_failure_is_one_plain_line(qtbot, make_window, notes, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("a reader's bug")

    monkeypatch.setattr(attachments_module, "read_document", broken)
    window = make_window()
    drop_on_window(qtbot, window, [notes])
    said = window.attachments.tray.problem.label.text()
    assert said == "notes.txt could not be read: something unexpected went wrong (ValueError). It was not attached."


def test_a_refused_save_keeps_the_message_and_its_chips(qtbot, make_window, store, notes, monkeypatch):
    window = make_window()
    drop_on_window(qtbot, window, [notes])

    def full_disk(*args):  # inside the write transaction, after the message's row is in
        raise StorageError("the disk is full")

    monkeypatch.setattr(document_shelf, "add_document", full_disk)
    window.composer.setPlainText("Keep me")
    window.send()
    assert window.composer.toPlainText() == "Keep me" and len(chip_texts(window)) == 1
    assert "could not be saved" in window.banner.label.text()
    assert store.messages(window.conversation_id) == []  # one transaction: the message went back with its documents


def test_removing_a_chip_leaves_its_document_out(qtbot, make_window, notes, tmp_path):
    window = make_window()
    other = tmp_path / "other.md"
    other.write_text("# Other\n\nNot wanted.")
    drop_on_window(qtbot, window, [notes, other])
    assert [text.split(" · ")[0] for text in chip_texts(window)] == ["notes.txt", "other.md"]
    window.attachments.tray.chips[1].remove.click()
    assert [d.name for d in window.attachments.documents()] == ["notes.txt"]
    drop_on_window(qtbot, window, [notes])  # the same file again
    assert "attached already" in window.attachments.tray.problem.label.text() and len(chip_texts(window)) == 1


def test_the_meter_follows_the_typing_and_the_chips(qtbot, make_window, notes):
    window = make_window()
    meter = window.attachments.meter
    assert meter.meter.message == 0  # nothing typed: not even a turn's markers
    assert meter.isVisible() and meter.summary.text() == "0 / 512 tokens"
    qtbot.keyClicks(window.composer, "How long")
    assert meter.meter.message == 0  # debounced: not at every key
    qtbot.waitUntil(lambda: meter.meter.message > MESSAGE_OVERHEAD, timeout=DEBOUNCE_MS * 20)
    typed = meter.meter.message
    qtbot.keyClicks(window.composer, " are the loans?")
    qtbot.waitUntil(lambda: meter.meter.message > typed, timeout=DEBOUNCE_MS * 20)
    assert meter.meter.documents == 0 and "documents" not in meter.summary.text()
    drop_on_window(qtbot, window, [notes])
    assert meter.meter.documents > len(NOTES) // 2  # the byte tokenizer: a token a byte or so
    assert f"documents {meter.meter.documents:,}" in meter.summary.text()
    assert meter.summary.text().endswith(f"message {meter.meter.message:,}")
    assert meter.bar.segments(500.0)[0][0] == "documents" and not meter.warning.isVisible()
    # the chip counts the text; the bar's tooltip says why its documents hold more (the label around each)
    assert f"documents: {meter.meter.documents:,} tokens (their text, each inside the label" in meter.bar.toolTip()
    window.attachments.remove(window.attachments.pending[0])
    assert meter.meter.documents == 0


def test_the_meter_hides_without_a_model(qtbot, make_window):
    window = make_window()
    window.session.pair = None
    window.session.status_changed.emit()
    window.attachments.meter.refresh()
    assert window.attachments.meter.isHidden()


def hold_each_read_until(monkeypatch, release: threading.Event, reached: list) -> None:
    """Injected: the reader, once it has read its first chunk, waits (on the background thread) until `release` is
    set (at most 30 s); then it goes on through the real reader, which hears Cancel at its next chunk."""
    real = attachments_module.read_document

    def held(path, limits=None, cancel=None, progress=None):
        def report(fraction):
            progress(fraction)
            if fraction > 0 and not reached:
                reached.append(threading.current_thread())
                assert release.wait(30), "never released"
        return real(path, cancel=cancel, progress=report)

    monkeypatch.setattr(attachments_module, "read_document", held)


def test_cancel_stops_a_read_and_the_next_file_goes_on(qtbot, make_window, notes, tmp_path, monkeypatch):
    window = make_window()
    big = tmp_path / "big.txt"
    big.write_text("A line of a long log file.\n" * 120_000)  # 3 MiB: read in several chunks
    cancel_pressed, reached = threading.Event(), []
    hold_each_read_until(monkeypatch, cancel_pressed, reached)
    window.attachments.attach_files([str(big), str(notes)])
    tray = window.attachments.tray
    qtbot.waitUntil(lambda: bool(reached) and tray.progress.value() > 0, timeout=READ_TIMEOUT)
    assert tray.reading_box.isVisible() and tray.reading.text().startswith("Reading big.txt… ")
    assert "(1 more waiting)" in tray.reading.text()
    tray.cancel.click()
    cancel_pressed.set()
    wait_for_reads(qtbot, window)
    assert [text.split(" · ")[0] for text in chip_texts(window)] == ["notes.txt"]
    assert tray.problem.isHidden() and tray.reading_box.isHidden()
    assert window.statusBar().currentMessage() == "Stopped reading big.txt."
    assert reached[0] is not threading.main_thread()


def test_the_window_stays_responsive_while_a_file_is_read(qtbot, make_window, tmp_path, monkeypatch):
    """The read waits, on its thread, until a 20 ms timer on the GUI thread has fired ten times: it ends only if
    the window's loop runs meanwhile."""
    window = make_window()
    pdf = tmp_path / "slow.pdf"
    pdf.write_bytes(pdf_with_pages([[f"Page {n}."] for n in range(40)]))
    ticks, ticked, reached = [], threading.Event(), []
    hold_each_read_until(monkeypatch, ticked, reached)
    timer = QTimer(interval=20)
    timer.timeout.connect(lambda: (ticks.append(time.perf_counter()), len(ticks) >= 10 and ticked.set()))
    timer.start()
    window.attachments.attach_files([str(pdf)])
    wait_for_reads(qtbot, window)
    timer.stop()
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) >= 10 and max(gaps) < 0.25
    assert [text.split(" · ")[:2] for text in chip_texts(window)] == [["slow.pdf", "40 pages"]]


def test_send_waits_for_a_read(qtbot, make_window, notes, tmp_path, monkeypatch):
    window = make_window()
    release, reached = threading.Event(), []
    hold_each_read_until(monkeypatch, release, reached)
    window.attachments.attach_files([str(notes)])
    qtbot.waitUntil(lambda: bool(reached), timeout=READ_TIMEOUT)
    window.composer.setPlainText("Too soon")
    window.send()
    assert window.conversation_id is None and window.composer.toPlainText() == "Too soon"
    release.set()
    wait_for_reads(qtbot, window)
    assert chip_texts(window)


def test_only_one_existing_file_path_is_taken_from_a_paste(tmp_path, qapp):
    from specchat.ui.composer import MAX_PATH_CHARS, dropped_files, pasted_path

    path = tmp_path / "notes.txt"
    path.write_text(NOTES)
    assert pasted_path(str(path)) == str(path) == pasted_path(f'"{path}"\n') == pasted_path(path.as_uri())
    assert pasted_path("notes.txt") is None  # a relative name is a word, not a path
    assert pasted_path(str(tmp_path)) is None  # a folder: pasted as text
    assert pasted_path(f"{path}\n{path}") is None and pasted_path("/" + "a" * MAX_PATH_CHARS) is None
    assert pasted_path("/tmp/\x00nul") is None and pasted_path("/" + "b" * 300 + "/c") is None  # name too long
    web = QMimeData()
    web.setUrls([QUrl("https://example.com/report.pdf")])
    assert dropped_files(web) == [] and dropped_files(file_urls([path])) == [str(path)]
    assert dropped_files(file_urls([path] * 21)) == [str(path)] * 21  # handed over: the window refuses the extra


def test_a_draft_copied_from_a_document_names_its_page_when_hovered(qtbot):
    from PySide6.QtGui import QTextCursor

    from specchat.chats import OpenChat
    from specchat.chats.context_plan import ChatDocument
    from specchat.chats.reply_spans import ReplySpans
    from specchat.documents.document import Document
    from specchat.storage.records import MessageInfo
    from specchat.ui.attachments import attached_to
    from specchat.ui.transcript import MessageView, Transcript

    text = "Cover page.\f" + "Terms: the warranty lasts five years from purchase."
    document = Document("contract.pdf", "pdf", text, 2, (0, 12), "0" * 64, len(text), ())
    reply = "It says the warranty lasts five years. Good."
    spans = [[0, 8, "target"], [8, 38, "draft"], [38, 44, "target"]]
    chat = OpenChat(1, messages=[MessageInfo(7, 1, 1, "assistant", reply, None, spans=spans)],
                    documents=[ChatDocument(3, 6, document)])
    transcript = Transcript()
    qtbot.addWidget(transcript)
    transcript.show_messages([MessageView(7, "assistant", reply, ReplySpans.from_json(spans), **attached_to(chat, 7))])
    body = transcript.document().toPlainText()
    cursor = QTextCursor(transcript.document())
    cursor.setPosition(body.index("warranty lasts") + 3)
    assert cursor.charFormat().toolTip().endswith("\nfrom contract.pdf, p. 2")
    cursor.setPosition(body.index("Good") + 2)
    assert "contract.pdf" not in cursor.charFormat().toolTip()


def test_a_drop_of_more_files_than_a_message_takes_attaches_twenty_and_says_so(qtbot, make_window, tmp_path):
    window = make_window()
    window.composer.setPlainText("Compare these")
    paths = []
    for index in range(22):
        paths.append(tmp_path / f"note-{index:02}.txt")
        paths[-1].write_text(f"Note {index}: the meeting moved to room {index}.", encoding="utf-8")
    paste(window, file_urls(paths))  # a paste of 22 files into the composer, as a file manager's copy gives it
    wait_for_reads(qtbot, window)
    assert len(chip_texts(window)) == 20 and window.composer.toPlainText() == "Compare these"  # no paths pasted
    assert window.attachments.tray.problem.label.text() == ("A message takes at most 20 documents: 2 of these were "
                                                            "not attached.")


def test_the_paperclip_opens_where_files_were_last_attached_from_with_documents_first(
        qtbot, make_window, tmp_path, monkeypatch):
    """The dialog opened in the folder specchat was started in, and listed a set's order of 90 code suffixes first
    ("*.ipynb *.zsh *.hpp", another order each run): it opens in the Documents folder (else home) and then where
    the last file came from, with PDF, Word, Markdown and text first, in the same order every time."""
    from specchat.documents.formats import KIND_BY_SUFFIX
    from specchat.ui.attachments import ATTACH_FOLDER_KEY, file_filter

    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))  # no user-dirs.dirs naming another Documents
    monkeypatch.delenv("XDG_DOCUMENTS_DIR", raising=False)
    QSettings().remove(ATTACH_FOLDER_KEY)
    folder = tmp_path / "papers"
    folder.mkdir()
    note = folder / "note.txt"
    note.write_text("The meeting moved to Tuesday.", encoding="utf-8")
    asked = []

    def dialog(parent, title, start, filters):
        asked.append((start, filters))
        return [str(note)], ""

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", dialog)
    window = make_window()
    try:
        window.attachments.attach_button.click()
        wait_for_reads(qtbot, window)
        window.attachments.attach_button.click()
        wait_for_reads(qtbot, window)
    finally:
        QSettings().remove(ATTACH_FOLDER_KEY)
    assert [start for start, _ in asked] == [str(home / "Documents"), str(folder)]
    assert asked[0][1] == asked[1][1] == file_filter()
    every = file_filter().split(";;")[0]
    assert every.startswith("Documents (*.pdf *.docx *.md ") and "*.txt" in every.split("*.py")[0]
    assert file_filter().split(";;")[1:4] == ["PDF (*.pdf)", "Word (DOCX) (*.docx)",
                                              "Markdown (*.md *.markdown *.mdown *.mkd *.mdx)"]
    assert list(KIND_BY_SUFFIX)[:2] == [".pdf", ".docx"] and set(KIND_BY_SUFFIX) >= {".py", ".ipynb", ".zsh"}


def test_the_race_is_primed_with_the_last_question_and_its_document(qtbot, make_window, notes):
    """The race window took the chat's last question alone: its lanes raced a question about a document they
    were never given. It is primed with the question as the model read it, the document whole before it."""
    window = make_window()
    window.attachments.attach_files([str(notes)])
    wait_for_reads(qtbot, window)
    send_and_wait(qtbot, window, "When does the library open?")
    window.open_race()
    prompt = window.race_window.prompt.toPlainText()
    assert prompt == f'<document name="notes.txt">\n{NOTES}\n</document>\n\nWhen does the library open?'
    with qtbot.waitSignal(window.race_window.race_finished, timeout=STREAM_TIMEOUT):
        window.race_window.start_race()
    saved = window.race_window.history.item(0)  # the comparison is listed by its document and question
    assert saved.text().startswith("notes.txt: When does the library open?"[:40] + "\n")
    assert len(saved.toolTip()) <= 601
    window.race_window.close()
    window.new_conversation()
    send_and_wait(qtbot, window, "Hello there")
    window.open_race()
    assert window.race_window.prompt.toPlainText() == "Hello there"  # a chat without documents: its question
