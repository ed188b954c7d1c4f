"""`specchat bench`: our engine against itself and against transformers' generate(), side by side in one run."""

from __future__ import annotations

import json
import platform
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, TextIO

import torch

from .engine import GenerationConfig, Message, PromptError, SpecchatError, build_prompt_ids
from .engine.adaptive import expected_tokens
from .engine.drafting import DRAFTER_KEYS
from .engine.events import GenerationStats
from .engine.history import SuffixIndex
from .engine.race import UNKNOWN_TOKEN
from .engine.pair import ModelPair
from .peer_server import SERVER_MODES, bench_peer, server_binary
from .peers import PEER_MODES, LlamaCppPeer, require_llama_cpp
from .run_kind import HF_MODES, PLAIN, RunKind, remote_device
from .storage.records import RunRecord

OVERHEAD_PARTS = GenerationStats.OVERHEAD_PARTS

MODES = ("default", *DRAFTER_KEYS, *HF_MODES, *PEER_MODES, *SERVER_MODES)  # run_kind.RunKind reads each


@dataclass(frozen=True)
class BenchPrompt:
    question_id: int | str
    category: str
    turns: tuple[str, ...]


@dataclass
class TurnOutput:
    token_ids: list[int]
    text: str
    wall_s: float
    stats: object | None = None  # GenerationStats for our modes
    draft_proposed: int | None = None  # a peer's own draft counters (llama-server's)
    draft_accepted: int | None = None


@dataclass
class BenchSettings:
    k: int = 5
    adaptive: bool = True
    max_new_tokens: int = 128
    warmup_tokens: int = 16
    repeats: int = 1  # runs of each turn; the fastest counts (greedy output is the same every time)
    packed_weights: bool = True  # our engine's verifications use MKL-packed weights (engine/packed.py)
    peer_draft: str | None = None  # llama-server-draft's GGUF draft, when the pair's draft is not one
    default_drafter: str = "pld"  # what the "default" mode runs: the drafter the app picks for this pair here
    universal_draft: str | None = None  # the "universal" mode's draft (another tokenizer), when not the pair's


@dataclass
class ModeRecord:
    question_id: int | str
    category: str
    mode: str
    new_tokens: int
    wall_s: float
    target_passes: int | None
    draft_proposed: int | None
    draft_accepted: int | None
    draft_forwards: int | None = None
    draft_s: float | None = None
    verify_s: float | None = None  # target passes after the prefill
    proposed_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    prefill_s: float | None = None
    rejected_steps: int | None = None
    steps_by_k: list[int] = field(default_factory=list)
    verify_s_by_k: list[float] = field(default_factory=list)
    overhead_s: dict[str, float] = field(default_factory=dict)  # GenerationStats.OVERHEAD_PARTS and "other_s"
    token_ids: list[int] = field(repr=False, default_factory=list)
    text: str = ""
    speedup: float | None = None
    identical: bool | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def alpha(self) -> float | None:
        if self.draft_proposed is None:
            return None
        return self.draft_accepted / self.draft_proposed if self.draft_proposed else 0.0

    @property
    def tau(self) -> float | None:
        return self.new_tokens / self.target_passes if self.target_passes else None

    def to_dict(self) -> dict:
        return {"question_id": self.question_id, "category": self.category, "mode": self.mode,
                "new_tokens": self.new_tokens, "wall_s": round(self.wall_s, 4),
                "tokens_per_s": round(self.tokens_per_s, 3), "speedup": _round(self.speedup),
                "alpha": _round(self.alpha), "tau": _round(self.tau), "identical": self.identical,
                "target_passes": self.target_passes, "draft_proposed": self.draft_proposed,
                "draft_accepted": self.draft_accepted, "text": self.text}


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


# Spec-Bench's six tasks; MT-bench's eight categories are its multi-turn task.
SPEC_BENCH_TASKS = ("multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag")
MT_BENCH_CATEGORIES = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


def spec_bench_sample(prompts: list[BenchPrompt], per_task: int | None, seed: int = 0) -> list[BenchPrompt]:
    """Spec-Bench grouped by its six tasks (MT-bench's categories become multi_turn); per_task: a fixed, seeded
    sample of that many questions per task (stratified), in the file's order."""
    import random

    tasked = [BenchPrompt(p.question_id, "multi_turn" if p.category in MT_BENCH_CATEGORIES else p.category, p.turns)
              for p in prompts]
    if per_task is None:
        return tasked
    keep: set[int] = set()
    for task in dict.fromkeys(p.category for p in tasked):  # Spec-Bench's six, or HumanEval's one
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


class BenchRunner:
    def __init__(self, pair: ModelPair, settings: BenchSettings, remote=None):
        """remote: a remote engine (specchat.remote.RemoteEngine) for the "remote" mode: the target on another
        machine, which reads the conversation as messages; its text is compared with plain decoding's here, and
        its speed, another machine's, is not turned into a speedup."""
        self.pair = pair
        self.settings = settings
        self.remote = remote
        self.tokenizer = pair.target.tokenizer
        self._engines = {}
        # Each history-drafting mode's past replies: its own earlier replies in this run, added as each turn ends
        # (as the app adds a finished reply), so a prompt is drafted from the prompts run before it, never itself.
        self.histories: dict[str, SuffixIndex] = {}
        self._remember = True

    def drafter_of(self, mode: str) -> str:
        """The drafter a mode of ours runs ("default" is the app's own pick)."""
        return self.settings.default_drafter if mode == "default" else mode

    def _engine(self, mode: str):
        """The mode's engine, built once: the "universal" mode on its own draft when one is given."""
        if mode not in self._engines:
            drafter = self.drafter_of(mode)
            pair = self._universal_pair() if drafter == "universal" and self.settings.universal_draft else self.pair
            history = self.histories.setdefault(mode, SuffixIndex()) if RunKind.parse(drafter).needs_history else None
            self._engines[mode] = pair.engine(drafter, packed_weights=self.settings.packed_weights, history=history)
        return self._engines[mode]

    def _universal_pair(self) -> ModelPair:
        from .engine.models import LoadOptions, ModelSource, load_model

        options = LoadOptions(threads=getattr(self.pair.target.native, "threads", None), exactness="distribution")
        return ModelPair(self.pair.target, load_model(ModelSource.parse(self.settings.universal_draft), options))

    def run_turn(self, mode: str, prompt_ids: list[int], max_new_tokens: int,
                 messages: list[Message] | None = None) -> TurnOutput:
        kind = RunKind.parse(mode)
        if kind.is_remote:
            return self._run_remote(messages or [], max_new_tokens)
        if kind.is_reference:
            return self._run_hf(kind.drafter, prompt_ids, max_new_tokens)
        if kind.is_llama_cpp:
            return self._run_peer(mode, prompt_ids, max_new_tokens)
        if kind.is_llama_server:
            server = self._engines.get(mode) or self._engines.setdefault(
                mode, bench_peer(mode, self.pair, self.settings.k, self.settings.peer_draft))
            reply = server.generate(prompt_ids, max_new_tokens)
            return TurnOutput(reply.token_ids, self.tokenizer.decode(reply.token_ids, skip_special_tokens=True),
                              reply.wall_s, draft_proposed=reply.draft_proposed, draft_accepted=reply.draft_accepted)
        engine = self._engine(mode)
        config = GenerationConfig(max_new_tokens=max_new_tokens, k=self.settings.k,
                                  adaptive_k=self.settings.adaptive, seed=0)
        result = engine.generate(prompt_ids, config)
        return TurnOutput(list(result.token_ids), result.text, result.stats.wall_s, result.stats)

    def _run_remote(self, messages: list[Message], max_new_tokens: int) -> TurnOutput:
        if self.remote is None:
            raise SpecchatError("the remote mode needs a remote engine: connect to one first (API menu)")
        result = self.remote.generate(messages, None, GenerationConfig(max_new_tokens=max_new_tokens, seed=0))
        # the server's token count (its ids are unknown); no engine figures of ours
        return TurnOutput([UNKNOWN_TOKEN] * result.stats.new_tokens, result.text, result.stats.wall_s)

    def _run_peer(self, mode: str, prompt_ids: list[int], max_new_tokens: int) -> TurnOutput:
        peer = self._engines.get(mode)
        if peer is None:
            gguf = self.pair.target.gguf_path()
            if gguf is None:
                raise SpecchatError(f"the {mode} mode runs llama.cpp on the target's GGUF file; "
                                    f"{self.pair.target.name} is not one")
            native = self.pair.target.native
            peer = self._engines[mode] = LlamaCppPeer(gguf, self.pair.target.eos_token_ids(),
                                                      prompt_lookup=RunKind.parse(mode).drafter == "pld",
                                                      threads=native.threads if native is not None else None)
        tokens, wall = peer.generate(prompt_ids, max_new_tokens)
        return TurnOutput(tokens, self.tokenizer.decode(tokens, skip_special_tokens=True), wall)

    @torch.inference_mode()
    def _run_hf(self, drafter: str, prompt_ids: list[int], max_new_tokens: int) -> TurnOutput:
        model = self.pair.target.torch_model()
        input_ids = torch.tensor([prompt_ids], device=self.pair.target.device)
        kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, attention_mask=torch.ones_like(input_ids),
                      pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
        if drafter == "pld":
            kwargs["prompt_lookup_num_tokens"] = self.settings.k
        elif drafter == "model":
            kwargs["assistant_model"] = self.pair.draft.torch_model()
        started = time.perf_counter()
        output = model.generate(input_ids, **kwargs)
        wall = time.perf_counter() - started
        new = output[0, len(prompt_ids):].tolist()
        return TurnOutput(new, self.tokenizer.decode(new, skip_special_tokens=True), wall)

    def run_prompt(self, prompt: BenchPrompt, mode: str, max_new_tokens: int | None = None) -> ModeRecord:
        """All turns of one prompt; each later turn follows this mode's own earlier replies."""
        history: list[Message] = []
        outputs = []
        for turn in prompt.turns:
            history.append(Message("user", turn))
            prompt_ids = build_prompt_ids(self.tokenizer, history)
            output = self._fastest_of_repeats(mode, prompt_ids, max_new_tokens or self.settings.max_new_tokens,
                                              list(history))
            outputs.append(output)
            if mode in self.histories and self._remember:
                self.histories[mode].add(output.token_ids)
            history.append(Message("assistant", output.text))
        ours = [o.stats for o in outputs if o.stats is not None]
        peer = [o for o in outputs if o.draft_proposed is not None]  # a peer's own counters
        return ModeRecord(
            question_id=prompt.question_id, category=prompt.category, mode=mode,
            new_tokens=sum(len(o.token_ids) for o in outputs), wall_s=sum(o.wall_s for o in outputs),
            target_passes=sum(s.target_passes for s in ours) if ours else None,
            draft_proposed=sum(s.draft_proposed for s in ours) if ours and mode != PLAIN
            else sum(o.draft_proposed for o in peer) if peer else None,
            draft_accepted=sum(s.draft_accepted for s in ours) if ours and mode != PLAIN
            else sum(o.draft_accepted or 0 for o in peer) if peer else None,
            draft_forwards=sum(s.draft_forwards for s in ours) if ours else None,
            draft_s=sum(s.draft_s for s in ours) if ours else None,
            verify_s=sum(s.verify_s for s in ours) if ours else None,
            proposed_by_position=_add_lists(s.proposed_by_position for s in ours),
            accepted_by_position=_add_lists(s.accepted_by_position for s in ours),
            prefill_s=sum(s.prefill_s for s in ours) if ours else None,
            rejected_steps=sum(s.rejected_steps for s in ours) if ours else None,
            steps_by_k=_add_lists(s.steps_by_k for s in ours),
            verify_s_by_k=_add_lists(s.verify_s_by_k for s in ours),
            overhead_s={part: sum(getattr(s, part) for s in ours) for part in (*OVERHEAD_PARTS, "other_s")}
            if ours else {},
            token_ids=[t for o in outputs for t in o.token_ids],
            text="\n\n".join(o.text for o in outputs),
        )

    def _fastest_of_repeats(self, mode: str, prompt_ids: list[int], max_new_tokens: int,
                            messages: list[Message]) -> TurnOutput:
        """On a shared, noisy machine the minimum of a few runs is the best estimate of the undisturbed time."""
        runs = [self.run_turn(mode, prompt_ids, max_new_tokens, messages) for _ in range(self.settings.repeats)]
        return min(runs, key=lambda run: run.wall_s)

    def warm_up(self, modes: list[str], prompt: BenchPrompt) -> None:
        self._remember = False  # the warm-up's reply is the start of the first prompt's: not history
        try:
            for mode in modes:
                self.run_prompt(BenchPrompt(prompt.question_id, prompt.category, prompt.turns[:1]), mode,
                                max_new_tokens=self.settings.warmup_tokens)
        finally:
            self._remember = True

    def run(self, prompts: list[BenchPrompt], modes: list[str],
            progress: Callable[[int, int, ModeRecord], None] | None = None,
            cancel: threading.Event | None = None) -> list[ModeRecord]:
        """Prompt-major order (every mode of one prompt, then the next) so that drifts in machine load hit all
        modes alike. A set `cancel` ends the run after the current prompt's mode; only whole prompts (every mode
        measured, so comparable) are returned. The llama-server peers' processes are stopped at the end."""
        try:
            return self._run(prompts, modes, progress, cancel)
        finally:
            for mode in SERVER_MODES:
                if mode in self._engines:
                    self._engines.pop(mode).close()

    def _run(self, prompts, modes, progress, cancel) -> list[ModeRecord]:
        self.warm_up(modes, prompts[0])
        records = []
        total = len(prompts) * len(modes)
        for prompt in prompts:
            by_mode = {}
            for mode in modes:
                if cancel is not None and cancel.is_set():
                    return records
                record = self.run_prompt(prompt, mode)
                by_mode[mode] = record
                if progress:
                    progress(len(records) + len(by_mode), total, record)
            _compare_with_plain(by_mode)
            records.extend(by_mode.values())
        return records


def _compare_with_plain(by_mode: dict[str, ModeRecord]) -> None:
    plain = by_mode[PLAIN]
    for record in by_mode.values():
        if RunKind.parse(record.mode).is_remote:  # text only, and another machine's speed
            record.identical, record.speedup = record.text == plain.text, None
            continue
        record.identical = record.token_ids == plain.token_ids
        record.speedup = record.tokens_per_s / plain.tokens_per_s if plain.tokens_per_s else None


def summarize(records: list[ModeRecord]) -> dict:
    """Per-category and overall aggregates per mode: throughput = total tokens / total time, and the speedup is the
    ratio of throughputs to `none` over the same prompts."""
    groups: dict[str, dict[str, list[ModeRecord]]] = {}
    for record in records:
        for group in (record.category, "overall"):
            groups.setdefault(group, {}).setdefault(record.mode, []).append(record)
    summary = {}
    for group, by_mode in groups.items():
        plain = by_mode.get(PLAIN, [])
        plain_rate = _throughput(plain)
        decode = _decode_rate(plain)
        # a remote mode's speed is another machine's: no speedup over plain decoding here
        summary[group] = {mode: _aggregate(rows, 0.0 if RunKind.parse(mode).is_remote else plain_rate,
                                           _plain_pass_s(plain), decode)
                          for mode, rows in by_mode.items()}
    return summary


def _add_lists(lists: Iterable[list[int]]) -> list[int]:
    total: list[int] = []
    for values in lists:
        total += [0] * (len(values) - len(total))
        for i, value in enumerate(values):
            total[i] += value
    return total


def _plain_pass_s(plain: list[ModeRecord]) -> float | None:
    """Seconds of one target pass over one token, from plain decoding (its passes after the prefill)."""
    passes = sum((r.target_passes or 1) - 1 for r in plain)
    seconds = sum(r.verify_s or 0.0 for r in plain)
    return seconds / passes if passes and seconds else None


def _decode_rate(plain: list[ModeRecord]) -> float:
    """Plain decoding's tokens/s after the first token (prompt processing excluded)."""
    seconds = sum(r.wall_s - (r.prefill_s or 0.0) for r in plain)
    return sum(r.new_tokens - 1 for r in plain) / seconds if seconds > 0 else 0.0


def _throughput(rows: list[ModeRecord]) -> float:
    wall = sum(r.wall_s for r in rows)
    return sum(r.new_tokens for r in rows) / wall if wall else 0.0


def _aggregate(rows: list[ModeRecord], plain_rate: float, plain_pass_s: float | None,
               plain_decode_rate: float = 0.0) -> dict:
    """`draft_cost`: seconds of one draft-model forward / seconds of one plain target step (c in Leviathan et al.)."""
    rate = _throughput(rows)
    forwards = sum(r.draft_forwards or 0 for r in rows)
    draft_s = sum(r.draft_s or 0.0 for r in rows)
    proposed = [r.draft_proposed for r in rows if r.draft_proposed is not None]
    passes = [r.target_passes for r in rows if r.target_passes]
    return {
        "prompts": len(rows),
        "new_tokens": sum(r.new_tokens for r in rows),
        "wall_s": round(sum(r.wall_s for r in rows), 3),
        "tokens_per_s": round(rate, 3),
        "speedup": _round(rate / plain_rate if plain_rate else None),
        "alpha": _round(sum(r.draft_accepted for r in rows if r.draft_accepted is not None) / sum(proposed))
        if proposed and sum(proposed) else None,
        "tau": _round(sum(r.new_tokens for r in rows if r.target_passes) / sum(passes)) if passes else None,
        "identical": sum(1 for r in rows if r.identical) / len(rows),
        "draft_cost": _round(draft_s / forwards / plain_pass_s) if forwards and plain_pass_s else None,
        # P(draft token i accepted | proposed). Position 0 is the first-token acceptance, the closest to Leviathan's
        # per-token alpha; accepted / proposed ("alpha" above) also counts the tokens proposed past a rejection.
        "acceptance_by_position": [_round(a / p) for a, p in zip(_add_lists(r.accepted_by_position for r in rows),
                                                                  _add_lists(r.proposed_by_position for r in rows)) if p],
        **_engine_figures(rows, plain_pass_s, plain_decode_rate),
    }


def _engine_figures(rows: list[ModeRecord], plain_pass_s: float | None, plain_decode_rate: float) -> dict:
    """How close the engine comes to what its measured ingredients allow (our modes only).

    Leviathan et al.'s expected speedup, with the measured cost curve instead of a flat verification cost:
        predicted = t1 * sum_k n_k E(alpha, k) / (verify_s + draft_s),   E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha)
    where n_k is the number of steps that verified k drafts, verify_s their target forward time (so verifying k+1
    tokens costs what it measured), draft_s the drafting time, t1 one plain target step, and alpha the i.i.d.
    per-token acceptance estimated from the run. `efficiency` = measured decode speedup (tokens after the first,
    prompt processing excluded on both sides, as in the formula) / predicted: what Python, the verification rule,
    cache cropping, detokenisation and events cost, and how far acceptance is from i.i.d. The overhead shares are
    of the time inside the models (prefill + draft + verify)."""
    ours = [r for r in rows if r.prefill_s is not None]
    if not ours:
        return {}
    model_s = sum(r.prefill_s + (r.draft_s or 0.0) + (r.verify_s or 0.0) for r in ours)
    overhead = {part: sum(r.overhead_s.get(part, 0.0) for r in ours) for part in (*OVERHEAD_PARTS, "other_s")}
    unattributed = overhead["other_s"] - sum(overhead[part] for part in OVERHEAD_PARTS)
    figures = {
        "overhead_share": {part.removesuffix("_s"): _round(overhead[part] / model_s, 4) for part in OVERHEAD_PARTS}
        | {"python": _round(max(unattributed, 0.0) / model_s, 4), "total": _round(overhead["other_s"] / model_s, 4)}
        if model_s else None,
        "verify_curve_ms": _verify_curve_ms(ours),
        "decode_speedup": None, "predicted_speedup": None, "efficiency": None, "iid_alpha": None,
    }
    steps = _add_lists(r.steps_by_k for r in ours)
    decode_s = sum(r.wall_s - r.prefill_s for r in ours)
    decode_rate = sum(r.new_tokens - 1 for r in ours) / decode_s if decode_s > 0 else 0.0
    figures["decode_speedup"] = _round(decode_rate / plain_decode_rate) if plain_decode_rate else None
    accepted = sum(r.draft_accepted or 0 for r in ours)
    trials = accepted + sum(r.rejected_steps or 0 for r in ours)
    if not plain_pass_s or not trials or len(steps) < 2:
        return figures
    alpha = accepted / trials
    expected = sum(n * expected_tokens(alpha, k) for k, n in enumerate(steps))
    spent = sum(r.verify_s or 0.0 for r in ours) + sum(r.draft_s or 0.0 for r in ours)
    predicted = plain_pass_s * expected / spent if spent else None
    figures.update(iid_alpha=_round(alpha), predicted_speedup=_round(predicted))
    if predicted and figures["decode_speedup"]:
        figures["efficiency"] = _round(figures["decode_speedup"] / predicted)
    return figures


def _verify_curve_ms(rows: list[ModeRecord]) -> dict[int, float]:
    """Mean milliseconds of one target pass over n = k + 1 tokens, as measured during the run."""
    steps = _add_lists(r.steps_by_k for r in rows)
    seconds = _add_lists(r.verify_s_by_k for r in rows)
    return {k + 1: round(1000 * s / n, 2) for k, (n, s) in enumerate(zip(steps, seconds)) if n}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def environment() -> dict:
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads(),
            "llama_cpp": _llama_cpp_version()}


def _llama_cpp_version() -> str | None:
    from .engine.llamacpp import llama_cpp_available

    if not llama_cpp_available():
        return None
    import llama_cpp

    return llama_cpp.__version__


def print_summary(summary: dict, modes: list[str], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    width = max(10, *(len(m) + 1 for m in modes))  # llama-server-draft and the like
    header = (f"{'category':<15}{'mode':<{width}}{'tokens':>8}{'tok/s':>9}{'speedup':>9}{'alpha':>8}{'tau':>7}"
              f"{'identical':>11}{'draft c':>9}{'1st acc':>9}")
    print(header, file=out)
    print("-" * len(header), file=out)
    groups = sorted(g for g in summary if g != "overall") + ["overall"]
    for group in groups:
        for mode in modes:
            row = summary[group].get(mode)
            if row is None:
                continue
            print(f"{group:<15}{mode:<{width}}{row['new_tokens']:>8}{row['tokens_per_s']:>9.2f}"
                  f"{_fmt(row['speedup'], 'x'):>9}{_fmt(row['alpha']):>8}{_fmt(row['tau']):>7}"
                  f"{row['identical'] * 100:>10.0f}%{_fmt(row.get('draft_cost')):>9}"
                  f"{_fmt((row.get('acceptance_by_position') or [None])[0]):>9}", file=out)


def _fmt(value: float | None, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


def bench_run_values(record: ModeRecord, pair: ModelPair, settings: BenchSettings,
                     app_session_id: int | None, remote_name: str | None = None) -> RunRecord | None:
    """One benchmark prompt-mode as a generation run for Store.record_run (source "bench"), so the dashboard charts
    benchmarks beside chat replies and races; None for the reference and peer modes (transformers' and llama.cpp's
    generation are timed beside ours, not our drafters, and have no per-step statistics to store).

    Benchmarks decode greedily with seed 0. The speedup is measured against plain decoding of the same prompt in
    the same run; plain decoding itself gets none (it is the baseline), as the race's plain lane."""
    kind = RunKind.parse(record.mode)
    if kind.is_reference or kind.is_peer:  # other engines' generation, timed beside ours: no per-step statistics
        return None
    speedup = record.speedup if not kind.is_plain else None
    proposed, accepted = list(record.proposed_by_position), list(record.accepted_by_position)
    return RunRecord(
        app_session_id=app_session_id, source="bench", category=record.category,
        target=remote_name if kind.is_remote and remote_name else pair.target.name,
        draft=None if kind.is_remote else pair.draft_name(record.mode), drafter=record.mode, k=settings.k,
        adaptive=settings.adaptive, temperature=0.0, top_p=1.0, top_k=0, seed=0,
        device=remote_device() if kind.is_remote else str(pair.target.device),
        exactness=None if kind.is_remote else pair.target.exactness,
        new_tokens=record.new_tokens, target_passes=record.target_passes or 0,
        draft_proposed=record.draft_proposed or 0, draft_accepted=record.draft_accepted or 0,
        tokens_per_s=record.tokens_per_s, wall_s=record.wall_s, draft_s=record.draft_s or 0.0,
        verify_s=record.verify_s or 0.0, proposed_by_position=proposed, accepted_by_position=accepted,
        acceptance_by_position=[a / p if p else 0.0 for a, p in zip(accepted, proposed)],
        speedup=speedup, speedup_basis="measured" if speedup is not None else None,
        baseline_tokens_per_s=record.tokens_per_s / speedup if speedup else None)


def resident_mb() -> float | None:
    """This process's resident memory now, in MB (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def peak_resident_mb() -> float:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def print_profile(summary: dict, modes: list[str], memory: dict | None = None, out: TextIO | None = None) -> None:
    """`specchat bench --profile`: where each mode's time goes, overall."""
    out = out or sys.stdout
    overall = summary["overall"]
    print("\nEngine efficiency (decode phase; predicted = Leviathan's formula with the measured cost curve)", file=out)
    print(f"{'mode':<10}{'decode x':>9}{'predicted':>10}{'efficiency':>11}{'iid alpha':>10}   verify ms by tokens "
          "verified (n: ms)", file=out)
    for mode in modes:
        row = overall.get(mode) or {}
        if "verify_curve_ms" not in row:
            continue
        curve = " ".join(f"{n}:{ms:.0f}" for n, ms in list(row["verify_curve_ms"].items())[:9])
        print(f"{mode:<10}{_fmt(row['decode_speedup'], 'x'):>9}{_fmt(row['predicted_speedup'], 'x'):>10}"
              f"{_fmt(row['efficiency']):>11}{_fmt(row['iid_alpha']):>10}   {curve}", file=out)
    parts = [p.removesuffix("_s") for p in OVERHEAD_PARTS] + ["python", "total"]
    print("\nOverhead outside the models, as a share of the time inside them", file=out)
    print(f"{'mode':<10}" + "".join(f"{p:>12}" for p in parts), file=out)
    for mode in modes:
        shares = (overall.get(mode) or {}).get("overhead_share")
        if shares:
            print(f"{mode:<10}" + "".join(f"{shares[p] * 100:>11.1f}%" for p in parts), file=out)
    if memory:
        print("\nMemory (resident MB): " + ", ".join(f"{k} {v:.0f}" for k, v in memory.items() if v is not None),
              file=out)
