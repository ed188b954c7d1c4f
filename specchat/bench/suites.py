"""What `specchat bench` runs: its prompts (Spec-Bench JSONL, HumanEval, HumanEvalFix, QuixBugs, the documents
suite, Spec-Bench's stratified sample) and its modes (`--modes`), each checked before any model loads."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Iterable

from ..core.errors import PromptError, SpecchatError
from ..core.run_kind import HF_MODES, RunKind
from ..core.vocabulary import DRAFTER_KEYS, PLAIN
from .peer_server import SERVER_MODES, server_binary
from .peers import PEER_MODES, require_llama_cpp

MODES = ("default", *DRAFTER_KEYS, *HF_MODES, *PEER_MODES, *SERVER_MODES)  # run_kind.RunKind reads each

# Spec-Bench's six tasks; MT-bench's eight categories are its multi-turn task.
MT_BENCH_CATEGORIES = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


@dataclass(frozen=True)
class BenchPrompt:
    question_id: int | str
    category: str
    turns: tuple[str, ...]


def load_prompts(lines: Iterable[str], source: str, limit: int | None = None,
                 categories: set[str] | None = None) -> list[BenchPrompt]:
    """Spec-Bench JSONL: {"question_id": ..., "category": ..., "turns": [user message, ...]} per line."""
    prompts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise PromptError(f"{source}, line {number}: not valid JSON ({error.msg})") from error
        prompts.append(_bench_prompt(record, f"{source}, line {number}"))
    return select_prompts(prompts, source, limit, categories)


def human_eval_prompts(jsonl: str) -> list[BenchPrompt]:
    """HumanEval's problems as one-turn chat prompts: each asks for the function its signature and docstring begin
    (the code a coder model writes, where lookup and drafts pay most); category "humaneval"."""
    prompts = []
    for line in jsonl.splitlines():
        if line.strip():
            record = json.loads(line)
            number = int(str(record["task_id"]).rsplit("/", 1)[-1])
            prompts.append(BenchPrompt(number, "humaneval", [
                "Complete this Python function. Reply with the whole function in one code block.\n\n"
                f"```python\n{record['prompt']}```"]))
    return prompts


HUMAN_EVAL_FIX_REQUEST = "Fix the bug in this Python function. Reply with the whole fixed function in one code block."


def human_eval_fix_prompts(jsonl: str) -> list[BenchPrompt]:
    """HumanEvalFix's buggy functions (bigcode-project/octopack's HumanEvalPack, Python) as one-turn chat prompts:
    each gives a whole buggy function (the record's `prompt`, its imports, signature and docstring, then its
    `buggy_solution`, the body with one bug inserted) and asks for it fixed, a code edit whose reply copies most of
    its prompt (where lookup pays most); category "humanevalfix", question_id the task's number."""
    prompts = []
    for line in jsonl.splitlines():
        if line.strip():
            record = json.loads(line)
            number = int(str(record["task_id"]).rsplit("/", 1)[-1])
            prompts.append(BenchPrompt(number, "humanevalfix", (
                f"{HUMAN_EVAL_FIX_REQUEST}\n\n```python\n{record['prompt']}{record['buggy_solution']}```",)))
    return prompts


QUIXBUGS_REQUEST = "Fix the bug in this Python program. Reply with the whole fixed program in one code block."


def quixbugs_prompts(jsonl: str) -> list[BenchPrompt]:
    """QuixBugs's buggy programs (jkoppel/QuixBugs, python_programs/) as one-turn chat prompts: each gives a whole
    program with a one-line defect (its docstring included, as the file has it) and asks for it fixed, a second code
    edit suite beside HumanEvalFix that the K policy was never tuned on; category "quixbugs", question_id the
    program's name."""
    prompts = []
    for line in jsonl.splitlines():
        if line.strip():
            record = json.loads(line)
            prompts.append(BenchPrompt(record["name"], "quixbugs",
                                       (f"{QUIXBUGS_REQUEST}\n\n```python\n{record['program'].strip()}\n```",)))
    return prompts


PROOFREAD_REQUEST = "Correct the spelling and grammar of this text and return the whole text, nothing else:"
DOCUMENT_QA_REQUEST = ("Answer the question after this document from the document. First quote, word for word, the "
                       "sentence of the document that holds the answer, then give the answer in a few words.")


def proofread_prompts(jsonl: str) -> list[BenchPrompt]:
    """The documents suite's proofreading part (resources/doc_suite, ILCoWE's learner texts) as one-turn chat
    prompts: each gives a whole text of 120-300 words with its writer's own errors and asks it back corrected and
    whole, a prose edit whose reply copies most of its prompt; category "proofread", question_id the record's id."""
    return [BenchPrompt(record["id"], "proofread", (f"{PROOFREAD_REQUEST}\n\n{record['text']}",))
            for record in (json.loads(line) for line in jsonl.splitlines() if line.strip())]


def document_qa_prompts(jsonl: str) -> list[BenchPrompt]:
    """The documents suite's long-document part (resources/doc_suite, SQuAD 2.0's dev articles) as one-turn chat
    prompts: each gives a document of 1,500-3,000 tokens (consecutive paragraphs of one article under its title),
    then a question whose answer is a span of it, and asks for the sentence that holds it quoted, then the answer;
    category "document-qa", question_id the record's id (title#first-last paragraph)."""
    return [BenchPrompt(record["id"], "document-qa", (
                f"{DOCUMENT_QA_REQUEST}\n\n{record['document']}\n\nQuestion: {record['question']}",))
            for record in (json.loads(line) for line in jsonl.splitlines() if line.strip())]


def select_prompts(prompts: list[BenchPrompt], source: str, limit: int | None = None,
                   categories: set[str] | None = None) -> list[BenchPrompt]:
    """The prompts of the given categories, at most `limit` of them."""
    if categories:
        unknown = categories - {p.category for p in prompts}
        if unknown:
            raise PromptError(f"no prompts in {source} have the categories {', '.join(sorted(unknown))}")
        prompts = [p for p in prompts if p.category in categories]
    if not prompts:
        raise PromptError(f"{source} has no prompts")
    return prompts[:limit] if limit else prompts


def spec_bench_sample(prompts: list[BenchPrompt], per_task: int | None, seed: int = 0) -> list[BenchPrompt]:
    """Spec-Bench grouped by its six tasks (MT-bench's categories become multi_turn); per_task: a fixed, seeded
    sample of that many questions per task (stratified), in the file's order."""
    tasked = [BenchPrompt(p.question_id, "multi_turn" if p.category in MT_BENCH_CATEGORIES else p.category, p.turns)
              for p in prompts]
    if per_task is None:
        return tasked
    keep: set[int] = set()
    for task in dict.fromkeys(p.category for p in tasked):  # Spec-Bench's six, the documents' two, or one
        indices = [i for i, p in enumerate(tasked) if p.category == task]
        keep.update(random.Random(f"{seed}:{task}").sample(indices, min(per_task, len(indices))))
    return [p for i, p in enumerate(tasked) if i in keep]


def _bench_prompt(record: object, where: str) -> BenchPrompt:
    if not isinstance(record, dict):
        raise PromptError(f"{where}: expected a JSON object")
    missing = [key for key in ("question_id", "category", "turns") if key not in record]
    if missing:
        raise PromptError(f"{where}: missing {', '.join(missing)}")
    turns, question_id, category = record["turns"], record["question_id"], record["category"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise PromptError(f"{where}: 'turns' must be a non-empty list of non-empty strings")
    # Checked here, before any model runs: a list or null id used to fail mid-run, losing every record made so far.
    if isinstance(question_id, bool) or not isinstance(question_id, (int, str)) or not str(question_id).strip():
        raise PromptError(f"{where}: 'question_id' must be a number or a non-empty string, not {question_id!r}")
    if not isinstance(category, str) or not category.strip():
        raise PromptError(f"{where}: 'category' must be a non-empty string, not {category!r}")
    return BenchPrompt(question_id, category, tuple(turns))


def parse_modes(text: str, has_draft: bool, has_universal_draft: bool = False) -> list[str]:
    """`--modes` as a list, our plain decoding first, each once; SpecchatError for an unknown mode, one that needs
    the missing draft model, or a peer not installed or built (said before any model loads)."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise SpecchatError(f"unknown mode {', '.join(unknown) or '(none given)'}; choose from {', '.join(MODES)}")
    kinds = [RunKind.parse(m) for m in modes]
    # llama-server's draft is a GGUF file of its own (--peer-draft), and the universal mode may have its own draft
    if not has_draft and any(k.needs_draft_model and not k.is_llama_server
                             and not (has_universal_draft and k.drafter == "universal") for k in kinds):
        raise SpecchatError("the model, hybrid and hf-model modes need a draft model (give --draft SRC)")
    if any(k.is_llama_cpp for k in kinds):
        require_llama_cpp()
    if any(k.is_llama_server for k in kinds):
        server_binary()  # before any model loads: `make peers` builds it
    if PLAIN not in modes:
        modes.insert(0, PLAIN)  # every speedup and identity check is against our plain decoding
    return list(dict.fromkeys(modes))
