"""The hindsight oracle of `specchat bench`'s report (specchat/bench/oracle.py): its steps over a plain reply priced
on a synthetic cost curve, worked out by hand; its place in the runner's plain records; and the report's oracle
speedup and the share of its gain each mode captured."""

import io
import random
from types import SimpleNamespace

import pytest

from specchat.bench.oracle import (PlainTurn, _CopyFinder, best_draft, copy_length, measured_curve, oracle_of,
                                   oracle_turn)
from specchat.engine.decoding.cost_curve import CostCurve
from specchat.engine.decoding.events import GenerationStats

# tokens per cost: size 1 -> 1.0, 2 -> 1.67, 3 -> 2.31, 5 -> 3.33: the longest measured draft that fits pays most
CURVE = CostCurve({1: 1.0, 2: 1.2, 3: 1.3, 5: 1.5})
PROMPT = list(range(1, 11))  # 1 .. 10


def test_a_reply_that_copies_the_prompt_takes_long_steps():
    """R = the prompt. i = 1: the text ends (10, 1), seen nowhere before: a plain step. i = 2: (1, 2) ends at 2 in
    the prompt and 8 tokens after it agree, but the curve's largest size is 5 (K = 4, ratio 1.5): to i = 7. There
    room = 10 - 7 - 1 = 2: K = 2 (ratio 1.3), to the end. Passes 1 + 1.5 + 1.3 = 3.8 against plain's 9."""
    turn = oracle_turn(PROMPT, PROMPT, CURVE, prefill_s=0.5, decode_s_per_token=0.1)
    assert turn.drafted == (0, 4, 2) and turn.steps == 3 and turn.copied == 6 and turn.tokens == 10
    assert turn.passes == pytest.approx(3.8)
    assert turn.decode_speedup == pytest.approx(9 / 3.8)
    assert turn.plain_s == pytest.approx(0.5 + 0.9) and turn.oracle_s == pytest.approx(0.5 + 0.38)
    assert turn.speedup == pytest.approx(1.4 / 0.88)
    same = oracle_of(PlainTurn(tuple(PROMPT), tuple(PROMPT), prefill_s=0.5, decode_s=0.9), CURVE)
    assert same.drafted == turn.drafted and same.oracle_s == pytest.approx(turn.oracle_s)


def test_prompt_processing_counts_in_the_speedup_and_not_in_the_decode_speedup():
    quick, slow = (oracle_turn(PROMPT, PROMPT, CURVE, prefill_s=p, decode_s_per_token=0.1) for p in (0.0, 5.0))
    assert quick.speedup == pytest.approx(9 / 3.8) == quick.decode_speedup == slow.decode_speedup
    assert slow.speedup == pytest.approx((5 + 0.9) / (5 + 0.38))


def test_a_reply_with_nothing_in_common_is_plain_decoding():
    turn = oracle_turn([1, 2, 3, 4, 5], list(range(20, 30)), CURVE, prefill_s=0.3, decode_s_per_token=0.1)
    assert turn.drafted == (0,) * 9 and turn.copied == 0 and turn.passes == 9
    assert turn.speedup == pytest.approx(1.0) and turn.decode_speedup == pytest.approx(1.0)


def test_the_curves_sizes_restrict_the_draft():
    """Only sizes 1 and 3: K = 0 or 2. i = 1 plain; i = 2 and 5 K = 2; at i = 8 one token of room is not a
    measured size, so the last two steps are plain: 1 + 1.3 + 1.3 + 1 + 1 = 5.6 passes."""
    turn = oracle_turn(PROMPT, PROMPT, CostCurve({1: 1.0, 3: 1.3}), prefill_s=0.0, decode_s_per_token=1.0)
    assert turn.drafted == (0, 2, 2, 0, 0) and turn.passes == pytest.approx(5.6)
    assert turn.oracle_s == pytest.approx(5.6) and turn.plain_s == pytest.approx(9.0)


def test_best_draft_takes_the_most_tokens_per_cost():
    assert best_draft(10, CURVE) == 4 and best_draft(3, CURVE) == 2 and best_draft(0, CURVE) == 0
    assert best_draft(10, CURVE, room=1) == 1
    steep = CostCurve({1: 1.0, 2: 1.2, 3: 3.5})  # 3 tokens for 3.5 passes: worse than plain decoding
    assert best_draft(5, steep) == 1
    flat_loss = CostCurve({1: 1.0, 2: 2.5})
    assert best_draft(5, flat_loss) == 0


def test_the_reply_copies_from_itself():
    """A reply that repeats its own first tokens copies them from the text so far. At 7 the text ends (35, 31),
    seen nowhere before; at 8 it ends (31, 32), which ended at 5: 33 34 35 agree, then 31 is not 36. With three
    tokens of room the curve's best is K = 2 (size 3), and the last token is a plain step."""
    reply = [30, 31, 32, 33, 34, 35, 31, 32, 33, 34, 35, 36]
    assert copy_length([1, 2], reply, 7) == 0 and copy_length([1, 2], reply, 8) == 3
    turn = oracle_turn([1, 2], reply, CURVE, prefill_s=0.0, decode_s_per_token=1.0)
    assert turn.drafted == (0,) * 7 + (2, 0) and turn.passes == pytest.approx(8 + 1.3)


def test_the_bigram_index_finds_what_every_2_to_4_gram_finds():
    """_CopyFinder looks up only the last bigram; copy_length() tries every 2-, 3- and 4-gram occurrence."""
    rng = random.Random(7)
    for _ in range(30):
        prompt = [rng.randrange(4) for _ in range(rng.randrange(2, 40))]
        reply = [rng.randrange(4) for _ in range(rng.randrange(2, 40))]
        finder = _CopyFinder(prompt, reply)
        for i in range(1, len(reply)):
            assert finder.longest(i, 1000) == copy_length(prompt, reply, i), (prompt, reply, i)


def test_a_long_prompt_is_quick():
    import time

    rng = random.Random(3)
    prompt = [rng.randrange(30) for _ in range(2000)]
    reply = prompt[500:600] + [rng.randrange(30) for _ in range(156)]
    curve = CostCurve({n: 1 + 0.05 * (n - 1) for n in (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)})
    started = time.perf_counter()
    turn = oracle_turn(prompt, reply, curve, prefill_s=1.0, decode_s_per_token=0.1)
    assert time.perf_counter() - started < 2.0  # about 0.05 s; loose for a shared machine
    assert turn.copied >= 90


def test_a_curve_from_the_runs_own_steps():
    curve = measured_curve([([10, 0, 4], [1.0, 0.0, 0.52]), ([2, 1], [0.2, 0.11])])
    assert curve.sizes == (1, 3) and curve.ratio(3) == pytest.approx(1.3)  # size 2: one step, too few
    assert measured_curve([([10], [1.0])]) is None  # no longer pass measured: no price for a draft
    assert measured_curve([]) is None


# -- the runner -------------------------------------------------------------------------------------------------

def _plain_output(prompt, reply, prefill_s, wall_s):
    from specchat.bench.runner import TurnOutput

    return TurnOutput(list(reply), "", wall_s, GenerationStats(prefill_s=prefill_s, wall_s=wall_s),
                      prompt_ids=list(prompt))


def test_plain_records_keep_their_turns_and_get_the_oracle():
    from specchat.bench.runner import ModeRecord, _with_measured_oracles, attach_oracle, plain_turns

    turns = plain_turns([_plain_output(PROMPT, PROMPT, 0.5, 1.4), _plain_output([5, 6], [7, 8, 9], 0.2, 0.4)])
    assert turns[0] == PlainTurn(tuple(PROMPT), tuple(PROMPT), 0.5, pytest.approx(0.9))
    assert turns[0].decode_s_per_token == pytest.approx(0.1) and turns[1].decode_s_per_token == pytest.approx(0.1)
    assert plain_turns([_plain_output(PROMPT, PROMPT, 0.5, 1.4), SimpleNamespace(prompt_ids=None)]) == []

    record = ModeRecord(question_id=1, category="c", mode="none", new_tokens=13, wall_s=1.8, target_passes=13,
                        draft_proposed=None, draft_accepted=None, prefill_s=0.7, plain_turns=turns)
    attach_oracle(record, None)
    assert record.oracle_s is None and record.to_dict()["oracle_speedup"] is None
    attach_oracle(record, CURVE)
    # turn 2: no copy, two plain steps (0.2 s): oracle 0.88 + 0.4, plain 1.4 + 0.4
    assert record.oracle_s == pytest.approx(0.88 + 0.4) and record.oracle_plain_s == pytest.approx(1.8)
    assert record.oracle_speedup == pytest.approx(1.8 / 1.28)
    assert record.oracle_decode_speedup == pytest.approx(1.1 / 0.58)
    assert record.oracle_copied == 6
    assert record.to_dict()["oracle_speedup"] == round(1.8 / 1.28, 3)

    # a torch target's engine has no curve: the run's own steps price the oracle at the end
    bare = ModeRecord(question_id=2, category="c", mode="none", new_tokens=10, wall_s=1.4, target_passes=10,
                      draft_proposed=None, draft_accepted=None, prefill_s=0.5, plain_turns=turns[:1],
                      steps_by_k=[9], verify_s_by_k=[0.9])
    pld = ModeRecord(question_id=2, category="c", mode="pld", new_tokens=10, wall_s=1.0, target_passes=5,
                     draft_proposed=6, draft_accepted=6, steps_by_k=[3, 0, 0, 0, 3], verify_s_by_k=[0.3, 0, 0, 0, 0.45])
    _with_measured_oracles([bare, pld])
    # plain steps 1.2 s / 12, five-token passes 0.45 s / 3: sizes 1 and 5 (ratio 1.5). K = 4 once, then the last
    # three tokens have no room for a measured draft: 1 + 1.5 + 1 + 1 + 1 passes of 0.1 s after the 0.5 s prefill
    assert bare.oracle_s == pytest.approx(0.5 + 0.55) and bare.oracle_copied == 4
    assert pld.oracle_s is None  # only plain decoding's records have an oracle


def test_the_runner_prices_the_oracle_on_the_plain_engines_curve():
    from specchat.bench.runner import BenchRunner, BenchSettings

    runner = BenchRunner(SimpleNamespace(target=SimpleNamespace(tokenizer=None)), BenchSettings())
    assert runner.oracle_curve() is None
    runner._modes["none"] = SimpleNamespace(engine=SimpleNamespace(step_costs=SimpleNamespace(curve=CURVE)))
    assert runner.oracle_curve() is CURVE
    runner._modes["none"] = SimpleNamespace(engine=SimpleNamespace(step_costs=SimpleNamespace()))  # no curve yet
    assert runner.oracle_curve() is None


# -- the report -------------------------------------------------------------------------------------------------

def _record(mode, wall_s, category="chat", **figures):
    from specchat.bench import ModeRecord

    return ModeRecord(question_id=1, category=category, mode=mode, new_tokens=100, wall_s=wall_s,
                      target_passes=100, draft_proposed=None, draft_accepted=None, prefill_s=1.0, **figures)


def test_the_report_gives_the_oracle_and_the_share_each_mode_captured():
    """Plain: 10 s, 1 s of it prompt processing; its oracle 4 s: 2.5x, 9 / 3 = 3x decode only. pld: 5 s, 2x, and
    9 / 4 = 2.25x decode only: it took (2 - 1) / (2.5 - 1) of the gain, and (2.25 - 1) / (3 - 1) of decoding's."""
    from specchat.bench import print_summary, summarize

    records = [_record("none", 10.0, oracle_s=4.0, oracle_plain_s=10.0, oracle_copied=60),
               _record("pld", 5.0), _record("none", 10.0, category="qa"), _record("pld", 8.0, category="qa")]
    summary = summarize(records)
    chat = summary["chat"]
    assert chat["none"]["oracle_speedup"] == 2.5 and chat["pld"]["oracle_speedup"] == 2.5
    assert chat["pld"]["oracle_decode_speedup"] == 3.0 and chat["pld"]["oracle_copied"] == 60
    assert chat["pld"]["speedup"] == 2.0 and chat["pld"]["captured"] == round(1 / 1.5, 3)
    assert chat["pld"]["decode_speedup"] == 2.25 and chat["pld"]["decode_captured"] == 0.625
    assert chat["none"]["captured"] == 0.0
    # a group where a plain record has no oracle has none, nor any share of it
    assert summary["qa"]["pld"]["oracle_speedup"] is None and summary["qa"]["pld"]["captured"] is None
    assert summary["overall"]["pld"]["oracle_speedup"] is None
    assert {"speedup", "alpha", "tau", "identical"} <= set(chat["pld"])  # the existing keys stay

    out = io.StringIO()
    print_summary(summary, ["none", "pld"], out)
    table = out.getvalue()
    assert "captured" in table.splitlines()[0]
    oracle_rows = [line for line in table.splitlines() if line.split()[:2] == ["chat", "oracle"]]
    assert len(oracle_rows) == 1 and "2.50x" in oracle_rows[0]
    assert "67%" in next(line for line in table.splitlines() if line.split()[:2] == ["chat", "pld"])
    assert not any(line.split()[:2] == ["qa", "oracle"] for line in table.splitlines())


def test_no_share_of_a_gain_the_oracle_does_not_have():
    from specchat.bench.report import captured

    assert captured(1.5, 1.005) is None and captured(None, 2.0) is None and captured(1.5, None) is None
    assert captured(0.9, 2.0) == -0.1 and captured(3.0, 2.0) == 2.0
