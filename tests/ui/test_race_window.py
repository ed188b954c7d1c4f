"""The race window with a tiny model: lanes run and stream, the comparison is checked, saved, replayed, reopened."""

import pytest
from PySide6.QtCore import QTimer

from specchat.ui.race import RaceWindow
from specchat.ui.race.table import word_diff
from specchat.ui.session import ChatSession
from specchat.ui.settings import AppSettings

RACE_TIMEOUT = 120000


@pytest.fixture
def race_window(qtbot, store, tiny_pair):
    session = ChatSession(store, AppSettings(drafter="model", k=4, adaptive_k=False), pair=tiny_pair)
    window = RaceWindow(session)
    qtbot.addWidget(window)
    window.max_tokens.setValue(40)
    window.show()
    yield window
    window.close()


def race(qtbot, window, prompt="The quick brown fox", drafters=("pld", "model")):
    window.prompt.setPlainText(prompt)
    for drafter, box in window.drafter_boxes.items():
        box.setChecked(drafter in drafters)
    with qtbot.waitSignal(window.race_finished, timeout=RACE_TIMEOUT):
        window.start_race()


def test_race_records_every_lane_and_greedy_outputs_are_identical(qtbot, race_window, store):
    streamed = []
    timer = QTimer(interval=5)
    timer.timeout.connect(lambda: streamed.append([len(lane.view.toPlainText()) for lane in race_window.lanes]))
    timer.start()
    race(qtbot, race_window)
    timer.stop()

    assert [t.drafter for t in race_window.tracks] == ["none", "pld", "model"]
    assert all(len(t.token_ids) == 40 and t.finish_reason == "length" for t in race_window.tracks)
    assert race_window.identical()
    assert "Identical output" in race_window.verdict.text()
    assert any(0 < counts[0] for counts in streamed)  # the plain lane streamed live...
    assert any(counts[0] > 0 and counts[2] == 0 for counts in streamed)  # ...while the later lanes waited

    plain, _, model = race_window.lanes
    assert plain.view.draft_positions() == []  # plain decoding has no drafts to highlight
    assert len(model.view.draft_positions()) > 0  # the tiny pair's draft is the target: nearly all accepted
    assert race_window.results.rowCount() == 3
    assert race_window.results.item(2, 8).text() == "✓ yes"

    saved = store.list_comparisons()
    assert len(saved) == 1 and saved[0].identical is True and saved[0].drafters == ("none", "pld", "model")
    runs = store.runs()
    assert [(r.source, r.drafter, r.comparison_id) for r in runs] == [
        ("race", "none", saved[0].id), ("race", "pld", saved[0].id), ("race", "model", saved[0].id)]
    assert runs[2].speedup is not None and runs[2].speedup_basis == "measured"
    assert runs[2].accepted_by_position and runs[0].speedup is None


def test_replay_plays_to_the_end_and_shows_each_lane_by_its_clock(qtbot, race_window):
    race(qtbot, race_window, drafters=("model",))
    race_window.speed.setCurrentIndex(race_window.speed.count() - 1)  # 4x
    race_window.seek(0.0)
    assert all(lane.view.toPlainText() == "" for lane in race_window.lanes)
    halfway = race_window.tracks[1].wall_s / 2
    race_window.seek(halfway)
    shown = [len(lane.view.toPlainText()) for lane in race_window.lanes]
    expected = [track.chars_at(halfway) for track in race_window.tracks]
    assert shown == expected
    with qtbot.waitSignal(race_window.replay_finished, timeout=RACE_TIMEOUT):
        race_window.play()
    assert [lane.view.toPlainText() for lane in race_window.lanes] == [t.text for t in race_window.tracks]
    assert race_window.clock_label.text().startswith(f"{race_window.duration():.2f}")


def test_saved_comparison_reopens_with_its_highlighting(qtbot, race_window, store):
    race(qtbot, race_window, drafters=("model",))
    texts = [lane.view.toPlainText() for lane in race_window.lanes]
    drafts = [lane.view.draft_positions() for lane in race_window.lanes]
    comparison_id = race_window.comparison_id

    race_window._set_lanes([])
    race_window.open_comparison(comparison_id)
    assert [lane.view.toPlainText() for lane in race_window.lanes] == texts
    assert [lane.view.draft_positions() for lane in race_window.lanes] == drafts
    assert race_window.history.count() == 1 and race_window.identical()

    race_window.delete_comparison(comparison_id, confirm=False)
    assert store.list_comparisons() == [] and store.runs() == [] and race_window.lanes == []


def test_stopping_a_race_saves_nothing_and_the_window_stays_usable(qtbot, race_window, store):
    race_window.max_tokens.setValue(3000)
    race_window.prompt.setPlainText("Once upon a time")
    QTimer.singleShot(300, race_window.stop)
    with qtbot.waitSignal(race_window.race_finished, timeout=RACE_TIMEOUT):
        race_window.start_race()
    assert store.list_comparisons() == [] and "stopped" in race_window.verdict.text()
    assert not race_window.running() and not race_window.session.device_busy()


def test_empty_prompt_and_busy_device_get_a_message(race_window, store):
    race_window.prompt.setPlainText("   ")
    race_window.start_race()
    assert "Write a prompt" in race_window.verdict.text() and not race_window.running()
    race_window.prompt.setPlainText("hello")
    race_window.session.claim_device("chat")
    race_window.start_race()
    assert "chat" in race_window.verdict.text() and not race_window.running()


def test_sampled_race_says_outputs_are_samples(qtbot, store, tiny_pair):
    session = ChatSession(store, AppSettings(drafter="model", k=4, adaptive_k=False, temperature=0.8),
                          pair=tiny_pair)
    window = RaceWindow(session)
    qtbot.addWidget(window)
    window.max_tokens.setValue(16)
    race(qtbot, window, drafters=("model",))
    assert "different samples of the same distribution" in window.verdict.text()
    assert store.list_comparisons()[0].identical is None
    window.close()


def test_word_diff_marks_what_changed():
    assert word_diff("the cat sat", "the cat sat") == [("equal", "the cat sat")]
    assert word_diff("the cat sat down", "the dog sat down") == [
        ("equal", "the "), ("delete", "cat"), ("insert", "dog"), ("equal", " sat down")]


def test_the_seconds_axis_has_as_many_decimals_as_its_ticks_need():
    from specchat.ui.race.lanes import seconds_format

    for span, ticks in [(0.2, 5), (0.15, 4), (1.0, 5), (2.0, 5), (10.0, 6), (0.02, 5)]:
        labels = [seconds_format(span, ticks) % (i * span / (ticks - 1)) for i in range(ticks)]
        assert len(set(labels)) == ticks and float(labels[-1]) == span, labels  # no two ticks read alike
    assert seconds_format(10.0, 6) == "%.0f" and seconds_format(0.2, 5) == "%.2f"
