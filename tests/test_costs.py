"""`specchat costs` on random weights of a tiny shape: the cost curve, the ceiling and the predictions."""

import json

from specchat.cli import main
from specchat.commands import costs as cli, measure_costs as costs


def test_shape_names_in_the_cli_match_the_shapes():
    assert set(cli.SHAPE_NAMES) == set(costs.SHAPES)


def test_costs_report_on_a_random_tiny_model(capsys):
    code = main(["costs", "--shape", "tiny", "--draft-shape", "tiny", "--device", "cpu", "--max-n", "4",
                 "--context", "16", "--repeats", "2", "--tokens", "12", "--k", "3", "--alphas", "0.5,0.9", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["target"] == "random tiny" and report["static_cache"] is False
    assert set(report["target_forward_ms"]) == {"1", "2", "3", "4"} and all(
        ms > 0 for ms in report["target_forward_ms"].values())
    assert report["draft_cost_ratio"] > 0
    assert [p["alpha"] for p in report["predicted"]] == [0.5, 0.9]
    assert report["ceiling"]["k"] == 3 and report["ceiling"]["self_draft_tokens_per_s"] > 0
    assert "random weights" in report["note"] and report["free_draft_ceiling"]["speedup"] > 0


def test_predicted_speedup_uses_the_curve():
    """Flat curve, free drafts, alpha 0.5: K = 3 gives E = 1.875 tokens a step; the best of K = 1..3 is K = 3."""
    rows = costs.predicted_speedups({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}, draft_s=0.0, alphas=[0.5])
    assert rows == [{"alpha": 0.5, "best_k": 3, "speedup": 1.875}]
    assert costs.free_draft_ceiling({1: 1.0, 2: 1.5, 3: 1.5, 4: 4.0}) == {"k": 2, "speedup": 2.0}
    steep = costs.predicted_speedups({1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}, draft_s=0.0, alphas=[0.5])
    assert steep[0]["best_k"] == 0 and steep[0]["speedup"] == 1.0  # verifying is as dear as generating


def test_static_cache_flag_and_text_output(capsys):
    code = main(["costs", "--shape", "tiny", "--device", "cpu", "--max-n", "2", "--context", "8", "--repeats", "1",
                 "--tokens", "8", "--static-cache"])
    out = capsys.readouterr().out
    assert code == 0 and "static cache" in out and "ceiling" in out and "predicted speedup" in out


def test_costs_can_time_passes_without_packed_weights(capsys):
    code = main(["costs", "--shape", "tiny", "--device", "cpu", "--max-n", "5", "--context", "8", "--repeats", "1",
                 "--tokens", "8", "--no-packed-weights"])
    out = capsys.readouterr().out
    assert code == 0 and "packed weights off" in out and "5:" in out


def test_costs_on_the_embedded_model_time_the_llama_cpp_runner(capsys):
    import pytest

    pytest.importorskip("llama_cpp")
    code = main(["costs", "--max-n", "3", "--context", "16", "--repeats", "1", "--alphas", "0.9", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and "on llama.cpp" in report["target"] and report["ceiling"] is None
    assert set(report["target_forward_ms"]) == {"1", "2", "3"} and report["predicted"][0]["alpha"] == 0.9
