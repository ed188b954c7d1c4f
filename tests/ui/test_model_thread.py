"""One long-lived model thread runs every piece of model work, one job at a time, in submission order."""

import json
import threading
import time

import pytest
from PySide6.QtCore import QThread

from specchat.chats import ReplyJob
from specchat.core.errors import SpecchatError
from specchat.engine.chat_prompt import Message
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.ui.reply_workers import GenerationWorker, RaceWorker
from specchat.ui.workers import NOT_RUN_MESSAGE, FunctionWorker, JobThread, ModelJob

TIMEOUT = 120000  # generous: a loaded CI machine is slow, and a hang still fails


@pytest.fixture
def job_thread():
    thread = JobThread("test-jobs")
    yield thread
    assert thread.stop()


def blocker(started: threading.Event, release: threading.Event, cancel: threading.Event | None = None):
    """A job that runs until `release` (or its cancel) is set, and says when it has started."""
    def work():
        started.set()
        while not release.is_set() and not (cancel is not None and cancel.is_set()):
            time.sleep(0.005)
        return "released"
    return FunctionWorker(work, cancel)


def test_every_kind_of_model_work_runs_on_the_one_model_thread(qtbot, store, model_folders, tmp_path, monkeypatch):
    """Loading with its calibration, a reply, a race and a benchmark, and the engines they build: one thread."""
    import specchat.ui.session as session_module
    from specchat.engine.loading.pair import ModelPair
    from specchat.ui.main_window import MainWindow
    from specchat.ui.session import ChatSession
    from specchat.ui.settings import AppSettings

    jobs, work = [], []
    execute, load_pair, engine = ModelJob.execute, session_module.load_pair, ModelPair.engine

    def recording_execute(job):
        jobs.append((type(job).__name__, threading.get_ident(), QThread.currentThread()))
        execute(job)

    def recording(name, function):
        def call(*args, **kwargs):
            work.append((name, threading.get_ident()))
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(ModelJob, "execute", recording_execute)
    monkeypatch.setattr(session_module, "load_pair", recording("load", load_pair))
    monkeypatch.setattr(ModelPair, "engine", recording("engine", engine))
    session = ChatSession(store, AppSettings(target=str(model_folders / "target"), drafter="pld", max_new_tokens=8,
                                             k=4, adaptive_k=False))
    window = MainWindow(session)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: session.ready, timeout=TIMEOUT)

    window.composer.setPlainText("The quick brown fox")
    with qtbot.waitSignal(window.reply_finished, timeout=TIMEOUT):
        window.send()
    window.open_race()
    race = window.race_window
    race.max_tokens.setValue(8)
    for drafter, box in race.drafter_boxes.items():
        box.setChecked(drafter == "pld")
    with qtbot.waitSignal(race.race_finished, timeout=TIMEOUT):
        race.start_race()
    window.open_dashboard()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "chat", "turns": ["Speculative decoding"]}),
                       encoding="utf-8")
    with qtbot.waitSignal(window.dashboard.benchmark_finished, timeout=TIMEOUT):
        assert window.dashboard.start_benchmark(str(prompts), limit=0, max_new_tokens=8)

    assert store.list_comparisons() and "stored" in window.dashboard.message.text()
    # the context meter counts tokens on the background thread when its debounce fires, which may be before the
    # reply or not: tokenizer work, not model work (the model thread never waits for it)
    background = session.background.thread_object()
    seen = [(name, "background" if thread is background else "model" if thread is session.model_thread.thread_object()
             else "other") for name, _, thread in jobs]
    jobs = [job for job in jobs if job[2] is not background]
    # loading, the past-replies index, the calibration and warm-up after ready, a reply, a race, a benchmark
    assert [name for name, _, _ in jobs] == ["FunctionWorker", "FunctionWorker", "FunctionWorker", "GenerationWorker",
                                          "RaceWorker", "FunctionWorker"], seen
    assert {name for name, _ in work} == {"load", "engine"}
    model_thread = session.model_thread.thread_object()
    assert all(thread is model_thread for _, _, thread in jobs)
    idents = {ident for _, ident, _ in jobs} | {ident for _, ident in work}
    assert len(idents) == 1 and threading.main_thread().ident not in idents
    window.close()
    assert not session.model_thread.is_running() and model_thread.isFinished()


def test_jobs_run_one_at_a_time_in_submission_order(qtbot, job_thread):
    events, reported = [], []

    def job(number):
        def work():
            events.append(("start", number))
            time.sleep(0.02)
            events.append(("end", number))
            return number
        return work

    workers = [FunctionWorker(job(number)) for number in range(4)]
    for worker in workers:
        worker.returned.connect(reported.append)
    with qtbot.waitSignal(workers[-1].returned, timeout=TIMEOUT):
        for worker in workers:
            job_thread.submit(worker)
    assert events == [(edge, number) for number in range(4) for edge in ("start", "end")]
    assert reported == [0, 1, 2, 3]  # reported on the GUI thread, in order
    qtbot.waitUntil(lambda: job_thread.jobs() == [], timeout=TIMEOUT)


def test_a_job_cancelled_while_it_waits_reports_that_it_did_not_run(qtbot, job_thread):
    started, release = threading.Event(), threading.Event()
    job_thread.submit(blocker(started, release))
    assert started.wait(TIMEOUT / 1000)

    def never(*_):
        raise AssertionError("a cancelled job must not start its work")

    chat = [Message("user", "hi")]
    job = ReplyJob(never, tuple(chat), None, GenerationConfig(max_new_tokens=8), None, prompt_tokens=3)
    reply = GenerationWorker(job, threading.Event())
    race = RaceWorker(None, chat, ["pld"], GenerationConfig(max_new_tokens=8), threading.Event())
    call = FunctionWorker(never, threading.Event())
    results, race_ends, failures = [], [], []
    reply.returned.connect(results.append)
    race.returned.connect(lambda _: race_ends.append(True))
    race.yielded.connect(never)
    call.errored.connect(failures.append)
    for job in (reply, race, call):
        job_thread.submit(job)
        job.cancel.set()
    with qtbot.waitSignal(call.errored, timeout=TIMEOUT):
        release.set()
    assert [r.finish_reason for r in results] == ["cancelled"] and results[0].token_ids == ()
    assert results[0].stats.prompt_tokens == 3 and race_ends == [True] and failures == [NOT_RUN_MESSAGE]


def test_a_reply_stopped_before_it_started_is_kept_as_stopped(qtbot, make_window, store):
    window = make_window()
    started, release = threading.Event(), threading.Event()
    window.session.model_thread.submit(blocker(started, release))  # the model thread is busy with other work
    assert started.wait(TIMEOUT / 1000)
    window.composer.setPlainText("The quick brown fox")
    window.send()
    window.stop()
    with qtbot.waitSignal(window.reply_finished, timeout=TIMEOUT):
        release.set()
    reply = store.messages(window.conversation_id)[-1]
    assert reply.role == "assistant" and reply.text == "" and reply.stopped and reply.finish_reason == "cancelled"
    assert store.conversation_stats(window.conversation_id).runs == 0  # nothing was measured
    assert window.active is None and not window.session.device_busy()


def test_closing_with_a_running_job_returns_promptly_and_ends_the_thread(qtbot, make_window, store):
    window = make_window()
    session = window.session
    started, cancel = threading.Event(), threading.Event()
    session.model_thread.submit(blocker(started, threading.Event(), cancel))  # runs until cancelled
    assert started.wait(TIMEOUT / 1000)
    window.composer.setPlainText("The quick brown fox")
    window.send()  # waits behind the running job
    conversation = window.conversation_id
    thread = session.model_thread.thread_object()
    began = time.perf_counter()
    window.close()
    assert time.perf_counter() - began < 5
    assert cancel.is_set() and thread.isFinished() and not session.model_thread.is_running()
    assert JobThread.running() == []
    qtbot.waitUntil(lambda: store.messages(conversation)[-1].finish_reason == "cancelled", timeout=TIMEOUT)
    with pytest.raises(RuntimeError, match="stopped"):  # no work is started after shutdown
        session.model_thread.submit(FunctionWorker(lambda: None))


def test_a_stop_that_times_out_keeps_the_thread_until_it_ends(qtbot, job_thread):
    started, release = threading.Event(), threading.Event()
    job_thread.submit(blocker(started, release))  # ignores cancellation
    assert started.wait(TIMEOUT / 1000)
    assert not job_thread.stop(timeout_ms=50)
    assert JobThread.running() == [job_thread]  # still referenced: a running QThread must not be destroyed
    release.set()
    assert job_thread.stop() and JobThread.running() == []


def test_a_failing_job_reports_and_the_thread_serves_the_next(qtbot, job_thread):
    idents = []

    def broken():
        idents.append(threading.get_ident())
        raise SpecchatError("The model file is damaged.")

    def fine():
        idents.append(threading.get_ident())
        return 42

    failing, later = FunctionWorker(broken), FunctionWorker(fine)
    with qtbot.waitSignal(failing.errored, timeout=TIMEOUT) as failure:
        job_thread.submit(failing)
    assert failure.args == ["The model file is damaged."]
    with qtbot.waitSignal(later.returned, timeout=TIMEOUT) as result:
        job_thread.submit(later)
    assert result.args == [42]
    assert len(idents) == 2 and idents[0] == idents[1] and job_thread.is_running()


def test_an_unexpected_error_is_described_and_does_not_end_the_thread(qtbot, job_thread, capsys):
    failing, later = FunctionWorker(lambda: 1 / 0), FunctionWorker(lambda: "still here")
    with qtbot.waitSignal(later.returned, timeout=TIMEOUT) as result:
        with qtbot.waitSignal(failing.errored, timeout=TIMEOUT) as failure:
            job_thread.submit(failing)
        job_thread.submit(later)
    assert failure.args[0].startswith("Unexpected error: ZeroDivisionError")
    assert "Traceback" in capsys.readouterr().err  # a bug keeps its traceback
    assert result.args == ["still here"]


def test_a_benchmark_cancelled_while_it_waits_stores_nothing(qtbot, store, tiny_pair, tmp_path, monkeypatch):
    from specchat.bench import BenchRunner
    from specchat.storage.records import RunFilter
    from specchat.ui.dashboard import DashboardWindow
    from specchat.ui.session import ChatSession
    from specchat.ui.settings import AppSettings

    def never(*_args, **_kwargs):
        raise AssertionError("a cancelled benchmark must not start")

    monkeypatch.setattr(BenchRunner, "run", never)
    session = ChatSession(store, AppSettings(drafter="model", k=4, adaptive_k=False), pair=tiny_pair)
    window = DashboardWindow(session)
    qtbot.addWidget(window)
    window.show()
    started, release = threading.Event(), threading.Event()
    session.model_thread.submit(blocker(started, release))
    assert started.wait(TIMEOUT / 1000)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "chat", "turns": ["Speculative decoding"]}),
                       encoding="utf-8")
    with qtbot.waitSignal(window.benchmark_finished, timeout=TIMEOUT):
        assert window.start_benchmark(str(prompts), limit=0, max_new_tokens=8)
        window.cancel_benchmark()
        release.set()
    assert "nothing stored" in window.message.text() and store.runs(RunFilter(source="bench")) == []
    assert not window.benchmark_running() and not session.device_busy()
    window.close()


def test_closing_during_a_long_prefill_stops_it_between_chunks(qtbot, make_window, store, monkeypatch):
    """A prompt that takes ten seconds to read (chunks slowed to 0.2 s): closing stops it at the next chunk."""
    from specchat.engine.backends.torch import runners

    monkeypatch.setattr(runners, "PREFILL_CHUNK", 8)
    original_init = runners.TorchRunner.__init__
    reading = threading.Event()

    def slow_prefill(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        forward = self._prefill_forward

        def slowly(*a, **k):
            reading.set()
            time.sleep(0.2)
            return forward(*a, **k)
        self._prefill_forward = slowly

    monkeypatch.setattr(runners.TorchRunner, "__init__", slow_prefill)
    window = make_window()
    window.session.engines.clear()  # built anew, with the slowed runner
    window.composer.setPlainText("The quick brown fox jumps over the lazy dog. " * 9)  # ~400 tokens: 50 chunks
    window.send()
    conversation = window.conversation_id
    assert reading.wait(TIMEOUT / 1000)
    began = time.perf_counter()
    window.close()
    assert time.perf_counter() - began < 3  # not the ten seconds of the prefill
    assert JobThread.running() == []
    qtbot.waitUntil(lambda: store.messages(conversation)[-1].finish_reason == "cancelled", timeout=TIMEOUT)
    reply = store.messages(conversation)[-1]
    assert reply.text == "" and reply.stopped and store.conversation_stats(conversation).runs == 0


def test_every_job_has_the_same_signals_in_the_same_order(qtbot, job_thread):
    """napari's contract: started, what it yields, then returned or errored, and finished last whatever happened."""
    from specchat.ui.workers import GeneratorWorker

    def counting():
        yield 1
        yield 2
        return "done"

    def breaking():
        yield 1
        raise SpecchatError("The model file is damaged.")

    heard = {}
    jobs = {"generator": GeneratorWorker(counting), "broken": GeneratorWorker(breaking),
            "function": FunctionWorker(lambda: 7)}
    for name, job in jobs.items():
        heard[name] = []
        job.started.connect(lambda name=name: heard[name].append("started"))
        job.yielded.connect(lambda value, name=name: heard[name].append(("yielded", value)))
        job.returned.connect(lambda value, name=name: heard[name].append(("returned", value)))
        job.errored.connect(lambda message, name=name: heard[name].append(("errored", message)))
        job.finished.connect(lambda name=name: heard[name].append("finished"))
    with qtbot.waitSignal(jobs["function"].finished, timeout=TIMEOUT):
        for job in jobs.values():
            job_thread.submit(job)
    assert heard == {
        "generator": ["started", ("yielded", 1), ("yielded", 2), ("returned", "done"), "finished"],
        "broken": ["started", ("yielded", 1), ("errored", "The model file is damaged."), "finished"],
        "function": ["started", ("returned", 7), "finished"],
    }
