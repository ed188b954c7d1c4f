"""run_kind.speedup, the one reading of a speedup over plain decoding, and its three users: the chat reply's run
(chats/run_book.py), the race's lanes (engine/race.py) and the benchmark's records (bench/runner.py). No models."""

import pytest

from specchat.core.run_kind import RunKind, speedup


def test_speedup_is_the_ratio_to_plain_decoding_where_there_is_one():
    assert speedup(30.0, 20.0) == 1.5 and speedup(30.0, 20.0, "pld") == 1.5 and speedup(20.0, 20.0, "none") == 1.0
    assert speedup(30.0, None) is None and speedup(30.0, 0.0) is None  # no baseline
    assert speedup(0.0, 20.0) is None  # nothing decoded
    assert speedup(30.0, 20.0, "remote") is None and speedup(30.0, 20.0, "remote eagle") is None  # another machine
    assert speedup(30.0, 20.0, RunKind.remote("pld")) is None and speedup(30.0, 20.0, RunKind.ours("pld")) == 1.5


def test_race_lanes_get_it_against_the_plain_lane():
    from specchat.engine.race import Track, lane_results

    lanes = [Track(drafter, stats={"new_tokens": tokens, "wall_s": 1.0})
             for drafter, tokens in (("none", 10), ("pld", 25), ("remote", 40), ("model", 0))]
    assert [r.speedup for r in lane_results(lanes, greedy=False)] == [None, 2.5, None, None]


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
