"""`specchat bench`: every mode, ours and transformers', over multi-turn prompts, with a complete report."""

import json

from tiny_models import EXACT_ARGS

from specchat.cli import main
from specchat.resources import default_prompt_suite


def test_shipped_suite_is_valid_spec_bench():
    from specchat.bench import load_prompts

    prompts = load_prompts(default_prompt_suite().read_text(encoding="utf-8").splitlines(), "suite")
    assert 40 <= len(prompts) <= 60
    assert {"chat", "writing", "coding", "rewriting", "summarization", "extraction", "qa", "math"} == {
        p.category for p in prompts}
    assert any(len(p.turns) > 1 for p in prompts)


def test_shipped_humanevalfix_gives_164_buggy_functions_to_fix():
    import gzip

    from specchat.bench import human_eval_fix_prompts
    from specchat.resources import human_eval_fix_problems

    records = [json.loads(line) for line in gzip.decompress(human_eval_fix_problems().read_bytes()).decode(
        "utf-8").splitlines() if line.strip()]
    prompts = human_eval_fix_prompts("\n".join(json.dumps(r) for r in records))
    assert len(records) == len(prompts) == 164
    assert len({p.question_id for p in prompts}) == 164 and {p.question_id for p in prompts} == set(range(164))
    assert {p.category for p in prompts} == {"humanevalfix"}
    for record, prompt in zip(records, prompts):
        assert prompt.question_id == int(record["task_id"].split("/")[1]) and len(prompt.turns) == 1
        assert record["buggy_solution"] != record["canonical_solution"]  # a bug is in each
        text = prompt.turns[0]
        assert text.startswith("Fix the bug in this Python function. Reply with the whole fixed function in one code")
        # the whole buggy function: imports, signature and docstring, then the buggy body; not the fix
        assert f"```python\n{record['prompt']}{record['buggy_solution']}```" in text
        assert record["declaration"].strip() in text and record["canonical_solution"] not in text


def test_bench_suite_humanevalfix_is_parsed_and_sampled_per_task():
    from specchat import bench
    from specchat.cli import build_parser
    from specchat.commands.bench import _prompts

    args = build_parser().parse_args(["bench", "--suite", "humanevalfix"])
    assert args.suite == "humanevalfix"
    every = _prompts(args, bench)
    assert len(every) == 164 and {p.category for p in every} == {"humanevalfix"}
    sampled = _prompts(build_parser().parse_args(["bench", "--suite", "humanevalfix", "--per-task", "6"]), bench)
    again = _prompts(build_parser().parse_args(["bench", "--suite", "humanevalfix", "--per-task", "6"]), bench)
    assert len(sampled) == 6 and sampled == again  # seeded, as for humaneval
    assert {p.question_id for p in sampled} < {p.question_id for p in every}
    limited = _prompts(build_parser().parse_args(["bench", "--suite", "humanevalfix", "--limit", "3"]), bench)
    assert [p.question_id for p in limited] == [0, 1, 2]


def test_shipped_quixbugs_gives_40_whole_programs_to_fix():
    """The second code-edit suite: QuixBugs's 40 Python programs as they are in the repository (the checksum its
    PROVENANCE.md states), each asked for fixed and whole, sampled per task as the other public suites are."""
    import gzip
    import hashlib

    from specchat import bench
    from specchat.cli import build_parser
    from specchat.commands.bench import _prompts
    from specchat.resources import quixbugs_programs, resource

    data = gzip.decompress(quixbugs_programs().read_bytes())
    assert hashlib.sha256(data).hexdigest() in resource("quixbugs", "PROVENANCE.md").read_text(encoding="utf-8")
    assert "Permission is hereby granted" in resource("quixbugs", "LICENSE").read_text(encoding="utf-8")  # MIT
    records = [json.loads(line) for line in data.decode("utf-8").splitlines()]
    every = _prompts(build_parser().parse_args(["bench", "--suite", "quixbugs"]), bench)
    assert len(records) == len(every) == 40 and {p.category for p in every} == {"quixbugs"}
    assert {p.question_id for p in every} == {r["name"] for r in records} and "node" not in {r["name"] for r in records}
    for record, prompt in zip(records, every):
        assert prompt.turns[0].startswith("Fix the bug in this Python program. Reply with the whole fixed program")
        assert record["program"].strip() in prompt.turns[0] and f"def {record['name']}" in record["program"]
    sampled = _prompts(build_parser().parse_args(["bench", "--suite", "quixbugs", "--per-task", "10"]), bench)
    assert len(sampled) == 10 and sampled == _prompts(
        build_parser().parse_args(["bench", "--suite", "quixbugs", "--per-task", "10"]), bench)


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
                 "--max-new-tokens", "16", "--out", str(report_path), "--profile", *EXACT_ARGS,
                 "--k", "3", "--no-adaptive"])  # fixed K: every mode drafts, whatever the machine's speed
    assert code == 0
    table = capsys.readouterr().out
    assert "overall" in table and "hf-model" in table
    assert "Engine efficiency" in table and "Overhead outside the models" in table and "Memory" in table
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
    # a torch target's engine has no cost curve: the hindsight oracle is priced on the run's own steps
    assert report["summary"]["overall"]["none"]["oracle_speedup"] >= 1.0
    assert "captured" in report["summary"]["overall"]["pld"]
    assert all(r["oracle_speedup"] is not None for r in records if r["mode"] == "none")
    model = report["summary"]["overall"]["model"]
    assert model["alpha"] is not None and model["draft_cost"] > 0
    assert model["acceptance_by_position"] and all(0 <= a <= 1 for a in model["acceptance_by_position"])
    assert model["efficiency"] > 0 and model["predicted_speedup"] > 0 and 0 <= model["iid_alpha"] <= 1
    assert set(model["overhead_share"]) == {"accept", "rollback", "policy", "detokenize", "event", "python", "total"}
    assert model["overhead_share"]["total"] >= model["overhead_share"]["detokenize"] >= 0
    assert model["verify_curve_ms"] and "1" in report["summary"]["overall"]["none"]["verify_curve_ms"]
    assert "efficiency" not in report["summary"]["overall"]["hf-model"]
    assert report["memory_mb"]["with the draft"] >= report["memory_mb"]["with the target"] > 0


def test_leviathan_prediction_from_steps_and_the_cost_curve():
    """alpha = 0.5 (2 accepted of 4 trials), two steps with k = 2: E = 1 + .5 + .25 = 1.75 tokens each; verifying
    3 tokens costs 2 plain steps each (t1 = 0.1 s), no drafting cost: predicted = 0.1 * 3.5 / 0.4 = 0.875."""
    from specchat.bench import ModeRecord
    from specchat.bench.report import _engine_figures

    record = ModeRecord(question_id=1, category="c", mode="pld", new_tokens=7, wall_s=0.5, target_passes=3,
                        draft_proposed=4, draft_accepted=2, draft_forwards=0, draft_s=0.0, verify_s=0.4,
                        prefill_s=0.05, rejected_steps=2, steps_by_k=[0, 0, 2], verify_s_by_k=[0.0, 0.0, 0.4],
                        overhead_s={"accept_s": 0.01, "rollback_s": 0.0, "policy_s": 0.0, "detokenize_s": 0.02,
                                    "event_s": 0.01, "other_s": 0.05})
    figures = _engine_figures([record], plain_pass_s=0.1, plain_decode_rate=10.0)
    assert figures["iid_alpha"] == 0.5 and figures["predicted_speedup"] == 0.875
    assert figures["decode_speedup"] == round(6 / 0.45 / 10.0, 3)
    assert figures["efficiency"] == round(figures["decode_speedup"] / 0.875, 3)
    assert figures["verify_curve_ms"] == {3: 200.0}
    assert figures["overhead_share"]["python"] == round(0.01 / 0.45, 4)


def test_bench_can_run_without_packed_weights(tmp_path, tokenizer, target, monkeypatch):
    from specchat.engine.loading import pair

    made = []
    real_runner_for = pair.runner_for
    monkeypatch.setattr(pair, "runner_for", lambda *a, **kw: made.append(kw) or real_runner_for(*a, **kw))
    target.save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "chat", "turns": ["The quick brown fox"]}))
    report_path = tmp_path / "report.json"
    assert main(["bench", "--prompts", str(prompts), "--target", str(tmp_path / "target"), "--modes", "none,pld",
                 "--max-new-tokens", "8", "--no-packed-weights", "--out", str(report_path), *EXACT_ARGS]) == 0
    report = json.loads(report_path.read_text())
    assert report["settings"]["packed_weights"] is False and all(r["identical"] for r in report["records"])
    assert made and all(kw["packed_weights"] is False for kw in made)
