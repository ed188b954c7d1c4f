"""`specchat train-draft`: prompts -> the target's replies -> its soft labels -> a small draft model folder.
`specchat train-head`: the same replies -> the target's hidden states on them -> an EAGLE-style draft head (with
--attention, an attention block is then added to it and trained on whole sequences).

Every stage writes its result to a work folder and is skipped when that result is already there, so an
interrupted run resumes where it stopped; a finished run is reproduced exactly by the same command and seed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch

from ..core.fs import atomic_write, fingerprint
from ..core.paths import cache_file
from ..engine.chat_prompt import Message, build_prompt_ids
from ..engine.decoding.speculative import default_eos_ids
from ..engine.loading.load import PROPOSAL_VOCABULARY, LoadedModel, LoadOptions, load_model
from ..models.sources import ModelSource
from .distill import Example, Labels, generate_replies
from .eagle_head import HeadTrainOptions, frequent_tokens
from .manifest import (MANIFEST, BenchmarkIndex, header, prompt_entries, prompt_id, refuse_benchmark_overlap,
                       round_record, sources, spec_bench_texts, target_licence, write_manifest)
from .prompts import TrainingPrompt, drop_suite_overlap, first_round_prompts, second_round_prompts, suite_texts
from .train import DraftShape, TrainOptions, build_draft, train_draft, training_batches

Log = Callable[[str], None]


@dataclass(frozen=True)
class HeadSettings:
    """The EAGLE-style head's sizes (its hidden size is the target's). attention: add an attention block to the
    trained stateless head and train it on (`train-head --attention`; not the shipped head: it measured no faster,
    see the README), with the target's own head counts, head size and RoPE."""

    inner: int = 1536
    blocks: int = 2
    vocab: int = 8192
    attention: bool = False


@dataclass(frozen=True)
class HeadRounds:
    """The head's data. data="templated" (the shipped head): the draft model's rounds 1 and 2 plus
    training/varied.py's round 3, self-contained varied prompts, and round 4, follow-up turns on replies from rounds
    1 and 3 and work on the documents round 3 made the target write. data="broad" (`--preset broad`,
    training/broad.py; measured and not shipped, see docs/drafters.md): round broad1, requests the target writes
    itself, grounded work over real documents and translations; round broad2, follow-up turns the target writes on
    broad1's conversations."""

    data: str = "templated"
    requests: int = 1500  # sampled; about 1150 are kept
    documents: int = 400
    translations: int = 200
    follow_ups: int = 350
    third_round: int = 1000  # about 700 distinct
    fourth_round: int = 600
    fourth_round_max_new_tokens: int = 160
    conversation_tokens: tuple[int, int] = (30, 180)  # replies short enough to follow up on
    document_tokens: tuple[int, int] = (60, 200)  # round-3 documents short enough to work on


@dataclass(frozen=True)
class PipelineSettings:
    first_round: int = 2400  # self-contained prompts (about 2000 distinct)
    # Rewriting / summarization / extraction prompts over first-round replies. Their prompts are long, and batched
    # decoding over long left-padded prompts is several times slower per token (docs/drafters.md), so this round is
    # smaller, its passages shorter and its replies capped lower.
    second_round: int = 600
    passage_tokens: tuple[int, int] = (40, 130)
    second_round_max_new_tokens: int = 160
    max_new_tokens: int = 224
    generation_batch: int = 64
    generation_bf16: bool = True  # several times faster on CPUs with AMX/AVX512-BF16; labels differ from fp32 rarely
    top_k: int = 8
    heldout_fraction: float = 0.04
    shape: DraftShape = field(default_factory=DraftShape)
    # The draft proposes from the most frequent reply tokens only (engine/drafting/model.py, ModelDrafter): 8192 cover
    # 99.7% of the replies and cost a sixth of the full output head per drafted token.
    proposal_vocab: int = 8192
    train: TrainOptions = field(default_factory=TrainOptions)
    head: HeadSettings = field(default_factory=HeadSettings)
    head_train: HeadTrainOptions = field(default_factory=HeadTrainOptions)
    # The attending head starts from the stateless one, whose parts train at a tenth of the rate; each step is a
    # batch of whole sequences (batch_tokens padded tokens), unrolled over `unroll` drafted positions.
    attending_train: HeadTrainOptions = field(default_factory=lambda: HeadTrainOptions(epochs=2, peak_lr=1e-3,
                                                                                       base_lr_scale=0.1))
    head_rounds: HeadRounds = field(default_factory=HeadRounds)
    seed: int = 0


# Settings that only shape training: changing them keeps the generated data.
TRAINING_ONLY = ("shape", "train", "head", "head_train", "attending_train", "heldout_fraction", "proposal_vocab")
# Settings that only decide which prompts a round asks: a round's replies are reused only when its prompts are the
# same ones (checked per round), so changing these regenerates just the rounds they change.
CHECKED_PER_ROUND = ("head_rounds",)



PRESETS = {
    "full": PipelineSettings(),
    # The head on broad data only (training/broad.py); its cost and its measurement against the shipped head are in
    # docs/drafters.md ("The head on broad data").
    "broad": PipelineSettings(head_rounds=HeadRounds(data="broad")),
    # A few seconds on a tiny model: the whole pipeline, for tests and for trying changes.
    "quick": PipelineSettings(first_round=24, second_round=12, passage_tokens=(4, 12), max_new_tokens=12,
                              second_round_max_new_tokens=12, generation_batch=8, top_k=4, proposal_vocab=64,
                              heldout_fraction=0.2, shape=DraftShape(hidden=16, layers=1, intermediate=32, heads=2),
                              train=TrainOptions(epochs=2, batch_tokens=512),
                              head=HeadSettings(inner=32, blocks=1, vocab=64),
                              head_train=HeadTrainOptions(epochs=2, batch=64),
                              attending_train=HeadTrainOptions(epochs=2, batch_tokens=512),
                              head_rounds=HeadRounds(requests=12, documents=4, translations=2, follow_ups=4,
                                                     third_round=16, fourth_round=10, fourth_round_max_new_tokens=12,
                                                     conversation_tokens=(1, 12), document_tokens=(1, 12))),
}


def settings_for(preset: str, epochs: int | None = None, seed: int | None = None,
                 attention: bool = False) -> PipelineSettings:
    settings = PRESETS[preset]
    if attention:
        settings = replace(settings, head=replace(settings.head, attention=True))
    if epochs is not None:
        settings = replace(settings, train=replace(settings.train, epochs=epochs),
                           head_train=replace(settings.head_train, epochs=epochs),
                           attending_train=replace(settings.attending_train, epochs=epochs))
    if seed is not None:
        settings = replace(settings, seed=seed, train=replace(settings.train, seed=seed),
                           head_train=replace(settings.head_train, seed=seed),
                           attending_train=replace(settings.attending_train, seed=seed))
    return settings


class Pipeline:
    COMMAND = "specchat train-draft"

    def __init__(self, target: ModelSource, out: Path, work: Path, settings: PipelineSettings, suite: str,
                 log: Log = print, progress_bar=None):
        self.target_source = target
        self.out, self.work = Path(out), Path(work)
        self.settings = settings
        self.suite = suite_texts(suite)
        self.log = log
        self.bar = progress_bar or _no_bar
        self.timings: dict[str, float] = {}
        self.facts: dict[str, object] = {}
        self.asked: dict[str, list[TrainingPrompt]] = {}  # each round's prompts
        self.parents: dict[tuple[str | None, str], str] = {}  # (None or prompt text, reply) -> the prompt's id
        self.benchmark = BenchmarkIndex(spec_bench_texts())  # never trained on (training/manifest.py)
        self._generation_model: torch.nn.Module | None = None  # _generator()

    def run(self) -> dict:
        self.work.mkdir(parents=True, exist_ok=True)
        self._forget_data_made_with_other_settings()
        # Generation and teacher forcing need the transformers model (a GGUF target would otherwise load on llama.cpp).
        target = self._timed("load target", lambda: load_model(self.target_source, LoadOptions(backend="torch")))
        examples, labels = self._self_distillation_data(target)
        return self._train_and_save(target, examples, labels)

    def _train_and_save(self, target: LoadedModel, examples: list[Example], labels: list[Labels]) -> dict:
        report = self._timed("training", lambda: self._train(target, examples, labels))
        return self._save(target, report, examples)

    def _self_distillation_data(self, target: LoadedModel) -> tuple[list[Example], list[Labels]]:
        rounds = self._rounds(target)
        self.round_sizes = [(name, len(pairs)) for name, pairs in rounds]
        pairs = [pair for _, round_pairs in rounds for pair in round_pairs]
        return [example for example, _ in pairs], [label for _, label in pairs]

    def _rounds(self, target: LoadedModel) -> list[tuple[str, list[tuple[Example, Labels]]]]:
        first = self._timed("first-round replies", lambda: self._replies(
            "round1", target, self._first_prompts(), self.settings.max_new_tokens))
        second = self._timed("second-round replies", lambda: self._replies(
            "round2", target, self._second_prompts(target, first), self.settings.second_round_max_new_tokens))
        return [("round1", first), ("round2", second)]

    def _forget_data_made_with_other_settings(self) -> None:
        """Generated data is reused only if it was made from the same target with the same data settings; anything
        else in the work folder is stale and is removed (training settings may change freely)."""
        wanted = {"target": self.target_source.spec, **{name: value for name, value in asdict(self.settings).items()
                                                        if name not in TRAINING_ONLY + CHECKED_PER_ROUND}}
        record = self.work / "data-settings.json"
        recorded = json.loads(record.read_text(encoding="utf-8")) if record.exists() else None
        if recorded is not None and recorded != json.loads(json.dumps(wanted)):
            self.log("  the data settings changed: generating again")
            for stale in (*self.work.glob("round*"), *self.work.glob("features*"), self.work / "stage-times.json"):
                stale.unlink(missing_ok=True)
        record.write_text(json.dumps(wanted, indent=1), encoding="utf-8")

    def _timed(self, stage: str, work):
        """Runs a stage and records its time; a stage reused from the work folder reports the time it took when it
        ran, so that `training.json` always tells what the whole pipeline costs."""
        start = time.perf_counter()
        self.log(f"[{stage}]")
        self._reused = False
        result = work()
        seconds = round(time.perf_counter() - start, 1)
        times_path = self.work / "stage-times.json"
        times = json.loads(times_path.read_text(encoding="utf-8")) if times_path.exists() else {}
        if self._reused and stage in times:
            seconds = times[stage]
        else:
            times[stage] = seconds
            times_path.write_text(json.dumps(times, indent=1), encoding="utf-8")
        self.timings[stage] = seconds
        self.log(f"[{stage}] {seconds:.0f} s" + (" (when it ran; reused now)" if self._reused else ""))
        return result

    def _first_prompts(self):
        return self._apart_from_suite("round1", first_round_prompts(self.settings.first_round, self.settings.seed))

    def _apart_from_benchmark(self, name: str, prompts: list[TrainingPrompt]) -> list[TrainingPrompt]:
        """For prompts the target wrote: those with any turn overlapping Spec-Bench are dropped (and counted), since
        sampled text cannot be reworded by hand; _apart_from_suite then checks the rest as it checks every round."""
        def overlaps(prompt: TrainingPrompt) -> bool:
            return any(self.benchmark.overlaps("", turn) for turn in (*prompt.history[0::2], prompt.text))
        kept = [prompt for prompt in prompts if not overlaps(prompt)]
        self.facts[f"{name}_dropped_for_benchmark_overlap"] = len(prompts) - len(kept)
        return self._apart_from_suite(name, kept)

    def _apart_from_suite(self, name: str, prompts: list[TrainingPrompt]) -> list[TrainingPrompt]:
        kept, dropped = drop_suite_overlap(prompts, self.suite)
        self.facts[f"{name}_prompts"], self.facts[f"{name}_dropped_for_suite_overlap"] = len(kept), dropped
        refuse_benchmark_overlap(name, kept, self.benchmark)
        return kept

    def _second_prompts(self, target: LoadedModel, first: list[tuple[Example, Labels]]):
        passages = [reply for _, reply in self._answered(target, "round1", first, self.settings.passage_tokens)]
        return self._apart_from_suite("round2", second_round_prompts(passages, self.settings.second_round,
                                                                     self.settings.seed))

    def _answered(self, target: LoadedModel, name: str, pairs: list[tuple[Example, Labels]],
                  reply_tokens: tuple[int, int]) -> list[tuple[TrainingPrompt, str]]:
        """(prompt, reply text) for the replies of round `name` whose length is within `reply_tokens`. Each reply's
        prompt is noted as its parent, for the manifest."""
        low, high = reply_tokens
        answered = []
        for i, (prompt, (e, _)) in enumerate(zip(self.asked[name], pairs)):
            if low <= len(e.ids) - e.prompt_len <= high:
                reply = target.tokenizer.decode(e.ids[e.prompt_len:], skip_special_tokens=True).strip()
                answered.append((prompt, reply))
                for key in ((None, reply), (prompt.text, reply)):
                    self.parents.setdefault(key, prompt_id(name, i))
        return answered

    def _replies(self, name: str, target: LoadedModel, prompts, max_new_tokens: int) -> list[tuple[Example, Labels]]:
        examples_path, labels_path = self.work / f"{name}.jsonl", self.work / f"{name}-labels.pt"
        tokenizer = target.tokenizer
        self.asked[name] = prompts  # the results below are in the same order, one per prompt
        prompt_ids = [build_prompt_ids(tokenizer, _conversation(p)) for p in prompts]
        if examples_path.exists() and labels_path.exists():
            stored = _read_examples(examples_path)
            if [e.ids[: e.prompt_len] for e in stored] == prompt_ids:
                self.log(f"  reusing {examples_path}")
                self._reused = True
                labels = [Labels(*pair) for pair in torch.load(labels_path, weights_only=True)]
                return list(zip(stored, labels))
            self.log(f"  the prompts of {name} changed: generating its replies again")
            for stale in self.work.glob(f"features-{name}*.pt"):  # its reply and prompt states
                stale.unlink()
        eos, pad = _eos_and_pad(target)
        with self.bar(total=len(prompts), desc=f"{name} replies", unit="prompt") as bar:
            replies = generate_replies(self._generator(target), prompt_ids, eos, pad, max_new_tokens,
                                       self.settings.generation_batch, self.settings.top_k, bar.update)
        results = [(Example(ids + reply, len(ids), p.category), labels)
                   for p, ids, (reply, labels) in zip(prompts, prompt_ids, replies)]
        atomic_write(labels_path, lambda path: torch.save([(l.top_ids, l.top_probs) for _, l in results], path))
        atomic_write(examples_path, lambda path: _write_examples(path, [e for e, _ in results]))
        return results

    def _generator(self, target: LoadedModel):
        """The model that generates the data: a bfloat16 copy of the target where that is faster (made once)."""
        if self._generation_model is None:
            self._generation_model = target.model
            if self.settings.generation_bf16 and target.model.dtype == torch.float32:
                self._generation_model = copy.deepcopy(target.model).to(torch.bfloat16)
        return self._generation_model

    def _train(self, target: LoadedModel, examples: list[Example], labels: list[Labels]):
        pairs = list(zip(examples, labels))
        random.Random(self.settings.seed).shuffle(pairs)
        n_heldout = max(1, int(len(pairs) * self.settings.heldout_fraction))
        heldout, train = pairs[:n_heldout], pairs[n_heldout:]
        self.facts.update(train_replies=len(train), heldout_replies=len(heldout),
                          train_reply_tokens=sum(len(e.ids) - e.prompt_len for e, _ in train))
        self.log(f"  {len(train)} training replies ({self.facts['train_reply_tokens']} reply tokens), "
                 f"{len(heldout)} held out")
        self.draft = build_draft(target.model, self.settings.shape, self.settings.seed)
        steps_per_epoch = len(training_batches(train, self.settings.train))
        with self.bar(total=steps_per_epoch * self.settings.train.epochs, desc="training", unit="step") as bar:
            progress = self._epoch_progress(bar, "held-out top-1 agreement {heldout_top1:.3f}")
            return train_draft(self.draft, train, heldout, self.settings.train, progress)

    def _epoch_progress(self, bar, held_out_figures: str):
        """A training progress callback: steps move the bar; the end of an epoch (0 steps) is logged."""
        def progress(steps: int, info: dict) -> None:
            if steps:
                bar.update(steps)
                bar.set_postfix(epoch=info["epoch"], loss=f"{info['loss']:.3f}")
            else:
                self.log(("  epoch {epoch}: train loss {train_loss:.3f}, held-out loss {heldout_loss:.3f}, "
                          + held_out_figures).format(**info))
        return progress

    def _summary(self, parameters: int, report, examples: list[Example]) -> dict:
        """What training.json records: the target, every setting, the facts and timings, and each epoch."""
        return {"target": self.target_source.describe(), "parameters": parameters, "settings": asdict(self.settings),
                "facts": self.facts, "timings_s": self.timings, "epochs": report.epochs,
                "replies_by_category": _count_categories(examples)}

    def _save(self, target: LoadedModel, report, examples: list[Example]) -> dict:
        self.out.mkdir(parents=True, exist_ok=True)
        draft = self.draft.to(torch.float16)
        draft.generation_config = copy.deepcopy(target.model.generation_config)
        draft.save_pretrained(self.out, safe_serialization=True)
        target.tokenizer.save_pretrained(self.out)
        self._save_proposal_vocabulary(target, examples)
        summary = self._summary(sum(p.numel() for p in draft.parameters()), report, examples)
        (self.out / "training.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (self.out / "README.md").write_text(model_card(summary), encoding="utf-8")
        self._write_manifest()
        self.log(f"draft saved to {self.out} ({folder_megabytes(self.out):.1f} MB)")
        return summary

    def _write_manifest(self) -> None:
        """manifest.jsonl.gz: every prompt asked, with its sources and licences (training/manifest.py)."""
        settings, target = asdict(self.settings), self.target_source.describe()
        data = "broad" if any(name.startswith("broad") for name, _ in self.round_sizes) else "templated"
        table = sources(target, target_licence(target), data)
        rounds = [(name, self.asked[name]) for name, _ in self.round_sizes]
        records = [round_record(name, settings, len(prompts), self.facts[f"{name}_dropped_for_suite_overlap"],
                                len(prompts)) for name, prompts in rounds]
        for record in records:  # rounds the target wrote drop what overlaps the benchmark (_apart_from_benchmark)
            if f"{record['round']}_dropped_for_benchmark_overlap" in self.facts:
                record["dropped_for_benchmark_overlap"] = self.facts[f"{record['round']}_dropped_for_benchmark_overlap"]
        entries = prompt_entries(rounds, self.parents, {key: value["licence"] for key, value in table.items()})
        write_manifest(self.out / MANIFEST, header(self.COMMAND, target, settings, records, table), entries)

    def _save_proposal_vocabulary(self, target: LoadedModel, examples: list[Example]) -> None:
        ids, covered = _reply_vocabulary(target, examples, self.settings.proposal_vocab)
        self.facts["proposal_vocab_covers"] = covered
        record = {"about": "the token ids this draft proposes from in specchat: the most frequent tokens of the "
                           "target's replies it was trained on, plus the end-of-turn ids",
                  "reply_tokens_covered": covered, "token_ids": ids.tolist()}
        (self.out / PROPOSAL_VOCABULARY).write_text(json.dumps(record) + "\n", encoding="utf-8")


MANIFEST_NOTE = ("`manifest.jsonl.gz` lists every prompt it was trained on, with the sources and licences of their "
                 "text (templates written for specchat, requests the target wrote, public-domain and CC0 documents, "
                 "the target's own replies; nothing from Spec-Bench or the datasets behind it); `specchat manifest "
                 "check` confirms that none overlaps Spec-Bench.")


def model_card(summary: dict) -> str:
    """A short README for the draft folder: what it is, how it was made, how to use and rebuild it."""
    final = summary["epochs"][-1] if summary["epochs"] else {}
    shape = summary["settings"]["shape"]
    minutes = sum(summary["timings_s"].values()) / 60
    facts, settings = summary["facts"], summary["settings"]
    return "\n".join([
        "---", "license: apache-2.0", "library_name: transformers", "pipeline_tag: text-generation", "---",
        f"# Draft model for {summary['target']}", "",
        f"A {summary['parameters'] / 1e6:.1f}M-parameter Llama ({shape['layers']} layers, hidden size "
        f"{shape['hidden']}, tied embeddings, float16) that proposes tokens for speculative decoding with its target. "
        "It shares the target's tokenizer and vocabulary, so it also works as `assistant_model` in transformers' "
        "`generate()`. On its own it is not a useful chat model.", "",
        f"Trained by self-distillation with `specchat train-draft` (seed {settings['seed']}, {minutes:.0f} minutes end "
        f"to end on the machine that made it): {facts.get('train_replies')} of the target's own greedy replies "
        f"({facts.get('train_reply_tokens')} reply tokens) to prompts written for this purpose, none overlapping the "
        f"benchmark suite, with the target's top-{settings['top_k']} next-token probabilities as soft labels. "
        f"Held-out top-1 agreement with the target: {final.get('heldout_top1', float('nan')):.3f}. "
        "Details in `training.json`.", "",
        f"`{PROPOSAL_VOCABULARY}` lists the {settings.get('proposal_vocab')} most frequent tokens of those replies "
        f"(covering {facts.get('proposal_vocab_covers', 0):.1%} of them): specchat drafts from those rows of the output "
        "head only, which halves the draft's cost per token; other tools ignore the file.", "", MANIFEST_NOTE, "",
        "Licence: Apache-2.0, like the target model (SmolLM2-135M-Instruct, Hugging Face) whose outputs it was "
        "trained on.", ""])


def _reply_vocabulary(target: LoadedModel, examples: list[Example], size: int) -> tuple[torch.Tensor, float]:
    """The `size` most frequent reply tokens (and the end-of-turn ids), and the share of reply tokens they cover."""
    ids = frequent_tokens(examples, size, always=sorted(default_eos_ids(target.model, target.tokenizer)))
    kept = set(ids.tolist())
    replies = [t for e in examples for t in e.ids[e.prompt_len:]]
    return ids, round(sum(t in kept for t in replies) / max(1, len(replies)), 4)


def examples_fingerprint(examples: list[Example]) -> str:
    """A digest of every example's tokens: a trained stage is reused only on exactly the data it was trained on."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(json.dumps([example.prompt_len, example.ids]).encode())
    return digest.hexdigest()[:16]


def _eos_and_pad(target: LoadedModel) -> tuple[set[int], int]:
    eos = default_eos_ids(target.model, target.tokenizer)
    pad = target.tokenizer.pad_token_id
    return eos, pad if pad is not None else min(eos)


def _conversation(prompt: TrainingPrompt) -> list[Message]:
    """A prompt as chat messages: its earlier turns (user and assistant alternating), then its own user turn."""
    roles = ("user", "assistant")
    return [Message(roles[i % 2], turn) for i, turn in enumerate(prompt.history)] + [Message("user", prompt.text)]


def default_work_dir(target: ModelSource, preset: str) -> Path:
    """Intermediate data lives in the user cache (never next to a draft inside the package's resources), one folder
    per target and preset, so that train-draft and train-head generate the replies once and share them."""
    key = fingerprint(target.spec, preset, digits=12)
    return cache_file("training") / f"{Path(target.spec).name or 'target'}-{preset}-{key}"


def folder_megabytes(folder: Path) -> float:
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.is_file()) / 1e6


def _count_categories(examples: list[Example]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for example in examples:
        counts[example.category] = counts.get(example.category, 0) + 1
    return dict(sorted(counts.items()))


def _write_examples(path: Path, examples: list[Example]) -> None:
    lines = (json.dumps({"category": e.category, "prompt_len": e.prompt_len, "ids": e.ids}) for e in examples)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _read_examples(path: Path) -> list[Example]:
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return [Example(row["ids"], row["prompt_len"], row["category"]) for row in rows]


class _NoBar:
    def __init__(self, **_):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **_) -> None:
        pass


_no_bar = _NoBar
