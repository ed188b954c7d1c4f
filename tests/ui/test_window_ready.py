"""Issue 44, ready at once: the chat is ready as soon as the target is loaded. The calibration runs after ready (none
when one is stored), a torch target's warm-up too and a llama.cpp target's never; a draft model that the chosen
drafter does not use is loaded by the first race lane that drafts with it, and one that cannot draft says so there."""

import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest

import specchat.ui.session as session_module
from specchat.core.errors import IncompatibleDraftError
from specchat.engine.loading.load import LoadedModel
from specchat.engine.loading.pair import ModelPair
from specchat.models.sources import ModelSource
from specchat.ui.session import ChatSession
from specchat.ui.settings import AppSettings
from specchat.ui.workers import FunctionWorker

TIMEOUT = 120000  # generous: a loaded CI machine is slow, and a hang still fails


@pytest.fixture
def target_settings(model_folders):
    """The tiny target's folder, chatting with prompt lookup (no draft model needed)."""
    return AppSettings(target=str(model_folders / "target"), drafter="pld", max_new_tokens=8, k=4, adaptive_k=False,
                       draft_from_history=False)


@pytest.fixture
def incompatible_draft(tmp_path, unrelated_draft):
    """A tiny draft whose tokenizer ends its text with another token than the target's: it cannot draft."""
    from tiny_models import build_byte_tokenizer

    other = build_byte_tokenizer()
    other.eos_token = "<|endoftext|>"
    other.save_pretrained(tmp_path / "bad-draft")
    unrelated_draft.save_pretrained(tmp_path / "bad-draft")
    return tmp_path / "bad-draft"


def default_draft(monkeypatch, folder) -> ModelSource:
    """The session's default draft for any target: `folder` (as the shipped draft is for the embedded model)."""
    source = ModelSource.parse(str(folder))
    monkeypatch.setattr(session_module, "default_draft_for", lambda target: source)
    return source


def loaded(qtbot, store, settings) -> ChatSession:
    session = ChatSession(store, settings)
    qtbot.waitUntil(lambda: not session.loading, timeout=TIMEOUT)
    assert session.ready, session.error
    return session


def after_the_queued_jobs(qtbot, session) -> None:
    """Waits until every model job queued so far has run (the model thread runs them in order)."""
    done = []
    worker = FunctionWorker(lambda: None)
    worker.returned.connect(done.append)
    session.model_thread.submit(worker)
    qtbot.waitUntil(lambda: bool(done), timeout=TIMEOUT)


def test_the_chat_is_ready_before_the_calibration_ends_which_is_then_kept(qtbot, store, target_settings, monkeypatch):
    started, release = threading.Event(), threading.Event()

    def calibrate(engines, cancel=None):
        started.set()
        release.wait(60)
        return 42.0

    monkeypatch.setattr(ChatSession, "_calibrate", staticmethod(calibrate))
    session = loaded(qtbot, store, target_settings)
    assert session.plain_tokens_per_s is None and not release.is_set()  # ready, the calibration still to come
    assert started.wait(60)
    release.set()
    qtbot.waitUntil(lambda: session.plain_tokens_per_s == 42.0, timeout=TIMEOUT)
    target = session.pair.target
    assert store.latest_calibration(target.name, target.place, str(target.dtype)) == 42.0
    session.shutdown()


def test_a_stored_calibration_is_the_baseline_at_the_next_launch(qtbot, store, target_settings, monkeypatch):
    first = loaded(qtbot, store, target_settings)
    qtbot.waitUntil(lambda: first.plain_tokens_per_s is not None, timeout=TIMEOUT)  # measured after ready
    measured = first.plain_tokens_per_s
    first.shutdown()

    calibrations, warm_ups = [], []
    monkeypatch.setattr(ChatSession, "_calibrate", staticmethod(lambda *args: calibrations.append(args) or 1.0))
    monkeypatch.setattr(ChatSession, "_warm_up", staticmethod(lambda *args: warm_ups.append(args)))
    second = loaded(qtbot, store, target_settings)
    assert second.plain_tokens_per_s == measured  # the stored baseline, as soon as ready
    after_the_queued_jobs(qtbot, second)
    assert not calibrations and len(warm_ups) == 1  # a torch target is still warmed up, after ready
    second.shutdown()


def test_the_baseline_plain_replies_refreshed_is_kept_for_the_next_launch(qtbot, store, target_settings):
    """A stored calibration is the next launch's baseline at once, so what this launch's plain replies measured since
    (RunBook.complete refreshes the baseline) is kept at shutdown: a calibration taken on a busy machine does not
    outlive them."""
    first = loaded(qtbot, store, target_settings)
    qtbot.waitUntil(lambda: first.plain_tokens_per_s is not None, timeout=TIMEOUT)
    first.plain_tokens_per_s = 123.0  # as plain replies would have refreshed it
    first.shutdown()
    second = loaded(qtbot, store, target_settings)
    assert second.plain_tokens_per_s == 123.0
    second.shutdown()


def test_a_llama_cpp_target_is_not_warmed_up(qtbot, store, tiny_pair, monkeypatch):
    """Its cost curve is measured in the background while it is idle (core/one_time.py): after ready only the
    calibration runs, and nothing at all when one is stored."""
    native = SimpleNamespace(threads=2, placement=SimpleNamespace(offloaded=False, describe=lambda: "CPU"),
                             kernels=SimpleNamespace(exactness="bit-identical"))
    target = replace(tiny_pair.target, native=native)
    calibrations, warm_ups, submitted = [], [], []
    monkeypatch.setattr(ChatSession, "_calibrate", staticmethod(lambda *args: calibrations.append(args) or 30.0))
    monkeypatch.setattr(ChatSession, "_warm_up", staticmethod(lambda *args: warm_ups.append(args)))
    session = ChatSession(store, AppSettings(drafter="pld", draft_from_history=False), load_models=False)
    submit = session.model_thread.submit
    monkeypatch.setattr(session.model_thread, "submit", lambda job: submitted.append(job) or submit(job))
    session.pair = ModelPair(target)
    session._settle(session._load_generation)
    after_the_queued_jobs(qtbot, session)
    assert len(calibrations) == 1 and not warm_ups and session.plain_tokens_per_s == 30.0
    name, place, kernels = session._calibration_key()
    assert store.latest_calibration(name, place, kernels) == 30.0 and "2 threads" in kernels

    submitted.clear()
    session.pair = ModelPair(target)  # loaded again (the next launch): the stored baseline, no job
    session._on_loaded(session.pair, session._load_generation)
    assert session.ready and session.plain_tokens_per_s == 30.0 and not submitted
    session.shutdown()


def test_a_race_lane_of_the_draft_model_loads_the_draft_left_for_later(qtbot, store, target_settings, model_folders,
                                                                     monkeypatch):
    from specchat.ui.race import RaceWindow

    draft = default_draft(monkeypatch, model_folders / "draft")
    session = loaded(qtbot, store, target_settings)
    assert session.pair.draft is None and session.pair.draft_source == draft  # the chat did not wait for it
    window = RaceWindow(session)
    qtbot.addWidget(window)
    window.max_tokens.setValue(16)
    window.repeat_s, window.max_runs = 0.0, 1
    assert window.drafter_boxes["model"].isEnabled() and draft.describe() in window.settings_label.text()
    window.prompt.setPlainText("The quick brown fox")
    for drafter, box in window.drafter_boxes.items():
        box.setChecked(drafter in ("pld", "model"))
    with qtbot.waitSignal(window.race_finished, timeout=TIMEOUT):
        window.start_race()
    assert session.pair.draft is not None and session.pair.draft.name == draft.describe()
    assert [t.drafter for t in window.tracks] == ["none", "pld", "model"]
    assert all(t.finish_reason is not None and t.token_ids for t in window.tracks)
    assert window.tracks[2].stats["draft_proposed"] > 0  # the draft model drafted
    saved = store.list_comparisons()
    assert len(saved) == 1 and saved[0].draft == draft.describe()
    assert [r.draft for r in store.runs() if r.source == "race"] == [None, None, draft.describe()]
    window.close()
    session.shutdown()


def test_an_incompatible_draft_left_for_later_says_why_where_it_is_asked_for(qtbot, store, target_settings,
                                                                            incompatible_draft, monkeypatch):
    from specchat.ui.race import RaceWindow

    default_draft(monkeypatch, incompatible_draft)
    session = loaded(qtbot, store, target_settings)  # not checked at launch: the chat's drafter needs no draft
    window = RaceWindow(session)
    qtbot.addWidget(window)
    window.max_tokens.setValue(8)
    window.prompt.setPlainText("The quick brown fox")
    for drafter, box in window.drafter_boxes.items():
        box.setChecked(drafter in ("pld", "model"))
    with qtbot.waitSignal(window.race_finished, timeout=TIMEOUT):
        window.start_race()
    assert "cannot draft for" in window.verdict.text() and "eos token differs" in window.verdict.text()
    assert not store.list_comparisons()
    with pytest.raises(IncompatibleDraftError, match="cannot draft for"):
        session.pair.check_drafter("model")  # and at once from now on, in the chat too
    assert session.ready and session.pair.draft is None
    window.close()
    session.shutdown()


def test_a_model_drafter_chosen_in_settings_loads_the_draft(qtbot, store, target_settings, model_folders,
                                                           monkeypatch):
    default_draft(monkeypatch, model_folders / "draft")
    session = loaded(qtbot, store, target_settings)
    assert session.pair.draft is None
    session.apply_settings(replace(session.settings, drafter="model", draft=str(model_folders / "draft")))
    qtbot.waitUntil(lambda: session.ready, timeout=TIMEOUT)
    assert isinstance(session.pair.draft, LoadedModel)  # loaded with the target, for the chat's first reply
    assert session.pair.draft_name("model") == ModelSource.parse(str(model_folders / "draft")).describe()
    session.shutdown()


def test_an_incompatible_draft_chosen_in_settings_is_said_at_load(qtbot, store, target_settings, incompatible_draft):
    from specchat.ui.main_window import MainWindow

    session = ChatSession(store, replace(target_settings, drafter="model", draft=str(incompatible_draft)))
    window = MainWindow(session)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: not session.loading, timeout=TIMEOUT)
    assert session.pair is None and window.banner.isVisible()
    assert "could not be loaded" in window.banner.label.text() and "cannot draft for" in window.banner.label.text()
    window.close()
