"""Races without Qt: lanes run one after the other with one seed, a short race runs them again alternated and gives
each ratio its median and range, tracks replay by their clocks and are stored and read back (the word diff is the
UI's: tests/ui/test_race_window.py)."""

import threading

from specchat.engine.chat_engine import LocalChatEngine
from specchat.engine.chat_prompt import Message
from specchat.engine.decoding.sampling import SamplingParams
from specchat.engine.decoding.speculative import GenerationConfig, SpeculativeEngine
from specchat.engine.drafting import make_drafter
from specchat.engine.race import RUNS_KEY, RaceRunner, Rerun, Track, all_identical, lane_results, lanes_for
from specchat.storage.records import track_row
from race_text import chars_at

CHAT = [Message("user", "The quick brown fox jumps over the lazy dog. Speculative decoding drafts tokens.")]


def runner_for(target, close_draft, tokenizer, max_runs=1):
    """Lanes of the tiny models; max_runs 1: each lane runs once (the tests of runs again say how many)."""
    return RaceRunner(lambda drafter: LocalChatEngine(SpeculativeEngine(
        target, tokenizer, make_drafter(drafter, close_draft if drafter == "model" else None))), max_runs=max_runs)


def run_race(runner, _prompt_ids, drafters, config, cancel=None, reruns=None):
    """The race of CHAT (every lane reads it through the tokenizer's chat template), as the window takes it: step
    events into the tracks, runs again into Track.add_run (each (lane, Rerun) also appended to `reruns`)."""
    tracks = [Track(d) for d in lanes_for(drafters)]
    order = []
    for lane, event in runner.stream(CHAT, None, drafters, config, cancel):
        if isinstance(event, Rerun):
            if reruns is not None:
                reruns.append((lane, event))
            if event.tokens_per_s is not None:
                tracks[lane].add_run(event.tokens_per_s)
            continue
        order.append(lane)
        tracks[lane].add(event)
    return tracks, order


def test_lanes_run_one_after_the_other_and_greedy_lanes_agree(target, close_draft, tokenizer, prompt_ids):
    runner = runner_for(target, close_draft, tokenizer)
    tracks, order = run_race(runner, prompt_ids, ["pld", "model"], GenerationConfig(max_new_tokens=30, k=3))
    assert order == sorted(order)  # never interleaved
    assert [t.drafter for t in tracks] == ["none", "pld", "model"]
    assert all_identical(tracks) and all(t.finish_reason is not None for t in tracks)
    assert tracks[0].text == tokenizer.decode(tracks[0].token_ids, skip_special_tokens=True)
    results = lane_results(tracks, greedy=True)
    assert results[0].speedup is None and results[0].identical is None and results[0].alpha is None
    assert results[2].identical is True and 0 <= results[2].alpha <= 1 and results[2].acceptance_by_position
    # the loosely related draft keeps few tokens: a ratio only where drafts made a tenth of the reply
    drafted_enough = tracks[2].stats["draft_accepted"] >= 0.1 * tracks[2].new_tokens
    assert (results[2].speedup is not None) == drafted_enough and (results[2].plainly is None) == drafted_enough


def test_track_times_rise_and_replay_shows_prefixes(target, close_draft, tokenizer, prompt_ids):
    runner = runner_for(target, close_draft, tokenizer)
    tracks, _ = run_race(runner, prompt_ids, ["model"], GenerationConfig(max_new_tokens=24, k=4))
    track = tracks[1]
    assert len(track.times) == len(track.token_ids) == len(track.spans) == len(track.origins)
    assert track.times == sorted(track.times) and track.times[-1] <= track.wall_s
    assert track.tokens_at(-1) == 0 and track.tokens_at(track.wall_s) == len(track.token_ids)
    middle = track.times[len(track.times) // 2]
    n = track.tokens_at(middle)
    assert "".join(text for text, _ in track.runs(0, n)) == track.text[:chars_at(track, middle)]
    curve = track.curve()
    assert curve[0] == (0.0, 0) and curve[-1][1] == len(track.token_ids)
    assert len(curve) - 1 == track.stats["target_passes"]  # one point per step: drafts land together
    assert Track.from_row(type("Row", (), track_row(track))) == track


def test_sampled_lanes_share_the_seed(target, close_draft, tokenizer, prompt_ids):
    runner = runner_for(target, close_draft, tokenizer)
    config = GenerationConfig(max_new_tokens=12, k=3, seed=7, sampling=SamplingParams(temperature=0.9))
    first, _ = run_race(runner, prompt_ids, ["model"], config)
    again, _ = run_race(runner, prompt_ids, ["model"], config)
    assert [t.token_ids for t in first] == [t.token_ids for t in again]  # reproducible lane by lane
    assert lane_results(first, greedy=False)[1].identical is None


def test_cancel_ends_the_race_after_the_running_lane(target, close_draft, tokenizer, prompt_ids):
    runner = runner_for(target, close_draft, tokenizer)
    cancel = threading.Event()
    cancel.set()
    tracks, order = run_race(runner, prompt_ids, ["pld", "model"], GenerationConfig(max_new_tokens=50), cancel)
    assert set(order) == {0} and tracks[0].finish_reason == "cancelled" and tracks[1].finish_reason is None


def test_a_short_race_runs_its_lanes_again_alternated_and_shows_median_and_range(target, close_draft, tokenizer,
                                                                                  prompt_ids):
    runner = runner_for(target, target, tokenizer, max_runs=4)  # the target as its own draft: all kept
    reruns = []
    tracks, order = run_race(runner, prompt_ids, ["model"], GenerationConfig(max_new_tokens=20, k=3),
                             reruns=reruns)
    assert order == sorted(order)  # the streamed runs: one lane after the other
    ended = [(lane, rerun.run) for lane, rerun in reruns if rerun.tokens_per_s is not None]
    assert ended == [(1, 2), (0, 2), (0, 3), (1, 3), (1, 4), (0, 4)]  # alternated: plain last, then first, ...
    assert all(rerun.runs == 4 for _, rerun in reruns)
    assert [len(t.run_speeds) for t in tracks] == [4, 4] and tracks[1].run_speeds[0] == tracks[1].tokens_per_s
    plain, model = lane_results(tracks, greedy=True)
    ratios = sorted(m / p for m, p in zip(tracks[1].run_speeds, tracks[0].run_speeds))
    assert model.runs == 4 and model.speedup == (ratios[1] + ratios[2]) / 2  # the median of the paired runs
    assert model.speedup_range == (ratios[0], ratios[-1]) and model.plainly is None
    low, high = plain.speedup_range  # plain decoding's own runs against their median: the noise
    assert plain.speedup is None and low <= 1.0 <= high and plain.runs == 4
    saved = Track.from_row(type("Row", (), track_row(tracks[1])))
    assert saved.run_speeds == tracks[1].run_speeds and RUNS_KEY in saved.stats  # a reopened race reads the same


def test_a_long_race_stays_one_run(target, close_draft, tokenizer, prompt_ids):
    runner = runner_for(target, target, tokenizer, max_runs=5)
    runner.repeat_s = 1e-9  # every race is "long"
    reruns = []
    tracks, _ = run_race(runner, prompt_ids, ["model"], GenerationConfig(max_new_tokens=12, k=3), reruns=reruns)
    assert reruns == [] and [len(t.run_speeds) for t in tracks] == [1, 1]
    plain, model = lane_results(tracks, greedy=True)
    assert model.speedup is not None and model.speedup_range is None and model.runs == 1
    assert plain.speedup_range is None
