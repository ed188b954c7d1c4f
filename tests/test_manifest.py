"""The training-prompt manifests: the shipped drafters' are complete, sourced and apart from Spec-Bench; the overlap
check finds planted benchmark text; the pipeline refuses to train on it."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from specchat.resources import default_prompt_suite, spec_bench_questions
from specchat.training.manifest import (CONTAMINATION_WORDS, MANIFEST, BenchmarkIndex, BenchmarkOverlapError,
                                        find_overlaps, manifest_from_training, manifest_texts, prompt_entries,
                                        read_manifest, refuse_benchmark_overlap, spec_bench_texts, write_manifest)
from specchat.training.prompts import TrainingPrompt, first_round_prompts, second_round_prompts
from specchat.training.varied import fourth_round_prompts, third_round_prompts

MODELS = Path(__file__).resolve().parent.parent / "resources" / "models"
SHIPPED = ("smollm2-draft", "smollm2-eagle")
SUITE = default_prompt_suite().read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def spec_bench():
    return spec_bench_texts()


@pytest.fixture(scope="module")
def index(spec_bench):
    return BenchmarkIndex(spec_bench)


def shipped(name):
    folder = MODELS / name
    head, entries = read_manifest(folder / MANIFEST)
    return json.loads((folder / "training.json").read_text(encoding="utf-8")), head, entries


def is_broad(summary):
    return (summary["settings"].get("head_rounds") or {}).get("data") == "broad"


def spec_bench_word_runs(n):
    """Independently of the module under test: every normalised Spec-Bench turn, and every run of n words."""
    turns = [turn for line in spec_bench_questions().read_text(encoding="utf-8").splitlines() if line.strip()
             for turn in json.loads(line)["turns"]]
    words = [re.findall(r"\w+", turn.lower()) for turn in turns]
    return {" ".join(w) for w in words}, {" ".join(w[i : i + n]) for w in words for i in range(len(w) - n + 1)}


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_manifest_counts_what_training_json_says(name):
    summary, head, entries = shipped(name)
    facts = summary["facts"]
    rounds = (["broad1", "broad2"] if is_broad(summary) else ["round1", "round2", "round3", "round4"]
              if "head" in summary["settings"] else ["round1", "round2"])
    assert [r["round"] for r in head["rounds"]] == rounds
    listed = Counter(entry["round"] for entry in entries)
    for record in head["rounds"]:
        round_name = record["round"]
        assert record["prompts"] == facts[f"{round_name}_prompts"]
        assert record["dropped_for_suite_overlap"] == facts[f"{round_name}_dropped_for_suite_overlap"]
        assert listed[round_name] == record["listed"]
        assert record["listed"] == record["prompts"] or record["not_listed"]  # a round not listed says why
    assert listed["round1"] == facts["round1_prompts"] > 1000  # the rounds that need no model are listed in full
    assert [e["id"] for e in entries] == [f"{r}-{i:04d}" for r in rounds for i in range(listed[r])]
    if name == "smollm2-draft":  # round 1 asks every chat, coding, math, qa and writing prompt the draft saw
        by_category = Counter(e["category"] for e in entries)
        assert by_category == {c: n for c, n in summary["replies_by_category"].items() if c in by_category}


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_entry_names_its_sources_and_licence(name):
    _, head, entries = shipped(name)
    for key, source in head["sources"].items():
        assert source["origin"] and source["licence"], key
    assert head["benchmark"]["name"] == "Spec-Bench"
    for entry in entries:
        assert entry["sources"] and set(entry["sources"]) <= head["sources"].keys(), entry["id"]
        licences = dict.fromkeys(head["sources"][key]["licence"] for key in entry["sources"])
        assert entry["licence"] == " AND ".join(licences), entry["id"]
        assert set(licences) <= {"Apache-2.0", "public domain (or CC0-1.0)", "CC0-1.0"}, entry["id"]
        assert entry["turns"] and all(turn.strip() for turn in entry["turns"]), entry["id"]


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_manifest_is_what_the_generators_make(name):
    summary, head, entries = shipped(name)
    if is_broad(summary):  # sampled by the target: the training run lists every prompt; its rounds are these
        made_head, made_entries = manifest_from_training(summary, SUITE)
        assert made_entries == [] and [r["round"] for r in made_head["rounds"]] == ["broad1", "broad2"]
        assert len(entries) == sum(summary["facts"][f"{r}_prompts"] for r in ("broad1", "broad2"))
        return
    assert manifest_from_training(summary, SUITE) == (head, entries)


def test_the_broad_head_manifest_quotes_its_documents_whole():
    from specchat.training.documents import FRENCH, PEPS, load_documents

    summary, head, entries = shipped("smollm2-eagle")
    if not is_broad(summary):
        pytest.skip("the shipped head is not trained on the broad data")
    passages = {doc["text"] for doc in load_documents(PEPS)}
    paragraphs = {doc["text"] for doc in load_documents(FRENCH)}
    for entry in entries:
        if "python/peps" in entry["sources"]:
            assert any(passage in entry["turns"][-1] for passage in passages), entry["id"]
        if "python-docs-fr" in entry["sources"]:
            assert entry["turns"][-1].split("\n\n", 1)[1] in paragraphs, entry["id"]
    kinds = Counter(entry["category"] for entry in entries)
    assert set(kinds) >= {"chat", "advice", "writing", "coding", "math", "knowledge", "documents", "translation"}


@pytest.mark.parametrize("name", SHIPPED)
def test_no_shipped_prompt_overlaps_spec_bench(name, index):
    _, _, entries = shipped(name)
    texts = list(manifest_texts(entries))
    assert len(texts) == len(entries)
    assert find_overlaps(texts, index) == []
    whole, runs = spec_bench_word_runs(CONTAMINATION_WORDS)
    for text_id, text in texts:
        words = re.findall(r"\w+", text.lower())
        assert " ".join(words) not in whole, text_id
        assert not any(" ".join(words[i : i + CONTAMINATION_WORDS]) in runs
                       for i in range(len(words) - CONTAMINATION_WORDS + 1)), text_id


@pytest.mark.parametrize("passages", [1, 300, 1500])
def test_the_rounds_built_on_replies_add_no_spec_bench_text_whatever_the_replies(passages, index):
    """Rounds 2 and 4 are not listed in the shipped manifests: their text besides the target's replies (templates,
    synthetic documents, follow-ups) shares nothing with Spec-Bench, for several numbers of replies."""
    replies = [f"reply {i}" for i in range(passages)]
    first, third = first_round_prompts(300, seed=0), third_round_prompts(200, seed=0)
    conversations = [(p.text, reply) for p, reply in zip(first + third, replies)]
    second = second_round_prompts(replies, 600, seed=0)
    fourth = fourth_round_prompts(conversations, replies[: passages // 3], 600, seed=0)
    texts = [(f"prompt {i}", fragment) for i, p in enumerate(second + fourth)
             for fragment in re.split(r"\{reply[^}]*\}", p.template or p.text) if fragment.strip()]
    assert len(texts) > 500 and find_overlaps(texts, index) == []


def test_the_pipeline_manifest_records_templates_and_parents():
    first = first_round_prompts(30, seed=0)
    replies = {p.text: f"Reply number {i}: tides rise twice a day.  " for i, p in enumerate(first)}
    parents = {key: f"round1-{i:04d}" for i, p in enumerate(first)
               for key in ((None, replies[p.text].strip()), (p.text, replies[p.text].strip()))}
    passages = [replies[p.text].strip() for p in first]
    conversations = [(p.text, replies[p.text].strip()) for p in first]
    second = second_round_prompts(passages, 30, seed=0)
    fourth = fourth_round_prompts(conversations, [], 30, seed=0)
    entries = prompt_entries([("round1", first), ("round2", second), ("round4", fourth)], parents,
                             {"prompts.py": "A", "varied.py": "A", "target replies": "B"})
    by_id = {e["id"]: e for e in entries}
    templated = [(e, p) for e, p in zip(entries[30:60], second) if "template" in e]
    followed = [(e, p) for e, p in zip(entries[60:], fourth) if p.history]
    assert templated and followed
    for entry, prompt in templated:
        reply = replies[by_id[entry["parent"]]["turns"][0]].strip()
        assert entry["template"].replace("{reply}", reply) == prompt.text
        assert entry["sources"] == ["prompts.py", "target replies"] and entry["licence"] == "A AND B"
    for entry, prompt in followed:
        assert entry["turns"] == [prompt.history[0], prompt.text]
        assert by_id[entry["parent"]]["turns"] == [prompt.history[0]]


def test_the_check_flags_a_planted_spec_bench_question(spec_bench, index):
    bench = dict(spec_bench)
    question = bench["spec-bench q81 turn 1"]
    shouted = "  " + question.upper().replace(" ", "   \n") + "  "
    assert [(o.benchmark, o.kind) for o in index.overlaps("mine", shouted)] == [("spec-bench q81 turn 1", "same text")]
    embedded = f"Before you start, read this carefully. {question} Then add a title, please."
    assert [(o.benchmark, o.kind) for o in index.overlaps("mine", embedded)] == [("spec-bench q81 turn 1",
                                                                                    "shared run")]
    short = bench["spec-bench q350 turn 1"]  # "What harry potter movie came out in 2008?": under 13 words
    assert [(o.benchmark, o.kind) for o in index.overlaps("mine", f"Quiz time. {short} Answer briefly.")] == [
        ("spec-bench q350 turn 1", "benchmark text inside")]
    assert index.overlaps("mine", "What harry potter movie came out in 2009?") == []


def test_the_check_flags_a_planted_run_of_13_words_and_not_of_12(spec_bench, index):
    article = dict(spec_bench)["spec-bench q241 turn 1"].split()
    run = article[40 : 40 + CONTAMINATION_WORDS]
    found = index.overlaps("mine", "My own words come first. " + " ".join(run) + " And mine come last.")
    assert [(o.benchmark, o.kind) for o in found] == [("spec-bench q241 turn 1", "shared run")]
    assert index.overlaps("mine", "My own words come first. " + " ".join(run[:-1]) + " And mine come last.") == []


def test_training_refuses_a_prompt_that_overlaps_spec_bench(spec_bench, index):
    question = dict(spec_bench)["spec-bench q81 turn 1"]
    clean = first_round_prompts(50, seed=0)
    refuse_benchmark_overlap("round1", clean, index)  # no overlap: nothing raised
    for planted in (TrainingPrompt("writing", question),
                    TrainingPrompt("rewriting", f"Rewrite this text in a calm tone:\n\n{question}"),
                    TrainingPrompt("chat", "Please shorten it.", history=(question, "A reply."))):
        refusal = "refusing to train on 1 prompt turn of round1 that overlaps Spec-Bench: round1-0050"
        with pytest.raises(BenchmarkOverlapError, match=refusal):
            refuse_benchmark_overlap("round1", clean + [planted], index)


def test_the_pipeline_checks_every_round_against_spec_bench(tmp_path):
    from specchat.models.sources import ModelSource
    from specchat.training.pipeline import Pipeline, settings_for

    pipeline = Pipeline(ModelSource.parse("embedded"), tmp_path / "out", tmp_path / "work", settings_for("quick"),
                        SUITE, log=lambda line: None)
    question = json.loads(spec_bench_questions().read_text(encoding="utf-8").splitlines()[100])["turns"][0]
    assert len(pipeline._apart_from_suite("round1", first_round_prompts(20, seed=0))) > 10
    with pytest.raises(BenchmarkOverlapError):
        pipeline._apart_from_suite("round3", [TrainingPrompt("summarization", question)])


def test_requests_the_target_wrote_are_dropped_where_they_overlap_spec_bench(tmp_path):
    from specchat.models.sources import ModelSource
    from specchat.training.pipeline import Pipeline, settings_for

    pipeline = Pipeline(ModelSource.parse("embedded"), tmp_path / "out", tmp_path / "work", settings_for("quick"),
                        SUITE, log=lambda line: None)
    question = json.loads(spec_bench_questions().read_text(encoding="utf-8").splitlines()[100])["turns"][0]
    clean = TrainingPrompt("chat", "Can you suggest a weekend plan for a rainy day in a small town?")
    sampled = [clean, TrainingPrompt("chat", f"Quick one. {question}"),
               TrainingPrompt("chat", "And shorter?", history=(question, "A reply."))]
    assert pipeline._apart_from_benchmark("broad1", sampled) == [clean]
    assert pipeline.facts["broad1_dropped_for_benchmark_overlap"] == 2


def test_manifest_check_on_the_command_line(tmp_path, capsys):
    from specchat.cli import main

    assert main(["manifest", "check"]) == 0
    assert capsys.readouterr().out.count("no overlaps") == 2
    question = json.loads(spec_bench_questions().read_text(encoding="utf-8").splitlines()[0])["turns"][0]
    lines = [{"manifest": "planted"}, {"id": "round1-0000", "turns": [f"Hi! {question}"]}]
    write_manifest(tmp_path / MANIFEST, lines[0], lines[1:])
    assert main(["manifest", "check", str(tmp_path)]) == 1
    assert "round1-0000 turn 1 and spec-bench q81 turn 1: shared run" in capsys.readouterr().out
