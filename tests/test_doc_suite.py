"""`specchat bench --suite documents`: the vendored learner texts and long documents (resources/doc_suite), their
provenance and licence, the prompts built from them, the seeded sample, and the builder that drew them."""

import gzip
import hashlib
import json
import random

from specchat import bench
from specchat.bench.doc_suite import (DOCUMENT_TOKENS, TEXT_WORDS, TEXTS_PER_SUBCORPUS, SquadParagraph,
                                      document_windows, squad_article, write_jsonl_gz)
from specchat.bench.suites import DOCUMENT_QA_REQUEST, PROOFREAD_REQUEST
from specchat.cli import build_parser
from specchat.commands.bench import _prompts
from specchat.resources import doc_suite_documents, doc_suite_texts, resource


def _records(traversable) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(traversable.read_bytes()).decode("utf-8").splitlines()]


def _suite(*options: str) -> list:
    return _prompts(build_parser().parse_args(["bench", "--suite", "documents", *options]), bench)


def test_vendored_files_match_the_checksums_their_provenance_states_and_carry_their_licence():
    provenance = resource("doc_suite", "PROVENANCE.md").read_text(encoding="utf-8")
    for part in (doc_suite_texts(), doc_suite_documents()):
        data = part.read_bytes()
        assert hashlib.sha256(data).hexdigest() in provenance
        assert hashlib.sha256(gzip.decompress(data)).hexdigest() in provenance
        assert part.name in provenance
    licence = resource("doc_suite", "LICENSE").read_bytes()
    assert hashlib.sha256(licence).hexdigest() in provenance
    assert licence.startswith(b"Attribution-ShareAlike 4.0 International")
    assert b"Attribution-ShareAlike 4.0 International Public License" in licence and b"b. ShareAlike." in licence
    for named in ("HaifaCLG/ILCoWE", "9b704d273ca457321e77213ffc3f98995d987a12", "rajpurkar/SQuAD-explorer",
                  "e0c66cfec263165fb3c15cb76a22175e371b71d7", "CC BY-SA 4.0"):
        assert named in provenance


def test_learner_texts_are_whole_texts_within_their_bounds():
    texts = _records(doc_suite_texts())
    assert len(texts) == sum(TEXTS_PER_SUBCORPUS.values()) == 60
    assert len({t["id"] for t in texts}) == 60 and [int(t["id"][7:]) for t in texts] == sorted(
        int(t["id"][7:]) for t in texts)
    for subcorpus, count in TEXTS_PER_SUBCORPUS.items():
        assert sum(t["subcorpus"] == subcorpus for t in texts) == count
    for text in texts:
        assert TEXT_WORDS[0] <= len(text["text"].split()) == text["words"] <= TEXT_WORDS[1]
        assert text["text"] == text["text"].strip() and text["source"] == f"texts/{text['id'][7:]}.txt"


def test_long_documents_hold_their_question_and_its_answers():
    documents = _records(doc_suite_documents())
    assert len(documents) == 60 and len({d["id"] for d in documents}) == 60
    assert len({d["title"] for d in documents}) >= 20  # spread over the dev set's articles, not a few
    for document in documents:
        assert DOCUMENT_TOKENS[0] <= document["tokens"] <= DOCUMENT_TOKENS[1]
        assert document["document"].startswith(document["title"] + "\n\n")
        assert document["id"] == f"{document['title']}#{document['paragraphs'][0]}-{document['paragraphs'][1]}"
        assert document["question"].strip() and document["answers"]
        assert all(answer in document["document"] for answer in document["answers"])  # extractive
    assert sorted(d["tokens"] for d in documents)[-1] - sorted(d["tokens"] for d in documents)[0] > 1000


def test_the_suite_builds_both_parts_as_one_turn_prompts():
    texts, documents = _records(doc_suite_texts()), _records(doc_suite_documents())
    every = _suite()
    assert len(every) == 120 and {p.category for p in every} == {"proofread", "document-qa"}
    proofread = [p for p in every if p.category == "proofread"]
    for record, prompt in zip(texts, proofread):
        assert prompt.question_id == record["id"] and len(prompt.turns) == 1
        assert prompt.turns[0] == f"{PROOFREAD_REQUEST}\n\n{record['text']}"
        assert prompt.turns[0].startswith("Correct the spelling and grammar of this text and return the whole text")
    qa = [p for p in every if p.category == "document-qa"]
    for record, prompt in zip(documents, qa):
        assert prompt.question_id == record["id"]
        assert prompt.turns[0].startswith(DOCUMENT_QA_REQUEST + "\n\n" + record["document"])
        assert prompt.turns[0].endswith(f"\n\nQuestion: {record['question']}")
    assert [p.question_id for p in _suite("--categories", "document-qa", "--limit", "2")] == [
        d["id"] for d in documents[:2]]


def test_per_task_takes_the_same_seeded_sample_of_each_part_every_time():
    sampled = _suite("--per-task", "2")
    assert sampled == _suite("--per-task", "2")
    # pinned: a change to the seed, the files or the sampling shows here, and would make old runs incomparable
    assert [(p.category, p.question_id) for p in sampled] == [
        ("proofread", "ilcowe-103"), ("proofread", "ilcowe-932"),
        ("document-qa", "European Union law#34-37"), ("document-qa", "Force#11-19")]
    five = _suite("--per-task", "5")
    assert [sum(p.category == c for p in five) for c in ("proofread", "document-qa")] == [5, 5]


def test_no_training_document_shares_a_run_of_words_with_the_suite():
    from specchat.training.documents import FRENCH, PEPS, load_documents
    from specchat.training.manifest import BenchmarkIndex, find_overlaps

    suite = [(t["id"], t["text"]) for t in _records(doc_suite_texts())] + [
        (d["id"], d["document"]) for d in _records(doc_suite_documents())]
    training = [(p["id"], p["text"]) for p in load_documents(PEPS) + load_documents(FRENCH)]
    assert find_overlaps(training, BenchmarkIndex(suite)) == []


EXPLORER_PAGE = """<html><body><h1 id="title">Black_Death</h1><div class="para-wrap"><pre>The plague &amp; its
spread.</pre><div class="qa-wrap" data-id="q1"><p> <strong class="question">Where did it spread?</strong></p>
<ul><li><p><i>Ground Truth Answers: </i><span class="answer">Europe</span><span class="answer">to Europe</span></p>
</li><li class="prediction-holder"><p><i>Prediction: </i><span class="prediction"></span></p></li></ul></div>
<div class="qa-wrap" data-id="q2"><p> <strong class="question">When did it end?</strong></p><ul><li><p>
<i>Ground Truth Answers: </i><span class="no-answer">&lt;No Answer&gt;</span></p></li></ul></div></div>
<div class="para-wrap"><pre>A second paragraph.</pre></div></body></html>"""


def test_an_explorer_page_reads_as_its_paragraphs_questions_and_answers():
    title, paragraphs = squad_article(EXPLORER_PAGE)
    assert title == "Black Death"
    assert [p.context for p in paragraphs] == ["The plague & its\nspread.", "A second paragraph."]
    assert paragraphs[0].questions == [("q1", "Where did it spread?", ["Europe", "to Europe"]),
                                       ("q2", "When did it end?", [])]  # unanswerable: no answers
    assert paragraphs[1].questions == []


def test_windows_are_runs_of_whole_paragraphs_within_the_drawn_sizes():
    words = lambda text: len(text.split())  # noqa: E731 - a token count the test can reason about
    paragraphs = [SquadParagraph(" ".join([f"w{i}"] * 400)) for i in range(40)]
    windows = document_windows("Title", paragraphs, words, random.Random(0))
    assert windows and all(DOCUMENT_TOKENS[0] <= tokens <= DOCUMENT_TOKENS[1] for *_, tokens in windows)
    assert all(document == "\n\n".join(["Title", *(p.context for p in paragraphs[first:last + 1])])
               for first, last, document, _ in windows)
    assert all(a[1] < b[0] for a, b in zip(windows, windows[1:]))  # in order, never overlapping
    assert windows == document_windows("Title", paragraphs, words, random.Random(0))
    too_long = [SquadParagraph(" ".join(["x"] * (DOCUMENT_TOKENS[1] + 1)))]
    assert document_windows("T", too_long, words, random.Random(0)) == []


def test_the_builder_writes_the_same_bytes_each_time(tmp_path):
    records = [{"id": "a", "text": "Café\nà la carte"}, {"id": "b", "text": "x"}]
    write_jsonl_gz(records, tmp_path / "one.jsonl.gz")
    write_jsonl_gz(records, tmp_path / "two.jsonl.gz")
    assert (tmp_path / "one.jsonl.gz").read_bytes() == (tmp_path / "two.jsonl.gz").read_bytes()
    assert [json.loads(line) for line in gzip.decompress((tmp_path / "one.jsonl.gz").read_bytes()).decode(
        "utf-8").splitlines()] == records


def test_the_suite_is_offered_on_the_command_line():
    from specchat.commands.bench import SUITES

    assert "documents" in SUITES and build_parser().parse_args(["bench", "--suite", "documents"]).suite == "documents"
