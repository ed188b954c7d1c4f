"""The race window with a tiny model: lanes run and stream, the comparison is checked, saved, replayed, reopened;
its table states the noise: no ratio for a lane that drafted too little, the median and range of alternated runs."""

import re

import pytest
from PySide6.QtCore import QTimer

from specchat.ui.race import RaceWindow
from specchat.engine.race import RUNS_KEY, Track, lane_results
from specchat.ui.race.table import ResultsTable, word_diff
from specchat.ui.session import ChatSession
from specchat.ui.settings import AppSettings
from race_text import chars_at

RACE_TIMEOUT = 120000


@pytest.fixture
def race_window(qtbot, store, tiny_pair):
    session = ChatSession(store, AppSettings(drafter="model", k=4, adaptive_k=False), pair=tiny_pair)
    window = RaceWindow(session)
    window.repeat_s, window.max_runs = 600.0, 3  # "short" on a busy machine too: each lane runs 3 times
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
    # the model lane drafts all (the target is its own draft), and the short race ran the lanes again: its
    # speedup is the median of its runs with their range, the plain lane's cell gives the noise of its own runs
    runs = len(race_window.tracks[2].run_speeds)
    assert runs == 3 and len(race_window.tracks[0].run_speeds) == runs
    assert re.fullmatch(r"\d+\.\d\d× \(\d+\.\d\d–\d+\.\d\d\)", race_window.results.item(2, 4).text())
    assert f"median of {runs} runs" in race_window.results.item(2, 4).toolTip()
    assert re.fullmatch(r"baseline \(noise ±\d+%\)", race_window.results.item(0, 4).text())

    saved = store.list_comparisons()
    assert len(saved) == 1 and saved[0].identical is True and saved[0].drafters == ("none", "pld", "model")
    stored = store.runs()
    assert [(r.source, r.drafter, r.comparison_id) for r in stored] == [
        ("race", "none", saved[0].id), ("race", "pld", saved[0].id), ("race", "model", saved[0].id)]
    assert stored[2].speedup == pytest.approx(lane_results(race_window.tracks, True)[2].speedup)  # the median
    assert stored[2].speedup_basis == "measured" and stored[2].accepted_by_position and stored[0].speedup is None


def test_replay_plays_to_the_end_and_shows_each_lane_by_its_clock(qtbot, race_window):
    race(qtbot, race_window, drafters=("model",))
    race_window.speed.setCurrentIndex(race_window.speed.count() - 1)  # 4x
    race_window.seek(0.0)
    assert all(lane.view.toPlainText() == "" for lane in race_window.lanes)
    halfway = race_window.tracks[1].wall_s / 2
    race_window.seek(halfway)
    shown = [len(lane.view.toPlainText()) for lane in race_window.lanes]
    expected = [chars_at(track, halfway) for track in race_window.tracks]
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


def lane(drafter, tokens_per_s, proposed, accepted, runs=None):
    stats = {"new_tokens": 33, "wall_s": 33 / tokens_per_s, "draft_proposed": proposed, "draft_accepted": accepted,
             "alpha": accepted / proposed if proposed else 0.0, "tau": 1.0}
    return Track(drafter, stats={**stats, RUNS_KEY: runs} if runs else stats)


def speedup_cells(qtbot, tracks):
    table = ResultsTable()
    qtbot.addWidget(table)
    table.fill(lane_results(tracks, greedy=True))
    return [(table.item(row, 4).text(), table.item(row, 4).font().bold()) for row in range(table.rowCount())]


def test_a_lane_that_drafted_too_little_shows_no_ratio(qtbot):
    """The issue's race: prompt lookup drafted nothing (α 0.00, τ 1.00), yet its row read "1.15×" in bold."""
    table = ResultsTable()
    qtbot.addWidget(table)
    table.fill(lane_results([lane("none", 80.0, 0, 0), lane("pld", 92.0, 0, 0), lane("model", 92.0, 12, 2)], True))
    cells = [(table.item(row, 4).text(), table.item(row, 4).font().bold()) for row in range(3)]
    assert cells == [("baseline", False), ("decoded plainly", False), ("decoded almost plainly", False)]
    assert all("×" not in text for text, _ in cells)
    assert "Decoded plainly (nothing worth drafting): accepted drafts made" in table.item(1, 4).toolTip()
    assert "Decoded almost plainly (2 drafted tokens kept): accepted" in table.item(2, 4).toolTip()


def test_a_drafted_lane_shows_its_median_and_range_and_bold_only_when_clear(qtbot):
    plain = lane("none", 90.0, 0, 0, runs=[80.0, 100.0, 90.0, 88.0, 92.0])
    cells = speedup_cells(qtbot, [plain, lane("pld", 96.0, 30, 20, runs=[96.0, 130.0, 99.0, 121.0, 92.0]),
                                  lane("model", 120.0, 30, 25, runs=[120.0, 130.0, 117.0, 110.0, 115.0]),
                                  lane("hybrid", 120.0, 30, 25)])
    assert cells == [("baseline (noise ±11%)", False),
                     ("1.20× (1.00–1.38)", False),  # one run at plain's speed: within the noise, not bold
                     ("1.30× (1.25–1.50)", True),  # every run faster than the plain run beside it
                     ("1.50× (one run)", False)]  # ran once: its noise is not measured


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
