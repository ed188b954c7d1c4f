"""storage.records.run_record, the one factory of a run to store (chat replies, races, `specchat serve` and
benchmarks all use it), and track_row, a race lane's columns; no engine, no models."""

from dataclasses import replace

import pytest

from specchat.storage.records import FIGURE_FIELDS, RUN_SOURCES, RunProvenance, RunRecord, run_record, track_row

CONTEXT = RunProvenance(target="embedded", draft="tiny draft", drafter="model", k=4, adaptive=True, temperature=0.7,
                     top_p=0.9, top_k=40, seed=3, device="cpu", exactness="distribution", app_session_id=None)
STATS = {"prompt_tokens": 12, "new_tokens": 20, "target_passes": 8, "draft_proposed": 24, "draft_accepted": 12,
         "tokens_per_s": 10.0, "prefill_s": 0.1, "draft_s": 0.3, "verify_s": 1.4, "wall_s": 2.0,
         "acceptance_by_position": [0.75, 0.5], "proposed_by_position": [8, 8], "accepted_by_position": [6, 4],
         "awaiting_costs": False,
         "alpha": 0.5, "tau": 2.5, "steps_by_k": [0, 8]}  # the last three: GenerationStats.to_dict(), not run fields


def test_it_takes_the_figures_the_context_the_source_and_extra_fields():
    record = run_record(STATS, CONTEXT, "api", finish_reason="eos", message_id=None)
    assert record == RunRecord(
        target="embedded", draft="tiny draft", drafter="model", k=4, adaptive=True, temperature=0.7, top_p=0.9,
        top_k=40, seed=3, device="cpu", exactness="distribution", source="api", finish_reason="eos",
        **{key: STATS[key] for key in FIGURE_FIELDS})
    assert run_record({}, CONTEXT).source == "chat" and run_record({}, CONTEXT).new_tokens == 0  # defaults


def test_it_refuses_an_unknown_source_and_a_field_given_twice():
    with pytest.raises(ValueError, match="source must be one of"):
        run_record(STATS, CONTEXT, "benchmark")
    with pytest.raises(TypeError):
        run_record(STATS, CONTEXT, "chat", seed=4)  # the context's
    with pytest.raises(TypeError):
        run_record(STATS, CONTEXT, "chat", speed=4.0)  # no RunRecord field
    assert set(RUN_SOURCES) == {"chat", "race", "bench", "api"}


def test_its_record_is_stored_and_read_back(store):
    session = store.start_app_session("test")
    run_id = store.record_run(run_record(STATS, replace(CONTEXT, app_session_id=session), "bench",
                                         category="coding", speedup=1.5, speedup_basis="measured"))
    [row] = store.runs()
    assert (row.id, row.source, row.category, row.app_session_id) == (run_id, "bench", "coding", session)
    assert (row.new_tokens, row.draft_accepted, row.speedup, row.proposed_by_position) == (20, 12, 1.5, (8, 8))


class Lane:
    """Anything with a race lane's attributes (engine.race.Track has them): storage reads, never imports it."""

    drafter, text, finish_reason, stats = "pld", "Hi there", "eos", {"wall_s": 0.5}
    token_ids, spans, origins, times = (1, 2), [(0, 2), (2, 8)], (0, 1), (0.2, 0.5)


def test_track_row_copies_a_lane_into_its_columns_and_it_reads_back(store):
    lane = Lane()
    row = track_row(lane)
    assert row == {"drafter": "pld", "text": "Hi there", "finish_reason": "eos", "token_ids": [1, 2],
                   "token_spans": [[0, 2], [2, 8]], "token_origins": [0, 1], "token_times": [0.2, 0.5],
                   "stats": {"wall_s": 0.5}}
    assert row["stats"] is not lane.stats  # a copy: the lane may go on changing
    comparison = store.save_comparison({"prompt": "Hi", "target": "embedded", "draft": None, "settings": {},
                                        "greedy": True, "identical": None}, [row])
    [track] = store.comparison(comparison).tracks
    assert (track.drafter, track.text, track.token_ids, track.token_spans) == ("pld", "Hi there", (1, 2),
                                                                               ((0, 2), (2, 8)))
