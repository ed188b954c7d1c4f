"""The draft-training pipeline end to end on a tiny target, in its quick setting."""

import json

import torch
from tiny_models import EXACT_PLACEMENT
from transformers import AutoModelForCausalLM

from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.load import LoadOptions
from specchat.engine.loading.pair import check_sources, load_pair
from specchat.models.sources import ModelSource
from specchat.resources import default_prompt_suite
from specchat.training.pipeline import Pipeline, folder_megabytes, settings_for

SUITE = default_prompt_suite().read_text(encoding="utf-8")


def model_folders_heads(model_folders) -> int:
    return json.loads((model_folders / "target" / "config.json").read_text())["num_attention_heads"]


def broad(settings):
    """The head's broad data (training/broad.py) instead of the templated rounds."""
    from dataclasses import replace

    return replace(settings, head_rounds=replace(settings.head_rounds, data="broad"))


def run_quick(model_folders, tmp_path, **kw):
    out = tmp_path / "draft"
    pipeline = Pipeline(ModelSource.parse(str(model_folders / "target")), out, tmp_path / "work",
                        settings_for("quick", **kw), SUITE, log=lambda line: None)
    return out, pipeline.run()


def test_quick_pipeline_trains_a_compatible_lossless_draft(model_folders, tmp_path, prompt_ids):
    out, summary = run_quick(model_folders, tmp_path)

    assert (out / "model.safetensors").exists() and (out / "config.json").exists()
    assert json.loads((out / "training.json").read_text())["epochs"] == summary["epochs"]
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2]
    assert 0.0 <= summary["epochs"][-1]["heldout_top1"] <= 1.0
    assert summary["timings_s"].keys() >= {"first-round replies", "second-round replies", "training"}
    assert AutoModelForCausalLM.from_pretrained(out).dtype == torch.float16  # shipped as fp16

    target, draft = ModelSource.parse(str(model_folders / "target")), ModelSource.parse(str(out))
    assert check_sources(target, draft).compatible
    pair = load_pair(target, draft, LoadOptions(**EXACT_PLACEMENT))
    assert 0 < len(pair.draft.proposal_vocab) <= 64  # the quick preset's size
    config = GenerationConfig(max_new_tokens=24, k=3)
    plain = pair.engine("none").generate(prompt_ids, config).token_ids
    assert pair.engine("model").generate(prompt_ids, config).token_ids == plain


def test_stages_are_reused_and_the_result_is_reproducible(model_folders, tmp_path):
    out, first = run_quick(model_folders, tmp_path)
    weights = (out / "model.safetensors").read_bytes()
    replies = (tmp_path / "work" / "round1.jsonl").read_text()
    (out / "model.safetensors").unlink()

    out, second = run_quick(model_folders, tmp_path)  # same work folder: generation and labels are reused
    assert (tmp_path / "work" / "round1.jsonl").read_text() == replies
    assert second["epochs"] == first["epochs"]
    # a reused stage reports what it cost when it ran, so training.json always describes the whole pipeline
    assert second["timings_s"]["first-round replies"] == first["timings_s"]["first-round replies"]
    assert (out / "model.safetensors").read_bytes() == weights


def test_the_draft_is_small(model_folders, tmp_path):
    out, summary = run_quick(model_folders, tmp_path)
    assert summary["parameters"] < 0.5 * sum(p.numel() for p in
                                             AutoModelForCausalLM.from_pretrained(model_folders / "target").parameters())
    assert folder_megabytes(out) < 5


def test_data_made_with_other_settings_is_not_reused(model_folders, tmp_path):
    run_quick(model_folders, tmp_path)
    first = (tmp_path / "work" / "round1.jsonl").read_text()
    from dataclasses import replace

    settings = replace(settings_for("quick"), max_new_tokens=5)
    Pipeline(ModelSource.parse(str(model_folders / "target")), tmp_path / "draft", tmp_path / "work", settings,
             SUITE, log=lambda line: None).run()
    replies = [json.loads(line) for line in (tmp_path / "work" / "round1.jsonl").read_text().splitlines()]
    assert (tmp_path / "work" / "round1.jsonl").read_text() != first
    assert all(len(r["ids"]) - r["prompt_len"] <= 5 for r in replies)


def test_quick_head_pipeline_shares_the_replies_and_trains_a_lossless_head(model_folders, tmp_path, prompt_ids):
    from specchat.engine.drafting.eagle_network import is_eagle_folder
    from specchat.training.head_pipeline import HeadPipeline

    run_quick(model_folders, tmp_path)  # the draft pipeline first: the head reuses its replies
    replies = (tmp_path / "work" / "round1.jsonl").read_text()
    out = tmp_path / "head"
    source = ModelSource.parse(str(model_folders / "target"))
    summary = HeadPipeline(source, out, tmp_path / "work", settings_for("quick", attention=True), SUITE,
                           log=lambda line: None).run()

    assert (tmp_path / "work" / "round1.jsonl").read_text() == replies
    for name in ("round1", "round2", "round3", "round4"):
        assert (tmp_path / "work" / f"features-{name}.pt").exists()
        assert (tmp_path / "work" / f"features-{name}-prompt.pt").exists()
    assert is_eagle_folder(out) and (out / "README.md").exists()
    assert (tmp_path / "work" / "stateless-head" / "eagle.json").exists()
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2]
    assert len(summary["epochs"][-1]["heldout_acceptance_by_position"]) == 3
    assert [e["epoch"] for e in summary["facts"]["stateless_head_epochs"]] == [1, 2]
    assert summary["timings_s"].keys() >= {"third-round replies", "fourth-round replies", "round1 hidden states",
                                           "round4 hidden states", "round4 hidden states (prompts)", "head training",
                                           "attending head training"}
    assert json.loads((out / "eagle.json").read_text())["shape"]["heads"] == model_folders_heads(model_folders)
    assert summary["facts"]["round3_prompts"] > 0 and summary["facts"]["round4_prompts"] > 0
    assert folder_megabytes(out) < 1

    pair = load_pair(source, None, LoadOptions(**EXACT_PLACEMENT))
    pair.head_folder = out
    config = GenerationConfig(max_new_tokens=24, k=3)
    plain = pair.engine("none").generate(prompt_ids, config).token_ids
    for kind in ("eagle", "eagle-hybrid"):
        assert pair.engine(kind).generate(prompt_ids, config).token_ids == plain


def test_changing_the_head_rounds_regenerates_only_those_rounds(model_folders, tmp_path):
    from dataclasses import replace

    from specchat.training.head_pipeline import HeadPipeline

    source = ModelSource.parse(str(model_folders / "target"))
    work = tmp_path / "work"
    HeadPipeline(source, tmp_path / "head", work, settings_for("quick"), SUITE, log=lambda line: None).run()
    kept = {name: (work / name).stat().st_mtime_ns for name in ("round1.jsonl", "round2.jsonl", "features-round1.pt")}
    third = (work / "round3.jsonl").read_text()
    quick = settings_for("quick")
    settings = replace(quick, head_rounds=replace(quick.head_rounds, third_round=24))
    log = []
    HeadPipeline(source, tmp_path / "head", work, settings, SUITE, log=log.append).run()

    assert {name: (work / name).stat().st_mtime_ns for name in kept} == kept
    assert (work / "round3.jsonl").read_text() != third
    assert any("prompts of round3 changed" in line for line in log)
    assert not any("reusing" in line and "stateless-head" in line for line in log)  # new data: trained again


def test_follow_up_prompts_carry_the_earlier_turns(model_folders, tmp_path):
    from specchat.training.head_pipeline import HeadPipeline

    source = ModelSource.parse(str(model_folders / "target"))
    pipeline = HeadPipeline(source, tmp_path / "head", tmp_path / "work", settings_for("quick"), SUITE,
                            log=lambda line: None)
    pipeline.run()
    follow_ups = [p for p in pipeline.asked["round4"] if p.history]
    assert follow_ups
    earlier = {p.text for p in pipeline.asked["round1"] + pipeline.asked["round3"]}
    assert all(p.history[0] in earlier and p.history[1] for p in follow_ups)


def test_broad_head_pipeline_asks_what_the_target_writes_and_lists_it(model_folders, tmp_path, prompt_ids):
    from specchat.training.head_pipeline import HeadPipeline
    from specchat.training.manifest import read_manifest

    source = ModelSource.parse(str(model_folders / "target"))
    out, work = tmp_path / "head", tmp_path / "work"
    pipeline = HeadPipeline(source, out, work, broad(settings_for("quick")), SUITE, log=lambda line: None)
    summary = pipeline.run()

    assert not (work / "round1.jsonl").exists()  # the templated rounds take no part
    asked = {name: pipeline.asked[name] for name in ("broad1", "broad2")}
    sources = {source for p in asked["broad1"] for source in p.sources}
    assert {"python/peps", "python-docs-fr", "broad.py"} <= sources  # real documents and translations
    follow_ups = asked["broad2"]
    assert all(p.history[0] in {q.text for q in asked["broad1"]} and p.history[1] for p in follow_ups)
    head, entries = read_manifest(out / "manifest.jsonl.gz")
    assert len(entries) == len(asked["broad1"]) + len(follow_ups)
    assert {e["round"] for e in entries} == {"broad1", "broad2"} - ({"broad2"} if not follow_ups else set())
    assert all(set(e["sources"]) <= set(head["sources"]) for e in entries)
    assert summary["timings_s"].keys() >= {"broad1 prompts", "broad1 replies", "broad1 hidden states",
                                           "head training"}

    # The sampled prompts are kept: a second run asks the same ones without sampling again.
    log = []
    again = HeadPipeline(source, out, work, broad(settings_for("quick")), SUITE, log=log.append)
    again.run()
    assert again.asked["broad1"] == asked["broad1"]
    assert any("reusing" in line and "broad1-prompts.json" in line for line in log)

    pair = load_pair(source, None, LoadOptions(**EXACT_PLACEMENT))
    pair.head_folder = out
    config = GenerationConfig(max_new_tokens=24, k=3)
    plain = pair.engine("none").generate(prompt_ids, config).token_ids
    assert pair.engine("eagle").generate(prompt_ids, config).token_ids == plain
