"""The manifest of a drafter's training prompts, and the check that none of them overlaps the benchmark.

`specchat train-draft` and `specchat train-head` write `manifest.jsonl.gz` next to `training.json`. It is JSON lines:
the first line describes the manifest (the settings that decide the prompts, each round's generator and counts,
every source of text with its origin and licence, the benchmark check); every other line is one prompt:

  id        "round1-0042": its round and its place among that round's prompts, in the order the target was asked
  round, category
  turns     its user turns, when each is fixed text (no model output in it). A follow-up has two: its parent's
            prompt, then its own; the target's reply to the parent came between them.
  template  instead of turns, for a prompt that embeds the target's reply to its parent: the prompt's text with
            {reply} where that reply (stripped) stands, or {reply with typos} (the reply with about one word in
            twelve misspelled by varied._with_typos, seeded)
  parent    the id of the prompt whose reply this one builds on
  sources   keys of the first line's sources; licence: the licence of the entry's text

Rounds 1 and 3 come from a seed alone; rounds 2 and 4 also from the target's replies to earlier rounds, so the
same command with the same target and settings asks the same prompts again given the same replies (greedy
decoding: the same on the same machine; batched bfloat16 arithmetic may differ elsewhere). The head's broad rounds
(broad1, broad2: training/broad.py) hold requests the target wrote itself, so only a training run can list them;
it lists every one in full, with the real documents they quote (sources "python/peps", "python-docs-fr").

`find_overlaps` checks texts against a benchmark the usual way for contamination (GPT-3's 13-gram test): the same
text after normalisation (lower case, words only, so case, whitespace and punctuation are ignored), any shared run
of 13 words, or a benchmark text shorter than that occurring whole inside a training text. The pipeline refuses to
train on a prompt that overlaps Spec-Bench (`refuse_benchmark_overlap`).

`python -m specchat.training.manifest FOLDER...` writes the manifest of a drafter from its `training.json`
without running the target (how the shipped drafters' manifests were made): rounds 1 and 3 in full, rounds 2 and
4 as their generator and counts, since their prompts depend on replies that only running the target makes again.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

from ..core.errors import SpecchatError
from .prompts import TrainingPrompt, drop_suite_overlap, first_round_prompts, suite_texts
from .varied import third_round_prompts

MANIFEST = "manifest.jsonl.gz"  # gzip: a tenth of the size, and the draft folder stays under its 25 MB budget
CONTAMINATION_WORDS = 13
REPLIES = "target replies"
# The settings that decide which prompts are asked (the rest of training.json only shapes training).
PROMPT_SETTINGS = ("seed", "first_round", "second_round", "passage_tokens", "head_rounds")
BENCHMARK_SOURCES = ("MT-bench", "WMT14 de-en", "CNN/DailyMail", "Natural Questions", "GSM8K", "DPR")


def sources(target: str, target_licence: str, data: str = "templated") -> dict[str, dict[str, str]]:
    """Every source of training-prompt text of the `data` kind ("templated": the draft model's and the earlier
    heads'; "broad": the head's broad rounds): where it comes from and under which licence."""
    written = "written for specchat; no text from any dataset or benchmark"
    table = {
        "prompts.py": {
            "origin": "specchat/training/prompts.py: templates and word lists (topics, people, tones, forms, coding "
                      "tasks, math word problems), and synthetic documents built from its word lists and random "
                      f"numbers (orders, team directories, server logs, club notices); {written}",
            "licence": "Apache-2.0", "licence_note": "specchat's own licence (LICENSE)"},
        "varied.py": {
            "origin": "specchat/training/varied.py: templates and word lists (countries, titles of well-known books "
                      "and paintings, named but never quoted, everyday situations, products, events), and templated "
                      f"meeting transcripts, email threads, receipts, CVs and volunteer lists; {written}",
            "licence": "Apache-2.0", "licence_note": "specchat's own licence (LICENSE)"},
        "broad.py": {
            "origin": "specchat/training/broad.py: the system prompts that steer which kind of request the target "
                      f"writes, and short task phrasings (summarize, translate) put around real documents; {written}",
            "licence": "Apache-2.0", "licence_note": "specchat's own licence (LICENSE)"},
        "target prompts": {
            "origin": f"user turns the target model ({target}) wrote itself: its chat template rendered up to where "
                      "a user turn begins (after a steering system prompt, a passage, or an earlier conversation) "
                      "and the rest sampled (temperature 1, top-p 0.98, seeded); listed here in full",
            "licence": target_licence, "licence_note": "the target model's licence"},
        "python/peps": {
            "origin": "prose passages of Python Enhancement Proposals (github.com/python/peps), each placed in the "
                      "public domain by its Copyright section (resources/documents/peps.jsonl.gz, PROVENANCE.md)",
            "licence": "public domain (or CC0-1.0)", "licence_note": "as each PEP states"},
        "python-docs-fr": {
            "origin": "paragraphs of the French translation of Python's documentation (github.com/python/"
                      "python-docs-fr: tutorial, FAQ, how-tos; resources/documents/python-docs-fr.jsonl.gz)",
            "licence": "CC0-1.0", "licence_note": "contributed under CC0 (the project's README)"},
        REPLIES: {
            "origin": f"the target model's ({target}) own greedy replies to the parent prompts listed here, made by "
                      "the training run and not stored: running the target on the parent prompt makes them again",
            "licence": target_licence, "licence_note": "the target model's licence"},
    }
    kept = ("prompts.py", "varied.py") if data == "templated" else ("broad.py", "target prompts", "python/peps",
                                                                      "python-docs-fr")
    return {key: value for key, value in table.items() if key in kept or key == REPLIES}


# Each round: its generator, the source of its fixed text, its arguments and its inputs, from the settings.
ROUNDS = {
    "round1": ("specchat.training.prompts.first_round_prompts", "prompts.py"),
    "round2": ("specchat.training.prompts.second_round_prompts", "prompts.py"),
    "round3": ("specchat.training.varied.third_round_prompts", "varied.py"),
    "round4": ("specchat.training.varied.fourth_round_prompts", "varied.py"),
    "broad1": ("specchat.training.broad.first_broad_prompts", "target prompts"),
    "broad2": ("specchat.training.broad.follow_up_prompts", "target prompts"),
}


def round_record(name: str, settings: Mapping, prompts: int, dropped: int, listed: int) -> dict:
    """What a round is: its generator with its arguments and inputs, and how many prompts it asked."""
    generator, source = ROUNDS[name]
    seed, extra = settings["seed"], settings.get("head_rounds") or {}
    arguments, inputs = {
        "round1": ({"count": settings["first_round"], "seed": seed}, None),
        "round2": ({"count": settings["second_round"], "seed": seed},
                   "passages: the target's replies to round1 prompts that have {} to {} tokens, stripped, in round1 "
                   "order".format(*settings["passage_tokens"])),
        "round3": ({"count": extra.get("third_round"), "seed": seed}, None),
        "round4": ({"count": extra.get("fourth_round"), "seed": seed},
                   "conversations: (prompt, reply) for the round1 then round3 prompts whose replies have {} to {} "
                   "tokens; documents: the replies of {} to {} tokens to round3 prompts of category writing".format(
                       *extra.get("conversation_tokens", ("?", "?")), *extra.get("document_tokens", ("?", "?")))),
        "broad1": ({name: extra.get(name) for name in ("requests", "documents", "translations")} | {"seed": seed},
                   "the target, sampling user turns"),
        "broad2": ({"count": extra.get("follow_ups"), "seed": seed},
                   "conversations: (prompt, reply) for the broad1 requests whose replies have {} to {} tokens".format(
                       *extra.get("conversation_tokens", ("?", "?")))),
    }[name]
    record = {"round": name, "generator": generator, "arguments": arguments, "inputs": inputs, "source": source,
              "prompts": prompts, "dropped_for_suite_overlap": dropped, "listed": listed}
    if listed < prompts:
        commands = "`specchat train-draft` or `train-head`" if name == "round2" else "`specchat train-head`"
        record["not_listed"] = ("its prompts depend on the target's replies to earlier rounds (they embed them or "
                                "follow up on them, and every later random choice follows the picks among them), "
                                f"which only running the target makes again; {commands} with these settings lists "
                                "every prompt in the manifest it writes")
    return record


def prompt_entries(rounds: Sequence[tuple[str, Sequence[TrainingPrompt]]], parents: Mapping[tuple, str],
                   licences: Mapping[str, str]) -> list[dict]:
    """One entry per prompt (see the module docstring). `parents` maps (None, reply) and (prompt text, reply) to
    the id of the prompt that reply answers; `licences` maps each source key to its licence."""
    entries = []
    for name, prompts in rounds:
        for i, prompt in enumerate(prompts):
            entry = {"id": prompt_id(name, i), "round": name, "category": prompt.category}
            used = list(prompt.sources) or [ROUNDS[name][1]]
            if prompt.template is not None:
                entry.update(template=prompt.template, parent=parents[(None, prompt.reply)])
                used.append(REPLIES)
            elif prompt.history:
                parent = parents[(prompt.history[-2], prompt.history[-1])]
                entry.update(turns=[*prompt.history[0::2], prompt.text], parent=parent)
                used += ([] if prompt.sources else [ROUNDS[parent.split("-")[0]][1]]) + [REPLIES]
            else:
                entry["turns"] = [prompt.text]
            used = list(dict.fromkeys(used))
            entry.update(sources=used, licence=" AND ".join(dict.fromkeys(licences[key] for key in used)))
            entries.append(entry)
    return entries


def prompt_id(round_name: str, index: int) -> str:
    return f"{round_name}-{index:04d}"


def header(made_by: str, target: str, settings: Mapping, rounds: list[dict], source_table: dict,
           written_by: str = "the training run") -> dict:
    return {
        "manifest": "the prompts this drafter was trained on (a held-out few of them were used only to evaluate it)",
        "format": "JSON lines: this description, then one line per prompt (specchat/training/manifest.py)",
        "drafter_made_by": made_by, "target": target, "written_by": written_by,
        "settings": {name: settings[name] for name in PROMPT_SETTINGS if name in settings},
        "rounds": rounds, "sources": source_table,
        "filters": "each round drops prompts sharing a run of 8 words with specchat's own prompt suite "
                   "(resources/prompts/suite.jsonl; prompts.drop_suite_overlap)",
        "benchmark": {"name": "Spec-Bench", "file": "resources/spec_bench/question.jsonl",
                      "excluded": "no generator reads Spec-Bench or any dataset its questions come from ("
                                  + ", ".join(BENCHMARK_SOURCES) + "): every text is from the sources above",
                      "check": f"no prompt has the same normalised text as a Spec-Bench turn, shares a run of "
                               f"{CONTAMINATION_WORDS} words with one, or contains a shorter one whole "
                               "(`specchat manifest check`)"},
    }


def write_manifest(path: Path, head: dict, entries: Iterable[dict]) -> None:
    """JSON lines, gzipped when the name ends in .gz (with no time stamp, so the same manifest gives the same
    bytes and a rebuilt one can be compared with the committed file)."""
    lines = [json.dumps(head, ensure_ascii=False)] + [json.dumps(e, ensure_ascii=False) for e in entries]
    data = ("\n".join(lines) + "\n").encode("utf-8")
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    Path(path).write_bytes(data)


def read_manifest(path: Path) -> tuple[dict, list[dict]]:
    data = Path(path).read_bytes()
    if str(path).endswith(".gz"):
        data = gzip.decompress(data)
    rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    return rows[0], rows[1:]


def manifest_texts(entries: Iterable[dict]) -> Iterator[tuple[str, str]]:
    """(id, text) for every fixed text of the entries: each user turn, and each template's text around its reply."""
    for entry in entries:
        for n, turn in enumerate(entry.get("turns", ()), 1):
            yield f"{entry['id']} turn {n}", turn
        for fragment in re.split(r"\{reply[^}]*\}", entry.get("template", "")):
            if fragment.strip():
                yield f"{entry['id']} template", fragment


# The overlap check.

def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def normalise(text: str) -> str:
    """Lower case, words only: case, whitespace and punctuation make no difference."""
    return " ".join(words(text))


@dataclass(frozen=True)
class Overlap:
    text: str  # the training text's id
    benchmark: str  # the benchmark text's id
    kind: str  # "same text", "shared run" or "benchmark text inside"
    words: str  # what they share, normalised

    def __str__(self) -> str:
        return f"{self.text} and {self.benchmark}: {self.kind} ({self.words[:120]!r})"


class BenchmarkIndex:
    """A benchmark's texts, normalised, their runs of n words, and those shorter than n words."""

    def __init__(self, texts: Iterable[tuple[str, str]], n: int = CONTAMINATION_WORDS):
        self.n = n
        self.whole: dict[str, str] = {}
        self.runs: dict[str, str] = {}
        self.short: list[tuple[str, str]] = []
        for text_id, text in texts:
            found = words(text)
            if not found:
                continue
            self.whole.setdefault(" ".join(found), text_id)
            if len(found) < n:
                self.short.append((text_id, f" {' '.join(found)} "))
            for run in _runs(found, n):
                self.runs.setdefault(run, text_id)

    def overlaps(self, text_id: str, text: str) -> list[Overlap]:
        """At most one overlap per benchmark text: the same text, else a shorter benchmark text inside this one,
        else the first shared run of n words."""
        found, joined = {}, normalise(text)
        if joined in self.whole:
            found[self.whole[joined]] = Overlap(text_id, self.whole[joined], "same text", joined)
        padded = f" {joined} "
        for bench_id, short in self.short:
            if short in padded and bench_id not in found:
                found[bench_id] = Overlap(text_id, bench_id, "benchmark text inside", short.strip())
        for run in _runs(joined.split(), self.n):
            bench_id = self.runs.get(run)
            if bench_id is not None and bench_id not in found:
                found[bench_id] = Overlap(text_id, bench_id, "shared run", run)
        return list(found.values())


def _runs(found: list[str], n: int) -> Iterator[str]:
    return (" ".join(found[i : i + n]) for i in range(len(found) - n + 1))


def find_overlaps(texts: Iterable[tuple[str, str]], benchmark: BenchmarkIndex) -> list[Overlap]:
    return [overlap for text_id, text in texts for overlap in benchmark.overlaps(text_id, text)]


def spec_bench_texts() -> list[tuple[str, str]]:
    """(id, text) for every turn of Spec-Bench's 480 questions (resources/spec_bench)."""
    from ..resources import spec_bench_questions

    return benchmark_texts(spec_bench_questions().read_text(encoding="utf-8"), "spec-bench")


def benchmark_texts(jsonl: str, name: str) -> list[tuple[str, str]]:
    """(id, text) for every turn of every question of a Spec-Bench-style JSONL text."""
    rows = [json.loads(line) for line in jsonl.splitlines() if line.strip()]
    return [(f"{name} q{row['question_id']} turn {n}", turn) for row in rows
            for n, turn in enumerate(row["turns"], 1)]


class BenchmarkOverlapError(SpecchatError):
    """A training prompt overlaps the benchmark: training on it would make the benchmark measure its own data."""


def refuse_benchmark_overlap(round_name: str, prompts: Sequence[TrainingPrompt], benchmark: BenchmarkIndex,
                             benchmark_name: str = "Spec-Bench") -> None:
    """Raises BenchmarkOverlapError if any text of the prompts (every turn, replies embedded in them included)
    overlaps the benchmark."""
    texts = ((f"{prompt_id(round_name, i)} turn {n}", turn) for i, prompt in enumerate(prompts)
             for n, turn in enumerate((*prompt.history, prompt.text), 1))
    found = find_overlaps(texts, benchmark)
    if found:
        turns = len({overlap.text for overlap in found})
        raise BenchmarkOverlapError(
            f"refusing to train on {turns} prompt turn{'s' if turns > 1 else ''} of {round_name} that "
            f"overlap{'' if turns > 1 else 's'} {benchmark_name}: " + "; ".join(str(o) for o in found[:3])
            + (f" and {len(found) - 3} more" if len(found) > 3 else "")
            + ". A drafter must never be trained on the benchmark it is measured on.")


# The manifest of a finished drafter, from its training.json (no model run).

def manifest_from_training(summary: Mapping, suite_jsonl: str) -> tuple[dict, list[dict]]:
    """The manifest of the drafter `summary` (its training.json) describes: the rounds that need no model in full,
    the others as their generator and counts. Raises ValueError if the listed rounds do not come out as many as
    training.json recorded."""
    settings, facts = summary["settings"], summary["facts"]
    suite, seed, extra = suite_texts(suite_jsonl), settings["seed"], settings.get("head_rounds")
    listed = {"round1": first_round_prompts(settings["first_round"], seed)}
    if extra:
        listed["round3"] = third_round_prompts(extra["third_round"], seed)
    names = ("round1", "round2", "round3", "round4") if extra else ("round1", "round2")
    if extra and extra.get("data") == "broad":  # sampled by the target: only a training run lists them
        listed, names = {}, ("broad1", "broad2")
    rounds, records = [], []
    for name in names:
        if name in listed:
            kept, dropped = drop_suite_overlap(listed[name], suite)
            if (len(kept), dropped) != (facts[f"{name}_prompts"], facts[f"{name}_dropped_for_suite_overlap"]):
                raise ValueError(f"{name} regenerates {len(kept)} prompts ({dropped} dropped), training.json "
                                 f"records {facts[f'{name}_prompts']}: the generators changed since")
            rounds.append((name, kept))
        records.append(round_record(name, settings, facts[f"{name}_prompts"],
                                    facts[f"{name}_dropped_for_suite_overlap"], len(listed.get(name, ()))))
    table = sources(summary["target"], target_licence(summary["target"]), (extra or {}).get("data", "templated"))
    entries = prompt_entries(rounds, {}, {key: value["licence"] for key, value in table.items()})
    made_by = "specchat train-head" if "head" in settings else "specchat train-draft"
    written_by = ("`python -m specchat.training.manifest FOLDER`, from the folder's training.json, without running "
                  "the target")
    return header(made_by, summary["target"], settings, records, table, written_by), entries


def target_licence(target: str) -> str:
    from ..models.sources import EMBEDDED_NAME

    return "Apache-2.0" if target == EMBEDDED_NAME else "the target model's own licence (see its model card)"


def write_from_training(folder: Path) -> Path:
    from ..resources import default_prompt_suite

    summary = json.loads((Path(folder) / "training.json").read_text(encoding="utf-8"))
    head, entries = manifest_from_training(summary, default_prompt_suite().read_text(encoding="utf-8"))
    write_manifest(Path(folder) / MANIFEST, head, entries)
    return Path(folder) / MANIFEST


def check_manifest(path: Path, benchmark: BenchmarkIndex) -> tuple[int, list[Overlap]]:
    """How many fixed texts the manifest at `path` has, and their overlaps with the benchmark."""
    _, entries = read_manifest(path)
    texts = list(manifest_texts(entries))
    return len(texts), find_overlaps(texts, benchmark)


def main(argv: Sequence[str]) -> int:
    for folder in argv:
        path = write_from_training(Path(folder))
        print(f"{path}: {path.stat().st_size / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
