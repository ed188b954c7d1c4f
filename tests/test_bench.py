"""`specchat bench`: every mode, ours and transformers', over multi-turn prompts, with a complete report."""

import json

from specchat.cli import main
from specchat.resources import default_prompt_suite


def test_shipped_suite_is_valid_spec_bench():
    from specchat.bench import load_prompts

    prompts = load_prompts(default_prompt_suite().read_text(encoding="utf-8").splitlines(), "suite")
    assert 40 <= len(prompts) <= 60
    assert {"chat", "writing", "coding", "rewriting", "summarization", "extraction", "qa", "math"} == {
        p.category for p in prompts}
    assert any(len(p.turns) > 1 for p in prompts)


def test_bench_report_over_all_modes(tmp_path, capsys, tokenizer, target, close_draft):
    for name, model in (("target", target), ("draft", close_draft)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in [
        {"question_id": 1, "category": "rewriting", "turns": ["The quick brown fox jumps over the lazy dog."]},
        {"question_id": 2, "category": "chat", "turns": ["Speculative decoding", "Say it again"]},
    ]))
    report_path = tmp_path / "report.json"
    code = main(["bench", "--prompts", str(prompts), "--target", str(tmp_path / "target"), "--draft",
                 str(tmp_path / "draft"), "--modes", "none,pld,model,hybrid,hf-none,hf-pld,hf-model",
                 "--max-new-tokens", "16", "--out", str(report_path)])
    assert code == 0
    table = capsys.readouterr().out
    assert "overall" in table and "hf-model" in table
    report = json.loads(report_path.read_text())
    records = report["records"]
    assert len(records) == 2 * 7
    required = {"question_id", "category", "mode", "new_tokens", "wall_s", "tokens_per_s", "speedup", "alpha",
                "tau", "identical", "text"}
    assert all(required <= set(r) for r in records)
    assert all(r["identical"] for r in records), [(r["mode"], r["question_id"]) for r in records if not r["identical"]]
    two_turns = [r for r in records if r["question_id"] == 2 and r["mode"] == "none"][0]
    assert two_turns["new_tokens"] == 32  # both turns counted
    assert set(report["summary"]) == {"rewriting", "chat", "overall"}
    assert report["summary"]["overall"]["none"]["speedup"] == 1.0
    model = report["summary"]["overall"]["model"]
    assert model["alpha"] is not None and model["draft_cost"] > 0
    assert model["acceptance_by_position"] and all(0 <= a <= 1 for a in model["acceptance_by_position"])
