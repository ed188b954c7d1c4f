"""The Prometheus parser and the speculative-decoding counters, on vLLM's own metrics text (tests/remote/data says
where each line comes from), and the arithmetic that turns two reads into alpha and tau."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specchat.remote.metrics import SpecDecodeCounters, delta, engine_of_metrics, parse_prometheus_text

VLLM_TEXT = (Path(__file__).parent / "data" / "vllm_metrics.txt").read_text()


def values(text: str, name: str) -> dict[tuple, float]:
    return {s.labels: s.value for s in parse_prometheus_text(text) if s.name == name}


def test_the_documentation_example_parses_sample_by_sample():
    model = (("model_name", "meta-llama/Llama-3.1-8B-Instruct"),)
    assert values(VLLM_TEXT, "vllm:num_requests_running") == {model: 8.0}
    assert values(VLLM_TEXT, "vllm:generation_tokens_total") == {model: 27453.0}
    finished = {dict(labels)["finished_reason"]: v for labels, v in values(VLLM_TEXT, "vllm:request_success_total")
                .items()}
    assert finished == {"stop": 1.0, "length": 131.0, "abort": 0.0}
    buckets = {dict(labels)["le"]: v for labels, v in values(VLLM_TEXT, "vllm:time_to_first_token_seconds_bucket")
               .items()}
    assert buckets["0.02"] == 13.0 and buckets["0.1"] == 140.0 and len(buckets) == 8
    assert len(values(VLLM_TEXT, "vllm:iteration_tokens_total_bucket")) == 8
    assert not any(s.name.startswith("#") for s in parse_prometheus_text(VLLM_TEXT))  # comments are not samples


def test_the_data_parallel_capture_sums_engines_and_leaves_out_created_times():
    counters = SpecDecodeCounters.from_text(VLLM_TEXT)
    assert counters.engine == "vllm"
    assert counters.drafts == 22 + 15 + 29 + 20 + 25 + 24 + 27 + 26  # eight engines' drafts, summed
    assert counters.accepted_per_position == (7.0,)
    # The capture has only _created samples (Unix times, about 1.76e9) for accepted tokens: no count.
    assert counters.accepted is None and counters.draft_tokens is None
    assert engine_of_metrics(VLLM_TEXT) == "vllm"


def test_metrics_without_speculation_give_none():
    docs_part = VLLM_TEXT.split("# HELP vllm:spec_decode")[0]
    assert SpecDecodeCounters.from_text(docs_part) is None
    assert SpecDecodeCounters.from_text("") is None


def test_the_parser_reads_the_format_corner_cases_and_skips_what_is_not_a_sample():
    text = "\n".join([
        '# a comment', '',
        'plain 3', 'with_timestamp{a="1"} 4.5 1700000000000',
        r'escaped{path="C:\\models\\x",quote="say \"hi\"",nl="a\nb",} 1e3',
        'inf_and_nan{le="+Inf"} +Inf', 'nan NaN',
        'openmetrics_total{a="b"} 2.0 # {trace_id="abc"} 1.0',
        'not a sample', 'broken{a="unterminated} 1', 'novalue{a="1"}', 'word{a="1"} many',
        '# EOF'])
    samples = {s.name: s for s in parse_prometheus_text(text)}
    assert set(samples) == {"plain", "with_timestamp", "escaped", "inf_and_nan", "nan", "openmetrics_total"}
    assert samples["plain"].value == 3 and samples["with_timestamp"].value == 4.5
    assert dict(samples["escaped"].labels) == {"path": "C:\\models\\x", "quote": 'say "hi"', "nl": "a\nb"}
    assert samples["escaped"].value == 1000
    assert samples["inf_and_nan"].value == math.inf and samples["inf_and_nan"].label("le") == "+Inf"
    assert math.isnan(samples["nan"].value) and samples["openmetrics_total"].value == 2.0


def vllm_text(drafts: float, draft_tokens: float, accepted: float, per_position: list[float],
              engines: int = 2) -> str:
    """A /metrics read in the form of the capture above: each count split over `engines` data-parallel engines
    (the first gets the remainder), each series with its _created time."""
    lines = []

    def series(name: str, total: float, extra: str = "") -> None:
        share = total // engines
        for engine in range(engines):
            value = total - share * (engines - 1) if engine == 0 else share
            labels = f'model_name="m",engine="{engine}"{extra}'
            lines.append(f"vllm:{name}_total{{{labels}}} {value}")
            lines.append(f"vllm:{name}_created{{{labels}}} 1.756736798733569e+09")

    series("spec_decode_num_drafts", drafts)
    series("spec_decode_num_draft_tokens", draft_tokens)
    series("spec_decode_num_accepted_tokens", accepted)
    for position, value in enumerate(per_position):
        series("spec_decode_num_accepted_tokens_per_pos", value, f',position="{position}"')
    return "\n".join(lines) + "\n"


def test_alpha_and_tau_come_from_the_difference_of_two_reads():
    # Between the reads: 10 verification steps with K = 3 -> 30 drafts proposed, 18 accepted: 9 at position 0,
    # 6 at position 1, 3 at position 2. alpha = 18 / 30, tau = 1 + 18 / 10 tokens per step.
    before = SpecDecodeCounters.from_text(vllm_text(100, 300, 150, [70, 50, 30]))
    after = SpecDecodeCounters.from_text(vllm_text(110, 330, 168, [79, 56, 33]))
    change = delta(before, after)
    assert change.alpha == pytest.approx(0.6) and change.tau == pytest.approx(2.8)
    assert (change.drafts, change.draft_tokens, change.accepted) == (10, 30, 18)
    assert change.accepted_per_position == (9, 6, 3)
    assert change.acceptance_by_position == pytest.approx([0.9, 0.6, 0.3])
    assert change.server_wide and "other users" in change.scope


def test_a_restart_or_an_idle_server_gives_no_figures_rather_than_wrong_ones():
    running = SpecDecodeCounters.from_text(vllm_text(100, 300, 150, [70, 50, 30]))
    restarted = SpecDecodeCounters.from_text(vllm_text(4, 12, 6, [3, 2, 1]))
    change = delta(running, restarted)
    assert change.alpha is None and change.tau is None and "restarted" in change.scope
    idle = delta(running, running)
    assert idle.alpha is None and idle.tau is None and "no draft" in idle.scope
    assert delta(None, running) is None and delta(running, None) is None


def test_vllm_v0_counters_give_tau_from_emitted_tokens():
    # v0 (vllm/engine/metrics.py): no drafts counter; each step emits its accepted drafts plus one target token,
    # so steps = emitted - accepted: 40 proposed, 24 accepted, 34 emitted -> 10 steps, tau = 34 / 10.
    def v0(draft_tokens, accepted, emitted):
        return SpecDecodeCounters.from_text(
            f'vllm:spec_decode_draft_acceptance_rate{{model_name="m"}} 0.6\n'
            f'vllm:spec_decode_efficiency{{model_name="m"}} 0.5\n'
            f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}\n'
            f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {draft_tokens}\n'
            f'vllm:spec_decode_num_emitted_tokens_total{{model_name="m"}} {emitted}\n')

    before, after = v0(1000, 500, 700), v0(1040, 524, 734)
    assert before.engine == "vllm-v0" and before.acceptance_rate_gauge == 0.6
    change = delta(before, after)
    assert change.alpha == pytest.approx(0.6) and change.tau == pytest.approx(3.4)


def test_sglang_gauges_are_read_as_they_are():
    # SGLang (python/sglang/srt/metrics/collector.py) has gauges only: its latest batches' averages.
    text = ('sglang:spec_accept_length{model_name="m",tp_rank="0"} 3.2\n'
            'sglang:spec_accept_rate{model_name="m",tp_rank="0"} 0.55\n'
            'sglang:spec_accept_length{model_name="m",tp_rank="1"} 3.0\n'
            'sglang:spec_accept_rate{model_name="m",tp_rank="1"} 0.45\n')
    counters = SpecDecodeCounters.from_text(text)
    assert counters.engine == "sglang" and engine_of_metrics(text) == "sglang"
    change = delta(None, counters)
    assert change.alpha == pytest.approx(0.5) and change.tau == pytest.approx(3.1)
    assert change.server_wide and "gauges" in change.scope


def test_created_timestamps_and_per_position_series_are_not_counted_as_totals():
    """prometheus_client exports a `_created` timestamp beside every counter, and vLLM a per-position breakdown of
    accepted tokens: summing them into the totals would wreck alpha."""
    from specchat.remote.metrics import SpecDecodeCounters

    text = "\n".join([
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40',
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.79e+09',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 160',
        'vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="m"} 1.79e+09',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 100',
        'vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="m"} 1.79e+09',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 35',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 30',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 20',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 15',
    ])
    counters = SpecDecodeCounters.from_text(text)
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (40, 160, 100)
    assert counters.accepted_per_position == (35, 30, 20, 15)
