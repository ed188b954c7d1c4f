"""The statistics dashboard: figures and charts from a seeded database, filters, exports and the benchmark."""

import csv
import json
import random
from datetime import datetime, timedelta, timezone

import pytest
from PySide6.QtCore import QDate, Qt
from PySide6.QtGui import QImage

from specchat.bench import BenchSettings, ModeRecord, bench_run_values
from specchat.storage.records import RunAggregate, RunFilter
from specchat.ui.dashboard import DashboardWindow, accepted_length_distribution, chart_labels, csv_row, time_axis_ticks
from specchat.ui.session import ChatSession
from specchat.ui.settings import AppSettings

BENCH_TIMEOUT = 120000  # generous: a loaded CI machine is slow, and a hang still fails
NOW = datetime.now(timezone.utc)
# An hour ago, but never before today's midnight: the date filters below count this run as today's (in the first
# hour after midnight "an hour ago" was yesterday, and the test failed then).
EARLIER_TODAY = max(NOW - timedelta(hours=1), datetime.combine(NOW.astimezone().date(), datetime.min.time()).astimezone())


def base_run(**values) -> dict:
    return {"target": "tiny", "draft": None, "k": 4, "adaptive": False, "temperature": 0.0, "top_p": 1.0, "top_k": 0,
            "seed": 0, "device": "cpu", **values}


def seed_runs(store) -> dict:
    """Five runs whose sums are worked out by hand in the tests below."""
    app_session = store.start_app_session("test")
    chat = store.create_conversation("Sea poems")
    common = {"app_session_id": app_session}
    runs = [
        base_run(**common, source="chat", conversation_id=chat.id, drafter="pld", created_at=NOW - timedelta(days=3),
                 new_tokens=100, wall_s=4.0, tokens_per_s=25.0, target_passes=50, draft_proposed=80,
                 draft_accepted=40, speedup=1.25, speedup_basis="calibrated",
                 proposed_by_position=[20, 20, 20, 20], accepted_by_position=[15, 12, 8, 5]),
        base_run(**common, source="chat", conversation_id=chat.id, drafter="model", draft="tiny-draft",
                 created_at=NOW - timedelta(days=2), new_tokens=120, wall_s=3.0, tokens_per_s=40.0,
                 target_passes=40, draft_proposed=96, draft_accepted=80, speedup=1.5, speedup_basis="calibrated",
                 proposed_by_position=[24, 24, 24, 24], accepted_by_position=[22, 20, 20, 18]),
        base_run(**common, source="race", drafter="none", created_at=NOW - timedelta(days=1), new_tokens=60,
                 wall_s=3.0, tokens_per_s=20.0, target_passes=60),
        base_run(**common, source="race", drafter="pld", created_at=NOW - timedelta(days=1), new_tokens=60,
                 wall_s=2.0, tokens_per_s=30.0, target_passes=30, draft_proposed=40, draft_accepted=30, speedup=1.5,
                 speedup_basis="measured", proposed_by_position=[10, 10, 10, 10], accepted_by_position=[9, 8, 7, 6]),
        base_run(**common, source="bench", category="coding", drafter="hybrid", draft="tiny-draft",
                 created_at=EARLIER_TODAY, new_tokens=64, wall_s=1.6, tokens_per_s=40.0, target_passes=20,
                 draft_proposed=80, draft_accepted=44, speedup=2.0, speedup_basis="measured",
                 proposed_by_position=[20, 20, 20, 20], accepted_by_position=[16, 12, 10, 6]),
    ]
    for run in runs:
        store.record_run(run)
    return {"app_session": app_session, "chat": chat.id}


def seed_realistic(store, days: int = 4, seed: int = 3) -> None:
    """About forty runs over a few days, as a week of use looks: chats, a race, a benchmark (for the screenshot)."""
    rng = random.Random(seed)
    first_acceptance = {"pld": 0.55, "model": 0.78, "hybrid": 0.82}
    speedup = {"none": 1.0, "pld": 1.18, "model": 1.35, "hybrid": 1.5}
    start = NOW - timedelta(days=days)
    chats = [store.create_conversation(t).id for t in ("Rust borrow checker", "Trip to Lisbon", "Sea poems")]
    categories = ("coding", "writing", "qa", "math")
    for index in range(40):
        drafter = ("none", "pld", "model", "hybrid")[index % 4]
        source = "bench" if index >= 28 else ("race" if 20 <= index < 28 else "chat")
        created = start + timedelta(hours=index * days * 24 / 42 + rng.uniform(0, 1))
        k = 5
        steps = rng.randint(20, 60) if drafter != "none" else 0
        proposed = [steps] * k
        accepted, rate = [], first_acceptance.get(drafter, 0.0) + rng.uniform(-0.05, 0.05)
        remaining = steps
        for _ in range(k):  # each position accepts a share of the steps that reached it
            remaining = round(remaining * max(rate, 0.0))
            accepted.append(remaining)
            rate *= 0.86
        new_tokens = sum(accepted) + steps if steps else rng.randint(80, 220)
        passes = steps or new_tokens
        plain_speed = 21.0 + rng.uniform(-1.5, 1.5)
        boost = speedup[drafter] * rng.uniform(0.9, 1.1) if drafter != "none" else rng.uniform(0.96, 1.04)
        store.record_run(base_run(
            target="SmolLM2-135M-Instruct", draft="SmolLM2-draft-30M" if drafter in ("model", "hybrid") else None,
            k=k, source=source, drafter=drafter, created_at=created,
            conversation_id=chats[index % 3] if source == "chat" else None,
            category=categories[index % 4] if source == "bench" else None,
            new_tokens=new_tokens, target_passes=passes, draft_proposed=steps * k, draft_accepted=sum(accepted),
            tokens_per_s=plain_speed * boost, wall_s=new_tokens / (plain_speed * boost),
            speedup=None if drafter == "none" and source != "chat" else boost,
            speedup_basis="calibrated" if source == "chat" else "measured",
            proposed_by_position=proposed, accepted_by_position=accepted))


@pytest.fixture
def make_dashboard(qtbot, store, tiny_pair):
    windows = []

    def make(drafter="model"):
        session = ChatSession(store, AppSettings(drafter=drafter, max_new_tokens=16, k=4, adaptive_k=False),
                              pair=tiny_pair)
        window = DashboardWindow(session)
        qtbot.addWidget(window)
        window.refresh()
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.close()


def choose(combo, data) -> None:
    index = next(i for i in range(combo.count()) if combo.itemData(i) == data)
    combo.setCurrentIndex(index)


def card(window, key) -> str:
    return window.cards[key].value.text()


# --- computations ---------------------------------------------------------------------------------------------------

def test_accepted_length_distribution_is_exact():
    # 10 steps; 6 accepted at least 1, 3 at least 2, 1 all three → exactly 0,1,2,3 for 4,3,2,1 steps
    assert accepted_length_distribution([10, 10, 8], [6, 3, 1]) == [0.4, 0.3, 0.2, 0.1]
    assert accepted_length_distribution([5, 5], [5, 5]) == [0.0, 0.0, 1.0]
    assert accepted_length_distribution([], []) == []
    assert accepted_length_distribution([0, 0], [0, 0]) == []


def test_summary_and_csv_row_of_runs(store):
    seed_runs(store)
    runs = store.runs()
    summary = RunAggregate.of(runs)
    assert (summary.runs, summary.new_tokens, summary.draft_proposed, summary.draft_accepted) == (5, 404, 296, 194)
    assert summary.mean_speedup == pytest.approx(1.5625)
    assert summary.tau == pytest.approx(404 / 200) and summary.tokens_per_s == pytest.approx(404 / 13.6)
    row = csv_row(runs[0])
    assert "15;12;8;5" in row and "pld" in row and "" in row  # lists joined, None as an empty cell


def test_time_axis_ticks_fall_on_whole_days_or_hours():
    def local(*args):
        return datetime(*args).astimezone()

    start, end, ticks, fmt = time_axis_ticks(local(2024, 5, 10, 14, 30), local(2024, 5, 13, 9, 0))
    assert (start, end, ticks, fmt) == (local(2024, 5, 10), local(2024, 5, 14), 5, "d MMM")
    start, end, ticks, fmt = time_axis_ticks(local(2024, 5, 1, 8), local(2024, 5, 20, 8))  # 20 days: every 3rd
    assert (start, end, ticks) == (local(2024, 5, 1), local(2024, 5, 22), 8)
    start, end, ticks, fmt = time_axis_ticks(local(2024, 5, 10, 9, 20), local(2024, 5, 10, 13, 30))
    assert (start, end, ticks, fmt) == (local(2024, 5, 10, 9), local(2024, 5, 10, 14), 6, "HH:mm")
    start, end, ticks, fmt = time_axis_ticks(local(2024, 5, 10, 4, 16, 5), local(2024, 5, 10, 4, 17, 40))
    assert (start, end, ticks, fmt) == (local(2024, 5, 10, 4, 16), local(2024, 5, 10, 4, 18), 3, "HH:mm")
    start, end, ticks, _ = time_axis_ticks(local(2024, 5, 10, 4, 3), local(2024, 5, 10, 4, 40))  # every 10 min
    assert (start, end, ticks) == (local(2024, 5, 10, 4, 0), local(2024, 5, 10, 4, 40), 5)


def test_chart_labels_name_pair_groups_by_what_differs(store):
    seed_runs(store)
    groups = store.run_groups("pair")
    assert sorted(chart_labels(groups, "pair").values()) == ["draft model", "hybrid", "plain", "prompt lookup"]
    store.record_run(base_run(target="other", drafter="pld"))
    labels = chart_labels(store.run_groups("pair"), "pair")
    # two targets: full names, the drafter as the footers name it
    assert "other · prompt lookup" in labels.values() and "tiny · prompt lookup" in labels.values()


def test_bench_run_values_for_the_store(tiny_pair):
    settings = BenchSettings(k=3, adaptive=False, max_new_tokens=8)
    record = ModeRecord(question_id=7, category="math", mode="hybrid", new_tokens=8, wall_s=0.5, target_passes=3,
                        draft_proposed=9, draft_accepted=5, draft_s=0.1, verify_s=0.3,
                        proposed_by_position=[3, 3, 3], accepted_by_position=[3, 1, 1], speedup=1.6)
    values = bench_run_values(record, tiny_pair, settings, app_session_id=None)
    assert values.source == "bench" and values.drafter == "hybrid" and values.draft == tiny_pair.draft.name
    assert values.speedup == 1.6 and values.speedup_basis == "measured" and values.tokens_per_s == 16.0
    assert values.acceptance_by_position == [1.0, 1 / 3, 1 / 3] and values.k == 3
    assert values.baseline_tokens_per_s == pytest.approx(10.0) and values.device == "cpu"
    plain = bench_run_values(ModeRecord(7, "math", "none", 8, 1.0, 8, None, None, speedup=1.0), tiny_pair, settings,
                             None)
    assert plain.draft is None and plain.speedup is None and plain.draft_proposed == 0
    assert bench_run_values(ModeRecord(7, "math", "hf-pld", 8, 1.0, None, None, None), tiny_pair, settings,
                            None) is None


# --- the window -----------------------------------------------------------------------------------------------------

def test_dashboard_shows_the_seeded_runs(make_dashboard, store):
    seed_runs(store)
    window = make_dashboard()
    assert window.content.currentWidget() is not window.empty_state
    assert [card(window, k) for k in ("runs", "tokens", "speedup", "tokens_per_s", "alpha", "tau")] == [
        "5", "404", "1.56×", "29.7", "0.66", "2.02"]
    assert window.cards["runs"].detail.text() == "2 chat · 2 race · 1 bench"

    timeline = window.timeline
    assert {d: s.count() for d, s in timeline.speedup_series.items()} == {"none": 0, "pld": 2, "model": 1,
                                                                          "hybrid": 1}
    assert {d: s.count() for d, s in timeline.speed_series.items()} == {"none": 1, "pld": 2, "model": 1,
                                                                        "hybrid": 1}
    assert timeline.speedup_series["pld"].at(1).y() == 1.5

    acceptance = window.acceptance.bar_values()
    # one target model: the charts name the groups by drafter; plain decoding proposes nothing, so has no bars
    assert list(acceptance) == ["prompt lookup", "draft model", "hybrid"]
    assert acceptance["prompt lookup"] == pytest.approx([24 / 30, 20 / 30, 15 / 30, 11 / 30])
    lengths = window.lengths.bar_values()
    assert lengths["prompt lookup"] == pytest.approx([100 * x for x in (6 / 30, 4 / 30, 5 / 30, 4 / 30, 11 / 30)])
    bars = window.groups_chart.speedup_set
    assert [bars.at(i) for i in range(bars.count())] == [0.0, 1.375, 1.5, 2.0]  # plain, pld, model, hybrid
    assert window.groups_chart.x_axis.categories() == ["plain", "prompt lookup", "draft model", "hybrid"]
    assert [label.text() for label, _ in window.groups_chart.value_labels] == ["1.38×", "1.50×", "2.00×"]

    table = window.group_table
    assert table.rowCount() == 4
    rows = {table.item(r, 0).text(): [table.item(r, c).text() for c in range(1, 7)] for r in range(4)}
    assert rows["tiny · prompt lookup"] == ["2", "160", "26.7", "1.38×", "0.58", "2.00"]
    assert rows["tiny · plain decoding"][3:5] == ["–", "–"]


def test_runs_that_drafted_too_little_are_left_out_of_the_means(make_dashboard, store):
    """As the chat's footer: a run whose drafts made less than a tenth of it has no ratio, so no mean counts it,
    not even one stored with a ratio (a race lane of prompt lookup that drafted nothing, read "1.15×")."""
    ids = seed_runs(store)
    store.record_run(base_run(source="race", drafter="pld", created_at=NOW - timedelta(hours=1), new_tokens=33,
                              wall_s=0.36, tokens_per_s=92.0, target_passes=33, draft_proposed=4, draft_accepted=0,
                              speedup=1.15, speedup_basis="measured", app_session_id=ids["app_session"]))
    window = make_dashboard()
    assert card(window, "runs") == "6" and card(window, "speedup") == "1.56×"  # the mean of the other four
    assert window.cards["speedup"].detail.text() == "over 4 runs with a baseline"
    assert window.timeline.speedup_series["pld"].count() == 2  # no point for it on the speedup line
    table = window.group_table
    rows = {table.item(r, 0).text(): table.item(r, 4).text() for r in range(table.rowCount())}
    assert rows["tiny · prompt lookup"] == "1.38×"  # (1.25 + 1.5) / 2, not with 1.15
    assert store.app_session_stats(ids["app_session"]).mean_speedup == pytest.approx(1.5625)  # all its sources
    assert store.overall_stats().mean_speedup == pytest.approx(1.5625)  # `specchat stats`


def test_filters_narrow_the_runs(make_dashboard, store):
    seed_runs(store)
    window = make_dashboard()
    choose(window.drafter_combo, "pld")
    assert len(window.runs) == 2 and card(window, "runs") == "2"
    assert list(window.timeline.speedup_series) == ["pld"]
    choose(window.drafter_combo, None)
    choose(window.source_combo, "bench")
    assert [r.drafter for r in window.runs] == ["hybrid"]
    choose(window.source_combo, None)
    choose(window.pair_combo, ("tiny", "tiny-draft"))
    assert {r.drafter for r in window.runs} == {"model", "hybrid"}
    choose(window.pair_combo, None)

    today = QDate.currentDate()
    window.from_date.setDate(today.addDays(-1))  # picking a date switches the period to custom dates
    assert window.range_combo.currentData() == "custom"
    assert len(window.runs) == 3
    window.to_date.setDate(today.addDays(-1))
    assert {r.source for r in window.runs} == {"race"}
    window.from_date.setDate(QDate(2001, 1, 1))
    window.to_date.setDate(QDate(2001, 1, 2))
    assert window.content.currentWidget() is window.empty_state
    assert "No runs match these filters" in window.empty_state.text()
    choose(window.range_combo, 7)
    assert len(window.runs) == 5


def test_grouping_changes_table_and_charts(make_dashboard, store):
    seed_runs(store)
    window = make_dashboard()
    choose(window.group_combo, "conversation")
    assert window.group_table.rowCount() == 1 and window.group_table.item(0, 0).text() == "Sea poems"
    assert list(window.acceptance.bar_values()) == ["Sea poems"]
    choose(window.group_combo, "category")
    assert window.group_table.item(0, 0).text() == "coding · draft model + prompt lookup"
    choose(window.group_combo, "app_session")
    assert window.group_table.rowCount() == 1 and window.group_table.item(0, 1).text() == "5"


def test_main_window_opens_the_dashboard(make_window, store):
    seed_runs(store)
    window = make_window()
    window.open_dashboard()
    assert window.dashboard.isVisible() and len(window.dashboard.runs) == 5
    window.dashboard.close()


def test_empty_database_shows_the_empty_state(make_dashboard):
    window = make_dashboard()
    assert window.content.currentWidget() is window.empty_state
    assert "No runs yet" in window.empty_state.text()
    assert card(window, "runs") == "0" and not window.csv_button.isEnabled()


def test_refreshes_when_runs_are_stored(make_dashboard, store):
    seed_runs(store)
    window = make_dashboard()
    store.record_run(base_run(drafter="pld", new_tokens=10, wall_s=1.0, tokens_per_s=10.0, target_passes=5))
    window.session.stats_changed.emit()
    assert len(window.runs) == 6 and card(window, "runs") == "6"


# --- exports --------------------------------------------------------------------------------------------------------

def test_export_csv_parses_back(make_dashboard, store, tmp_path):
    seed_runs(store)
    window = make_dashboard()
    path = tmp_path / "runs.csv"
    assert window.export_csv(path)
    with open(path, newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 5
    assert [r["drafter"] for r in rows] == ["pld", "model", "none", "pld", "hybrid"]
    assert rows[0]["accepted_by_position"] == "15;12;8;5" and float(rows[0]["alpha"]) == 0.5
    assert rows[2]["speedup"] == "" and rows[2]["draft"] == "" and rows[4]["category"] == "coding"
    assert datetime.fromisoformat(rows[0]["created_at"]).tzinfo is not None
    assert "Exported 5 runs" in window.message.text()


def test_export_json_parses_back(make_dashboard, store, tmp_path):
    seed_runs(store)
    window = make_dashboard()
    choose(window.drafter_combo, "pld")
    path = tmp_path / "stats.json"
    assert window.export_json(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(data) >= {"filters", "summary", "groups", "runs"}
    assert data["filters"]["drafter"] == "pld" and data["filters"]["group_by"] == "pair"
    assert data["summary"]["runs"] == 2 and data["summary"]["new_tokens"] == 160
    assert len(data["runs"]) == 2 and data["runs"][0]["accepted_by_position"] == [15, 12, 8, 5]
    datetime.fromisoformat(data["runs"][0]["created_at"])
    group = data["groups"][0]
    assert group["label"] == "tiny · pld" and group["accepted_length_distribution"] == pytest.approx(
        [6 / 30, 4 / 30, 5 / 30, 4 / 30, 11 / 30])


def test_export_errors_are_reported_not_raised(make_dashboard, store, tmp_path):
    seed_runs(store)
    window = make_dashboard()
    assert not window.export_csv(tmp_path)  # a folder, not a file
    assert "Could not write" in window.message.text()
    assert not window.export_json(tmp_path / "missing" / "stats.json")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert window.save_charts(blocker / "charts") == []
    assert "Could not create" in window.message.text()


def test_save_charts_writes_pngs(make_dashboard, store, tmp_path):
    seed_runs(store)
    window = make_dashboard()
    paths = window.save_charts(tmp_path / "charts")
    assert len(paths) == 4
    for path in paths:
        image = QImage(str(path))
        assert not image.isNull() and image.width() > 300


# --- the benchmark ------------------------------------------------------------------------------------------------

def write_prompts(tmp_path, records) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    return str(path)


TWO_PROMPTS = [{"question_id": 1, "category": "rewriting", "turns": ["The quick brown fox"]},
               {"question_id": 2, "category": "chat", "turns": ["Speculative decoding"]}]


def test_benchmark_runs_in_the_background_and_stores_runs(qtbot, make_dashboard, store, tmp_path, tiny_pair):
    window = make_dashboard()
    progress = []
    window._bench_progress.progress.connect(lambda done, total, what: progress.append((done, total, what)))
    with qtbot.waitSignal(window.benchmark_finished, timeout=BENCH_TIMEOUT):
        assert window.start_benchmark(write_prompts(tmp_path, TWO_PROMPTS), limit=0, max_new_tokens=8)
        assert window.benchmark_running() and window.session.device_busy()
        assert window.bench_panel.isVisible()
    runs = store.runs(RunFilter(source="bench"))
    assert len(runs) == 4
    assert sorted((r.category, r.drafter) for r in runs) == [("chat", "model"), ("chat", "none"),
                                                             ("rewriting", "model"), ("rewriting", "none")]
    model = next(r for r in runs if r.drafter == "model")
    assert model.draft == tiny_pair.draft.name and model.speedup is not None and model.speedup_basis == "measured"
    assert model.new_tokens == 8 and model.draft_proposed > 0 and model.proposed_by_position
    plain = next(r for r in runs if r.drafter == "none")
    assert plain.draft is None and plain.speedup is None
    assert progress and progress[-1][:2] == (4, 4)
    assert "2 prompts × 2 modes stored" in window.message.text()
    assert not window.session.device_busy() and not window.bench_panel.isVisible()
    assert len(window.runs) == 4  # the dashboard refreshed


def test_cancelled_benchmark_stores_nothing_and_frees_the_device(qtbot, make_dashboard, store, tmp_path):
    window = make_dashboard()
    with qtbot.waitSignal(window.benchmark_finished, timeout=BENCH_TIMEOUT):
        window.start_benchmark(write_prompts(tmp_path, TWO_PROMPTS), limit=0, max_new_tokens=8)
        window.cancel_benchmark()  # before the first prompt: the runner stops after its warm-up
    assert store.runs(RunFilter(source="bench")) == []
    assert "nothing stored" in window.message.text()
    assert not window.session.device_busy() and not window.benchmark_running()


def test_cancel_mid_run_keeps_the_whole_prompts(qtbot, make_dashboard, store, tmp_path):
    window = make_dashboard()

    def cancel_after_the_first_prompt(done, total, what):  # on the worker thread, so exactly after prompt 1
        if done == 2:
            window._benchmark.cancel.set()

    window._bench_progress.progress.connect(cancel_after_the_first_prompt, Qt.ConnectionType.DirectConnection)
    with qtbot.waitSignal(window.benchmark_finished, timeout=BENCH_TIMEOUT):
        window.start_benchmark(write_prompts(tmp_path, TWO_PROMPTS), limit=0, max_new_tokens=8)
    runs = store.runs(RunFilter(source="bench"))
    assert sorted((r.category, r.drafter) for r in runs) == [("rewriting", "model"), ("rewriting", "none")]
    assert "Benchmark cancelled: 1 prompt × 2 modes stored" in window.message.text()


def test_closing_cancels_the_benchmark_without_blocking_the_app(qtbot, make_dashboard, store, tmp_path):
    window = make_dashboard()
    window.start_benchmark(write_prompts(tmp_path, TWO_PROMPTS), limit=0, max_new_tokens=8)
    waited = []
    window._benchmark.worker.wait = lambda *args: waited.append(args) or True  # the GUI thread must not wait
    with qtbot.waitSignal(window.benchmark_finished, timeout=BENCH_TIMEOUT):
        window.close()
        assert waited == [] and window._benchmark.cancel.is_set()
    assert not window.benchmark_running() and not window.session.device_busy()


def test_bad_prompt_file_gives_a_clear_message(make_dashboard, store, tmp_path):
    window = make_dashboard()
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question_id": 1, "category": "chat", "turns": ["hi"]}\nnot json\n', encoding="utf-8")
    assert not window.start_benchmark(str(path))
    assert "bad.jsonl, line 2: not valid JSON" in window.message.text()
    assert not window.start_benchmark(str(tmp_path / "missing.jsonl"))
    assert "cannot read" in window.message.text()
    assert not window.benchmark_running() and not window.session.device_busy()


def test_benchmark_refused_while_the_models_are_busy(make_dashboard, tmp_path):
    window = make_dashboard()
    window.session.claim_device("chat")
    assert not window.start_benchmark(write_prompts(tmp_path, TWO_PROMPTS))
    assert "busy" in window.message.text() and not window.benchmark_running()
    window.session.release_device("chat")
