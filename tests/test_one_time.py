"""One-time measurements in the background (core/one_time.py): never beside a reply, stopped at the next pass when
one starts and tried again later, and stopped before the model's memory goes."""

import threading
import time

import pytest

from specchat.core import one_time
from specchat.core.one_time import OneTimeWork


@pytest.fixture
def background(monkeypatch):
    monkeypatch.setenv(one_time.MEASURE_NOW_ENV, "0")
    monkeypatch.setattr(one_time, "IDLE_S", 0.05)


def wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_a_measurement_waits_until_no_reply_runs_then_runs_once(background):
    work, ran = OneTimeWork(), []
    with work.reply():
        work.owe("curve", lambda check: ran.append(time.monotonic()))
        time.sleep(0.2)
        assert ran == [] and work.owes("curve")  # never beside a reply
        ended = time.monotonic()
    assert wait_for(lambda: ran) and ran[0] - ended >= one_time.IDLE_S * 0.9
    assert not work.owes("curve")
    work.owe("curve", lambda check: ran.append(0.0))  # owed again later: measured again (a new key)
    assert wait_for(lambda: len(ran) == 2)


def test_a_reply_interrupts_a_measurement_at_its_next_pass_and_it_is_tried_again(background):
    work, passes, started, finished = OneTimeWork(), [], threading.Event(), []

    def measure(check):
        started.set()
        for i in range(40):
            check()
            passes.append(i)
            time.sleep(0.01)
        finished.append(True)

    work.owe("verdict", measure)
    assert started.wait(5)
    with work.reply():
        time.sleep(0.05)  # the measurement stops at its next check
        during = len(passes)
        time.sleep(0.1)
        assert len(passes) == during and not finished  # nothing measured while the reply ran
    assert wait_for(lambda: finished)  # tried again from the start once idle
    assert passes[-40:] == list(range(40))


def test_stop_waits_for_a_running_measurement_and_drops_what_is_owed(background):
    work, started, after_stop = OneTimeWork(), threading.Event(), []

    def measure(check):
        started.set()
        while True:
            check()
            after_stop.append(1)
            time.sleep(0.01)

    work.owe("curve", measure)
    assert started.wait(5)
    work.stop()  # returns only once the measurement has stopped
    count = len(after_stop)
    time.sleep(0.05)
    assert len(after_stop) == count and not work.owes("curve")
    work.owe("curve", measure)  # a stopped model owes nothing more
    assert not work.owes("curve")


def test_measure_now_runs_it_in_the_callers_thread(monkeypatch):
    monkeypatch.setenv(one_time.MEASURE_NOW_ENV, "1")
    work, threads = OneTimeWork(), []
    work.owe("curve", lambda check: threads.append(threading.current_thread()))
    assert threads == [threading.current_thread()] and not work.owes("curve")


def test_stopping_at_exit_frees_a_model_held_only_by_what_it_owes(background, monkeypatch):
    """At exit, a model that only its owed measurement still holds is freed while its work stops, and freeing it
    (LlamaCppModel.__del__) stops the same work again: that must return, not wait on the lock the first stop holds
    (it hung `specchat generate` after its reply)."""
    monkeypatch.setattr(one_time, "IDLE_S", 1e9)  # still owed when the process exits
    stopped = []

    class Model:
        def __init__(self):
            self.one_time = OneTimeWork()
            self.one_time.owe("cost curve", self.measure)

        def measure(self, check):
            pass

        def __del__(self):
            self.one_time.stop()
            stopped.append(True)

    Model()  # nothing but its owed measurement refers to it now
    exiting = threading.Thread(target=one_time._stop_all, daemon=True)
    exiting.start()
    exiting.join(10)
    assert not exiting.is_alive() and stopped == [True]


def test_a_task_owed_anew_while_its_name_runs_replaces_it_and_runs_next(background):
    """A reading ahead (state_shelf.owe_read_ahead) is owed again after every reply: the newest replaces one still
    owed, and one owed while the older runs is not dropped when the older ends."""
    work, ran, running, release = OneTimeWork(), [], threading.Event(), threading.Event()

    def older(check) -> None:
        running.set()
        release.wait(5)
        ran.append("older")

    with work.reply():  # nothing starts meanwhile, however slow this machine is
        work.owe("read ahead", lambda check: ran.append("oldest"))
        work.owe("read ahead", older, replace=True)  # replaces the oldest, not yet run
    assert running.wait(5)
    work.owe("read ahead", lambda check: ran.append("newest"), replace=True)
    release.set()
    assert wait_for(lambda: ran == ["older", "newest"]) and not work.owed()
    with work.reply():  # nothing runs beside a reply, so it is still owed when dropped
        work.owe("read ahead", lambda check: ran.append("dropped"))
        work.drop("read ahead")
    time.sleep(0.2)
    assert ran == ["older", "newest"]
    work.stop()


def test_a_one_shot_command_measures_what_is_owed_and_makes_nothing_for_a_next_turn(capsys, monkeypatch):
    """`specchat generate` said "Measuring what a verification pass costs…" on every run once the room ahead and
    the kept states' preload were owed too, and made both before it exited: only a next turn uses them. It now
    drops them, measures what is still owed, and says so only then."""
    from types import SimpleNamespace

    from specchat.commands.generate import settle_before_exit
    from specchat.core.one_time import OneTimeWork
    from specchat.engine.backends.llamacpp import llama_runner, state_shelf

    from specchat.core import one_time

    monkeypatch.setenv("SPECCHAT_MEASURE_NOW", "0")
    monkeypatch.setattr(one_time, "IDLE_S", 30.0)  # the worker waits out the idle spell: the command drops first
    ran = []
    for owed in (["cost curve"], []):
        work = OneTimeWork()
        native = SimpleNamespace(one_time=work, settle=work.settle)
        native.forget_next_turn = lambda native=native: llama_runner.LlamaCppModel.forget_next_turn(native)
        with work.reply():  # held while the reply runs, as in the command
            for name in (state_shelf.READ_AHEAD, state_shelf.PRELOAD, f"{llama_runner.ROOM} False",
                         f"{llama_runner.ROOM} True", *owed):
                work.owe(name, lambda check, name=name: ran.append(name))
        settle_before_exit(SimpleNamespace(target=SimpleNamespace(native=native, name="tiny")))
        work.stop()
        said = capsys.readouterr().err
        assert ("Measuring what a verification pass costs" in said) == bool(owed)
    assert ran == ["cost curve"]
