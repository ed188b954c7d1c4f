"""The window's chrome as the user sees it (issue 37): a note in the banner looks like information, not an error;
the status bar's two texts never run into each other at the default width; a huge message is cut before it is laid
out."""

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from specchat.engine.loading.load import LoadedModel
from specchat.ui.banner import MAX_SHOWN_CHARS, STYLES

LLAMA_NOTE = ("llama.cpp verifies on its fastest kernels: replies follow the model's distribution exactly, but "
              "rounding may differ from plain decoding where two tokens nearly tie")
LONG_STATUS = ("SmolLM2-135M-Instruct-Q4_1.gguf · Prompt lookup + past replies · adaptive K · llama.cpp, CPU, "
               "2 threads, same distribution")
LONG_STATS = ("Chat: 1 reply · 0.84× vs plain   |   Session: 12 replies · 41.3 tok/s · accepted 62% · τ 2.31 · "
              "0.84× vs plain")


def background(banner) -> str:
    """The colour the banner's frame is painted with, read from a rendering of it (inside its border, left of the
    icon)."""
    QApplication.processEvents()
    image = banner.grab().toImage()
    return image.pixelColor(4, image.height() // 2).name()


def test_the_llama_cpp_note_is_shown_as_information(make_window, tiny_pair, monkeypatch):
    window = make_window()
    monkeypatch.setattr(LoadedModel, "precision_note", property(lambda self: LLAMA_NOTE))
    session = window.session
    session._on_loaded(tiny_pair, session._load_generation)
    banner = window.banner
    assert banner.isVisible() and banner.label.text() == LLAMA_NOTE
    assert banner.kind == "info" and banner.icon.text() == "ℹ"
    assert background(banner) == QColor(STYLES["info"][1]).name()
    assert session.error is None  # said as a note, not as an error
    window._show_error("The models could not be loaded: no such file")
    assert banner.kind == "error" and banner.icon.text() == "⚠"
    assert background(banner) == QColor(STYLES["error"][1]).name() != QColor(STYLES["info"][1]).name()


def test_a_note_never_hides_an_error(make_window, tiny_pair, monkeypatch):
    window = make_window()
    window._show_error("Download failed: org/model was not found")
    monkeypatch.setattr(LoadedModel, "precision_note", property(lambda self: LLAMA_NOTE))
    window.session._on_loaded(tiny_pair, window.session._load_generation)
    assert window.banner.kind == "error" and window.banner.label.text().startswith("Download failed")


def test_a_huge_message_is_cut_before_it_is_laid_out(make_window):
    window = make_window()
    window._show_error("Could not import x.json: " + "x" * 1_000_000)
    text = window.banner.label.text()
    assert len(text) < MAX_SHOWN_CHARS + 100 and text.endswith("(cut: the message has 1,000,025 characters)")


def test_the_status_bar_texts_do_not_overlap_at_the_default_width(qtbot, make_window, monkeypatch):
    window = make_window()
    session = window.session
    monkeypatch.setattr(session, "status_text", lambda: LONG_STATUS)
    monkeypatch.setattr(session, "stats_text", lambda conversation_id: LONG_STATS)
    window.resize(1100, 720)
    window._on_model_status()
    window._refresh_session_stats()
    qtbot.waitUntil(lambda: window.statusBar().width() <= 1100 and window.model_label.width() > 0)
    QApplication.processEvents()
    left, right = window.model_label, window.session_label
    assert left.isVisible() and right.isVisible()
    assert left.geometry().right() < right.geometry().left()  # side by side, not on top of each other
    assert right.geometry().right() <= window.statusBar().contentsRect().right()
    for label, full in ((left, LONG_STATUS), (right, LONG_STATS)):
        shown = label.text()
        assert label.fontMetrics().horizontalAdvance(shown) <= label.contentsRect().width()  # drawn inside itself
        assert full.startswith(shown.rstrip("…")) and label.full_text() == full
        assert shown == full or (shown.endswith("…") and full[-14:] in label.toolTip())
    window.resize(1800, 720)  # room for both: nothing is cut
    qtbot.waitUntil(lambda: left.text() == LONG_STATUS and right.text() == LONG_STATS)
    assert left.geometry().right() < right.geometry().left() and left.toolTip() == ""
