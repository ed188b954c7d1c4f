"""run_kind.speedup, the one reading of a speedup over plain decoding, and its three users: the chat reply's run
(chats/run_book.py), the race's lanes (engine/race.py) and the benchmark's records (bench/runner.py); and
run_kind.drafted_enough, the one rule for when a ratio is noise, in the footer, the race and the stored runs' means.
No models."""

from types import SimpleNamespace

import pytest

from specchat.core.run_kind import AWAITING_COSTS, RunKind, drafted_enough, plainly, shown_speedup, speedup


def test_speedup_is_the_ratio_to_plain_decoding_where_there_is_one():
    assert speedup(30.0, 20.0) == 1.5 and speedup(30.0, 20.0, "pld") == 1.5 and speedup(20.0, 20.0, "none") == 1.0
    assert speedup(30.0, None) is None and speedup(30.0, 0.0) is None  # no baseline
    assert speedup(0.0, 20.0) is None  # nothing decoded
    assert speedup(30.0, 20.0, "remote") is None and speedup(30.0, 20.0, "remote eagle") is None  # another machine
    assert speedup(30.0, 20.0, RunKind.remote("pld")) is None and speedup(30.0, 20.0, RunKind.ours("pld")) == 1.5


def test_a_ratio_needs_drafts_that_made_a_tenth_of_the_run():
    assert drafted_enough(50, 5) and not drafted_enough(50, 4) and not drafted_enough(0, 0)
    assert not drafted_enough(50, 0)  # plain decoding, or a drafter that drafted nothing
    assert shown_speedup(1.15, 33, 0) is None and shown_speedup(1.3, 30, 12) == 1.3
    assert shown_speedup(None, 30, 12) is None
    assert plainly(0, 0) == "decoded plainly (nothing worth drafting)"
    assert plainly(0, 0, awaiting_costs=True) == AWAITING_COSTS  # a first reply, held back: not "nothing worth it"
    assert AWAITING_COSTS.startswith("decoded plainly (first reply") and plainly(0, 0, False, True) == "decoded plainly"
    assert plainly(7, 1) == "decoded almost plainly (1 drafted token kept)"
    assert plainly(9, 0) == "decoded almost plainly (0 drafted tokens kept)"
    assert (plainly(0, 0, why=False), plainly(9, 0, why=False)) == ("decoded plainly", "decoded almost plainly")


def test_race_lanes_get_it_against_the_plain_lane():
    from specchat.engine.race import Track, lane_results

    lanes = [Track(drafter, stats={"new_tokens": tokens, "wall_s": 1.0, "draft_proposed": 20, "draft_accepted": 10})
             for drafter, tokens in (("none", 10), ("pld", 25), ("remote", 40), ("model", 0))]
    assert [r.speedup for r in lane_results(lanes, greedy=False)] == [None, 2.5, None, None]


def test_a_race_lane_that_drafted_too_little_says_so_and_gets_no_ratio():
    """The issue's lane: prompt lookup on a rewrite drafted nothing (α 0.00, τ 1.00) yet read "1.15×"."""
    from specchat.engine.race import Track, lane_results

    def lane(drafter, tokens_per_s, proposed, accepted):
        return Track(drafter, stats={"new_tokens": 33, "wall_s": 33 / tokens_per_s, "draft_proposed": proposed,
                                     "draft_accepted": accepted, "alpha": 0.0, "tau": 1.0})

    plain, nothing, little, enough = lane_results(
        [lane("none", 80.0, 0, 0), lane("pld", 92.0, 0, 0), lane("model", 92.0, 12, 3), lane("hybrid", 92.0, 20, 9)],
        greedy=True)
    assert (nothing.speedup, nothing.speedup_range, nothing.plainly) == (
        None, None, "decoded plainly (nothing worth drafting)")
    assert little.speedup is None and little.plainly == "decoded almost plainly (3 drafted tokens kept)"
    assert enough.speedup == pytest.approx(1.15) and enough.plainly is None and plain.plainly is None
    first = Track("pld", stats={"new_tokens": 33, "wall_s": 0.4, "draft_proposed": 0, "draft_accepted": 0,
                                "awaiting_costs": True})
    assert lane_results([lane("none", 80.0, 0, 0), first], greedy=True)[1].plainly == AWAITING_COSTS


def test_a_lane_run_several_times_gets_the_median_and_range_of_its_paired_ratios():
    from specchat.engine.race import RUNS_KEY, Track, lane_results

    stats = {"new_tokens": 40, "wall_s": 0.5, "draft_proposed": 30, "draft_accepted": 20}
    plain = Track("none", stats={**stats, "draft_proposed": 0, "draft_accepted": 0, RUNS_KEY: [80, 100, 90, 88, 92]})
    pld = Track("pld", stats={**stats, RUNS_KEY: [96, 130, 99, 121, 92]})
    once = Track("model", stats=dict(stats))  # saved before lanes ran again: one run, its own speed
    results = lane_results([plain, pld, once], greedy=False)
    assert pld.run_speeds == [96, 130, 99, 121, 92] and once.run_speeds == [80.0]
    assert results[1].speedup == pytest.approx(1.2) and results[1].runs == 5  # ratios 1.2, 1.3, 1.1, 1.375, 1.0
    assert results[1].speedup_range == pytest.approx((1.0, 1.375))
    assert results[0].speedup_range == pytest.approx((80 / 90, 100 / 90)) and results[0].runs == 5
    assert results[2].speedup == pytest.approx(1.0) and results[2].speedup_range is None and results[2].runs == 1


def test_the_race_runs_again_only_lanes_with_a_ratio_only_while_short_and_alternated():
    from specchat.engine.race import RaceRunner

    def result(wall_s, accepted):
        return SimpleNamespace(stats=SimpleNamespace(wall_s=wall_s, new_tokens=10, draft_accepted=accepted))

    names = ["none", "pld", "model", "remote"]
    streamed = [result(0.5, 0), result(0.5, 0), result(0.5, 5), result(0.5, 5)]
    ran = []

    def run(engine):
        ran.append(engine)
        return result(0.25, 5)

    reruns = list(RaceRunner(lambda _: None, repeat_s=3.0, max_runs=5).reruns(names, names, streamed, run))
    # pld drafted nothing and the remote lane is another machine's: plain and model run again, 1 s a run: 3 runs
    assert ran == ["model", "none", "none", "model"]
    assert [(lane, r.run, r.runs, r.tokens_per_s) for lane, r in reruns if r.tokens_per_s is not None] == [
        (2, 2, 3, 40.0), (0, 2, 3, 40.0), (0, 3, 3, 40.0), (2, 3, 3, 40.0)]
    assert list(RaceRunner(lambda _: None, repeat_s=1.5).reruns(names, names, streamed, run)) == []  # long
    assert list(RaceRunner(lambda _: None).reruns(names[:2], names, streamed[:2], run)) == []  # no ratio to show


def test_benchmark_records_get_it_against_plain_decoding_of_the_same_prompt():
    from specchat.bench.runner import ModeRecord, _compare_with_plain

    records = {mode: ModeRecord(1, "qa", mode, tokens, 2.0, tokens, None, None, token_ids=ids, text=text)
               for mode, tokens, ids, text in (("none", 10, [1, 2], "ab"), ("pld", 30, [1, 2], "ab"),
                                               ("remote", 40, [-1, -1], "ab"))}
    _compare_with_plain(records)
    assert {m: (r.speedup, r.identical) for m, r in records.items()} == {
        "none": (1.0, True), "pld": (3.0, True), "remote": (None, True)}


class FakeStore:
    def __init__(self):
        self.runs = []

    def record_run(self, run):
        self.runs.append(run)
        return len(self.runs)

    def update_run(self, run_id, run):
        self.runs[run_id - 1] = run


class Model:
    name, device, exactness = "tiny", "cpu", "bit-identical"


class Pair:
    target, draft = Model(), None

    def draft_name(self, drafter):
        return None


@pytest.mark.parametrize("drafter, new_tokens, proposed, expected", [
    ("pld", 30, 25, 2.0), ("remote pld", 30, 25, None), ("pld", 0, 0, None),
    ("pld", 30, 0, None)])  # nothing drafted: decoded plainly, and no ratio is claimed
def test_a_chat_reply_gets_it_against_the_calibrated_decode_speed(drafter, new_tokens, proposed, expected):
    from specchat.chats.run_book import RunBook
    from specchat.chats.run_context import RunContext
    from specchat.engine.decoding.events import GenerationResult, GenerationStats
    from specchat.engine.decoding.speculative import GenerationConfig
    from specchat.storage.records import RunRecord

    book = RunBook(FakeStore(), app_session_id=7)
    book.plain_tokens_per_s = 10.0
    stats = GenerationStats(prompt_tokens=5, new_tokens=new_tokens, target_passes=10, prefill_s=0.5, wall_s=2.0,
                            draft_proposed=proposed, draft_accepted=proposed - 5 if proposed else 0)
    result = GenerationResult("x", (), (), (), "eos", stats, seed=1)
    book.complete(3, 4, result, RunContext.of_pair(Pair(), drafter, GenerationConfig(k=4, adaptive_k=True)))
    [run] = book.store.runs
    assert run == RunRecord(  # the fields the run was always stored with
        **RunRecord.figures(stats.to_dict()), app_session_id=7, target="tiny", draft=None, drafter=drafter, k=4,
        adaptive=True, temperature=0.0, top_p=1.0, top_k=0, seed=1, device="cpu", exactness="bit-identical",
        message_id=4, conversation_id=3, speedup=expected, speedup_basis="calibrated" if expected else None,
        baseline_tokens_per_s=10.0, finish_reason="eos")


@pytest.mark.parametrize("prompt_tokens, refreshed", [(40, 0.7 * 10.0 + 0.3 * 20.0), (128, 13.0), (129, 10.0), (2000, 10.0)])
def test_only_a_plain_reply_of_a_short_chat_refreshes_the_calibration(prompt_tokens, refreshed):
    """The calibration is a short chat's plain speed; a plain reply after a long document decodes slower and
    would pull it down (run_book.SHALLOW_PROMPT_TOKENS)."""
    from specchat.chats.run_book import RunBook
    from specchat.chats.run_context import RunContext
    from specchat.engine.decoding.events import GenerationResult, GenerationStats
    from specchat.engine.decoding.speculative import GenerationConfig

    book = RunBook(FakeStore(), app_session_id=7)
    book.plain_tokens_per_s = 10.0
    stats = GenerationStats(prompt_tokens=prompt_tokens, new_tokens=40, target_passes=40, prefill_s=0.5,
                            wall_s=2.5)  # 40 tokens in the 2 s after the prompt: 20 tok/s
    assert stats.decode_tokens_per_s == pytest.approx(20.0)
    result = GenerationResult("x", (), (), (), "eos", stats, seed=1)
    book.complete(3, 4, result, RunContext.of_pair(Pair(), "none", GenerationConfig(k=4, adaptive_k=True)))
    assert book.plain_tokens_per_s == pytest.approx(refreshed)


def own_steps_stats(plain_steps: int):
    """A reply of 1 + plain_steps + 20 tokens: `plain_steps` plain steps (10 ms passes) and 5 steps of K=3 drafts
    all accepted (20 ms passes); 2 ms of drafting and 1 ms of the policy in all, and 1 ms a step of other work."""
    from specchat.engine.decoding.events import GenerationStats

    steps, verify_s = plain_steps + 5, 0.01 * plain_steps + 0.1
    return GenerationStats(
        prompt_tokens=400, new_tokens=1 + plain_steps + 5 * 4, target_passes=1 + steps, prefill_s=0.5,
        wall_s=0.5 + verify_s + 0.002 + 0.001 + 0.001 * steps, draft_s=0.002, policy_s=0.001, verify_s=verify_s,
        draft_proposed=15, draft_accepted=15, steps_by_k=[plain_steps, 0, 0, 5],
        verify_s_by_k=[0.01 * plain_steps, 0.0, 0.0, 0.1], accept_s=0.0005 * steps, detokenize_s=0.0003 * steps)


def test_a_reply_prices_plain_decoding_on_its_own_plain_steps():
    """Its plain steps' mean pass plus what every step pays outside the models: the speed of plain decoding at the
    reply's depth, on decode_tokens_per_s's terms (the first token comes with the prompt)."""
    stats = own_steps_stats(10)
    assert stats.plain_step_s == pytest.approx(0.011)
    assert stats.plain_decode_tokens_per_s == pytest.approx(31 / (30 * 0.011))
    assert own_steps_stats(7).plain_step_s is None  # too few to average


@pytest.mark.parametrize("plain_steps, device, expected, basis", [
    (10, "cpu", 31 / 0.218 / (31 / (30 * 0.011)), "own plain steps"),
    (7, "cpu", 28 / 0.185 / 50.0, "calibrated"),  # too few plain steps: the calibration at load
    (10, "cuda:0", 31 / 0.218 / 50.0, "calibrated")])  # passes only queued in the verify phase: their time is elsewhere
def test_a_chat_reply_gets_it_against_its_own_plain_steps_where_it_has_enough(plain_steps, device, expected, basis):
    """The calibration (50 tok/s here) was measured on a short chat; a reply deep in a chat decodes slower plainly
    and read 0.74-0.85x against it where it ran 0.93-1.17x plain decoding (docs/performance.md)."""
    from specchat.chats.run_book import RunBook, footer_text
    from specchat.chats.run_context import RunContext
    from specchat.engine.decoding.events import GenerationResult
    from specchat.engine.decoding.speculative import GenerationConfig

    class Target(Model):
        pass

    Target.device = device
    pair = Pair()
    pair.target = Target()
    book = RunBook(FakeStore(), app_session_id=7)
    book.plain_tokens_per_s = 50.0
    stats = own_steps_stats(plain_steps)
    result = GenerationResult("x", (), (), (), "eos", stats, seed=1)
    record = book.complete(3, 4, result, RunContext.of_pair(pair, "pld", GenerationConfig(k=4, adaptive_k=True)))
    assert (record.speedup, record.speedup_basis) == (pytest.approx(expected), basis)
    own = stats.plain_decode_tokens_per_s
    assert record.baseline_tokens_per_s == pytest.approx(own if basis == "own plain steps" else 50.0)
    assert f"{expected:.2f}× vs plain ({basis})" in footer_text(record)


def test_other_programs_load_is_read_from_the_kernels_counters(tmp_path):
    from specchat.core.machine_load import CpuReading, machine_busy_ticks, others_share, read_cpu, was_busy

    assert machine_busy_ticks("cpu  100 5 20 900 7 1 2 3 0 0\ncpu0 50 ...\n") == 131  # idle and iowait left out
    assert machine_busy_ticks("intr 1 2 3") is None and machine_busy_ticks("cpu 1 2 x 4 5 6 7 8") is None
    garbage = tmp_path / "stat"
    garbage.write_text("not the kernel's")
    assert read_cpu(garbage) is None and read_cpu(tmp_path / "missing") is None
    start = CpuReading(machine_busy_s=10.0, own_s=4.0, at=100.0)
    # 2 s on 2 cores: the machine was busy 3.2 s, of which ours 2.0: others took 0.3 of the cores
    assert others_share(start, CpuReading(13.2, 6.0, 102.0), cores=2) == pytest.approx(0.3)
    assert was_busy(start, CpuReading(13.2, 6.0, 102.0), cores=2)
    assert not was_busy(start, CpuReading(12.8, 6.0, 102.0), cores=2)  # 0.2 of the cores: a ratio stands
    assert others_share(start, CpuReading(10.1, 4.0, 100.5), cores=2) is None  # too short to read
    assert others_share(None, start) is None and not was_busy(start, None)


@pytest.mark.parametrize("others_s, plain_steps, expected_basis, footer", [
    (0.2, 7, "calibrated", "× vs plain (calibrated)"),
    (1.5, 7, "other programs busy", "no ratio: other programs were busy"),
    (1.5, 10, "own plain steps", "× vs plain (own plain steps)")])  # measured in the moment: it stands
def test_a_reply_on_a_busy_machine_claims_no_ratio_against_the_calibration(monkeypatch, others_s, plain_steps,
                                                                           expected_basis, footer):
    """A reply sent while a helper's probes ran beside it read "0.32× vs plain (calibrated)": the calibration was an
    idle machine's, and the user read the slowdown as the drafter's."""
    from specchat.chats import run_book
    from specchat.chats.run_context import RunContext
    from specchat.core.machine_load import CpuReading
    from specchat.engine.decoding.events import GenerationResult
    from specchat.engine.decoding.speculative import GenerationConfig

    readings = iter([CpuReading(10.0, 1.0, 50.0), CpuReading(10.0 + 2.0 + others_s, 3.0, 52.0)])
    monkeypatch.setattr(run_book, "read_cpu", lambda: next(readings))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    book = run_book.RunBook(FakeStore(), app_session_id=7)
    book.plain_tokens_per_s = 50.0
    context = RunContext.of_pair(Pair(), "pld", GenerationConfig(k=4, adaptive_k=True))
    run_id, _ = book.begin(3, 4, 400, context)
    result = GenerationResult("x", (), (), (), "eos", own_steps_stats(plain_steps), seed=1)
    record = book.complete(3, 4, result, context, run_id)
    assert record.speedup_basis == expected_basis and (record.speedup is None) == (expected_basis == "other "
                                                                                      "programs busy")
    assert footer in run_book.footer_text(record)


def test_a_plain_reply_on_a_busy_machine_leaves_the_calibration_alone(monkeypatch):
    from specchat.chats import run_book
    from specchat.chats.run_context import RunContext
    from specchat.core.machine_load import CpuReading
    from specchat.engine.decoding.events import GenerationResult, GenerationStats
    from specchat.engine.decoding.speculative import GenerationConfig

    readings = iter([CpuReading(0.0, 0.0, 0.0), CpuReading(4.0, 2.0, 2.0)])  # the other core all theirs
    monkeypatch.setattr(run_book, "read_cpu", lambda: next(readings))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    book = run_book.RunBook(FakeStore(), app_session_id=7)
    book.plain_tokens_per_s = 10.0
    context = RunContext.of_pair(Pair(), "none", GenerationConfig(k=4, adaptive_k=True))
    run_id, _ = book.begin(3, 4, 40, context)
    stats = GenerationStats(prompt_tokens=40, new_tokens=40, target_passes=40, prefill_s=0.5, wall_s=2.5)
    book.complete(3, 4, GenerationResult("x", (), (), (), "eos", stats, seed=1), context, run_id)
    assert book.plain_tokens_per_s == 10.0
