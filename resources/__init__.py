"""Data files shipped with specchat, installed as the package `specchat.resources` and read with importlib.resources
(so they are found the same way in a checkout, an installed wheel and a frozen bundle)."""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable


def resource(*parts: str) -> Traversable:
    return resources.files(__name__).joinpath(*parts)


def default_prompt_suite() -> Traversable:
    return resource("prompts", "suite.jsonl")


def doc_suite_texts() -> Traversable:
    """The documents suite's proofreading part: 60 learner texts of HaifaCLG/ILCoWE, gzipped JSONL
    (doc_suite/PROVENANCE.md)."""
    return resource("doc_suite", "ilcowe-texts.jsonl.gz")


def doc_suite_documents() -> Traversable:
    """The documents suite's long-document part: 60 documents of SQuAD 2.0's dev articles, each with a question,
    gzipped JSONL (doc_suite/PROVENANCE.md)."""
    return resource("doc_suite", "squad2-documents.jsonl.gz")


def human_eval_problems() -> Traversable:
    """openai/human-eval's 164 problems, gzipped JSONL (human_eval/PROVENANCE.md)."""
    return resource("human_eval", "HumanEval.jsonl.gz")


def human_eval_fix_problems() -> Traversable:
    """bigcode-project/octopack's HumanEvalFix: HumanEval's 164 problems with a bug inserted in each, gzipped JSONL
    (humanevalfix/PROVENANCE.md)."""
    return resource("humanevalfix", "humanevalpack-python.jsonl.gz")


def quixbugs_programs() -> Traversable:
    """jkoppel/QuixBugs's 40 Python programs, each with a one-line bug, gzipped JSONL (quixbugs/PROVENANCE.md)."""
    return resource("quixbugs", "python_programs.jsonl.gz")


def spec_bench_questions() -> Traversable:
    """Spec-Bench's 480 questions (spec_bench/PROVENANCE.md)."""
    return resource("spec_bench", "question.jsonl")
