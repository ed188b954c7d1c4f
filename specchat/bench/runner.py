"""`specchat bench`'s runner: every mode of each prompt, ours, transformers' generate(), llama.cpp's (peers.py,
peer_server.py) and a remote engine's, measured in one process and compared with our plain decoding. Every mode is
a ChatEngine (engine/chat_engine.py): one `stream` for all of them."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from ..core.errors import SpecchatError
from ..core.run_kind import RunKind, speedup
from ..core.vocabulary import PLAIN, UNKNOWN_TOKEN
from ..engine.chat_engine import ChatEngine, EngineCache, reply_to
from ..engine.chat_prompt import Message
from ..engine.decoding.cost_curve import CostCurve
from ..engine.decoding.events import GenerationStats
from ..engine.decoding.speculative import GenerationConfig
from ..engine.drafting.past_replies import SuffixIndex
from ..engine.loading.load import LoadOptions, load_model
from ..engine.loading.pair import ModelPair
from ..models.sources import ModelSource
from .oracle import PlainTurn, measured_curve, oracle_of
from .peer_engine import PeerEngine, PeerReply
from .peer_server import SERVER_MODES, bench_peer
from .peers import LlamaCppPeer
from .suites import BenchPrompt

OVERHEAD_PARTS = GenerationStats.OVERHEAD_PARTS


@dataclass
class TurnOutput:
    """One turn's reply in one mode: its token ids, text and wall time, and the engine's figures where it has them."""

    token_ids: list[int]
    text: str
    wall_s: float
    stats: object | None = None  # GenerationStats for our modes
    draft_proposed: int | None = None  # a peer's own draft counters (llama-server's)
    draft_accepted: int | None = None
    prompt_ids: list[int] | None = None  # the prompt the reply followed (plain decoding's, for the oracle)


@dataclass
class BenchSettings:
    """What every mode of a benchmark runs with (the command line's options, or the dashboard's dialog)."""

    k: int = 5
    adaptive: bool = True
    max_new_tokens: int = 128
    warmup_tokens: int = 16
    repeats: int = 1  # runs of each turn; the fastest counts (greedy output is the same every time)
    packed_weights: bool = True  # our engine's verifications use MKL-packed weights (engine/backends/torch/packed.py)
    peer_draft: str | None = None  # llama-server-draft's GGUF draft, when the pair's draft is not one
    default_drafter: str = "pld"  # what the "default" mode runs: the drafter the app picks for this pair here
    universal_draft: str | None = None  # the "universal" mode's draft (another tokenizer), when not the pair's
    profile: bool = False  # --profile: our engines' phases wait for the device, so a GPU's time is where it is spent

    def config(self, max_new_tokens: int | None = None) -> GenerationConfig:
        """What every mode's turn runs with (and is recorded with: bench/report.py's RunContext): greedy, seed 0,
        K as set, replies of up to max_new_tokens (None: the settings')."""
        length = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        return GenerationConfig(max_new_tokens=length, k=self.k, adaptive_k=self.adaptive, seed=0)


@dataclass
class ModeRecord:
    """One prompt (all its turns) in one mode: the figures summed over its turns, and against plain decoding's
    record of the same prompt its speedup and whether its output is the same (set by the runner)."""

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
    # Plain decoding's record only: each turn's ids and seconds, and the hindsight oracle over them (oracle.py):
    # its seconds and plain decoding's under its model (prefill included, summed over the turns), the tokens it
    # copied, and its speedups, prefill included and decode only. None where it was not worked out (no curve).
    plain_turns: list[PlainTurn] = field(repr=False, default_factory=list)
    oracle_s: float | None = None
    oracle_plain_s: float | None = None
    oracle_copied: int | None = None
    oracle_speedup: float | None = None
    oracle_decode_speedup: float | None = None

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

    def run_figures(self) -> dict:
        """The record's figures under GenerationStats.to_dict()'s keys, for storage's run_record (a count the mode
        does not have is 0; acceptance by position is accepted / proposed at each position)."""
        proposed, accepted = list(self.proposed_by_position), list(self.accepted_by_position)
        return {"new_tokens": self.new_tokens, "target_passes": self.target_passes or 0,
                "draft_proposed": self.draft_proposed or 0, "draft_accepted": self.draft_accepted or 0,
                "tokens_per_s": self.tokens_per_s, "wall_s": self.wall_s, "draft_s": self.draft_s or 0.0,
                "verify_s": self.verify_s or 0.0, "proposed_by_position": proposed,
                "accepted_by_position": accepted,
                "acceptance_by_position": [a / p if p else 0.0 for a, p in zip(accepted, proposed)]}

    def to_dict(self) -> dict:
        """The record in the JSON report (`records`), its figures rounded."""
        return {"question_id": self.question_id, "category": self.category, "mode": self.mode,
                "new_tokens": self.new_tokens, "wall_s": round(self.wall_s, 4),
                "tokens_per_s": round(self.tokens_per_s, 3), "speedup": rounded(self.speedup),
                "alpha": rounded(self.alpha), "tau": rounded(self.tau), "identical": self.identical,
                "target_passes": self.target_passes, "draft_proposed": self.draft_proposed,
                "draft_accepted": self.draft_accepted, "oracle_speedup": rounded(self.oracle_speedup),
                "oracle_decode_speedup": rounded(self.oracle_decode_speedup), "oracle_copied": self.oracle_copied,
                "text": self.text}


class BenchRunner:
    """Runs prompts in modes on one loaded pair. Every mode is a ChatEngine (ours from an EngineCache, each mode
    apart; the peers through PeerEngine; a remote engine as it is), built once and kept for the run."""

    def __init__(self, pair: ModelPair, settings: BenchSettings, remote=None):
        """remote: a remote engine (specchat.remote.RemoteEngine) for the "remote" mode: the target on another
        machine, which reads the conversation as messages; its text is compared with plain decoding's here, and
        its speed, another machine's, is not turned into a speedup."""
        self.pair = pair
        self.settings = settings
        self.remote = remote
        self.tokenizer = pair.target.tokenizer
        self.engines = EngineCache(pair)
        self._universal_engines: EngineCache | None = None  # the "universal" mode's own draft, when given
        self._modes: dict[str, object] = {}  # mode -> its ChatEngine
        # Each history-drafting mode's past replies: its own earlier replies in this run, added as each turn ends
        # (as the app adds a finished reply), so a prompt is drafted from the prompts run before it, never itself.
        self.histories: dict[str, SuffixIndex] = {}
        self._remember = True

    def drafter_of(self, mode: str) -> str:
        """The drafter a mode of ours runs ("default" is the app's own pick)."""
        return self.settings.default_drafter if mode == "default" else mode

    def engine_of(self, mode: str) -> ChatEngine:
        """The mode's ChatEngine, made on first use."""
        if mode not in self._modes:
            self._modes[mode] = self._new_engine(mode)
        return self._modes[mode]

    def _new_engine(self, mode: str) -> ChatEngine:
        kind = RunKind.parse(mode)
        if kind.is_remote:
            if self.remote is None:
                raise SpecchatError("the remote mode needs a remote engine: connect to one first (API menu)")
            return self.remote
        if kind.is_reference:
            return PeerEngine(self.tokenizer, lambda ids, limit: self._run_hf(kind.drafter, ids, limit))
        if kind.is_llama_cpp:
            return self._llama_cpp_engine(mode)
        if kind.is_llama_server:
            server = bench_peer(mode, self.pair, self.settings.k, self.settings.peer_draft)
            return PeerEngine(self.tokenizer, server.generate, close=server.close)
        drafter = self.drafter_of(mode)
        history = self.histories.setdefault(mode, SuffixIndex()) if RunKind.parse(drafter).needs_history else None
        engines = self._universal() if drafter == "universal" and self.settings.universal_draft else self.engines
        # the whole conversation, as the peers read it: never a shorter prompt than theirs
        engine = engines.chat_engine(drafter, history, self.settings.packed_weights, apart=mode, whole_prompt=True)
        engine.engine.settle_phases = self.settings.profile
        return engine

    def _universal(self) -> EngineCache:
        if self._universal_engines is None:
            options = LoadOptions(threads=getattr(self.pair.target.native, "threads", None), exactness="distribution")
            draft = load_model(ModelSource.parse(self.settings.universal_draft), options)
            self._universal_engines = EngineCache(ModelPair(self.pair.target, draft))
        return self._universal_engines

    def _llama_cpp_engine(self, mode: str) -> PeerEngine:
        gguf = self.pair.target.gguf_path()
        if gguf is None:
            raise SpecchatError(f"the {mode} mode runs llama.cpp on the target's GGUF file; "
                                f"{self.pair.target.name} is not one")
        native = self.pair.target.native
        peer = LlamaCppPeer(gguf, self.pair.target.eos_token_ids(), prompt_lookup=RunKind.parse(mode).drafter == "pld",
                            threads=native.threads if native is not None else None)
        return PeerEngine(self.tokenizer, lambda ids, limit: PeerReply(*peer.generate(ids, limit)))

    def run_turn(self, mode: str, messages: list[Message], max_new_tokens: int) -> TurnOutput:
        """One turn in `mode`: the reply to the conversation `messages`, greedy with seed 0."""
        engine = self.engine_of(mode)
        result = reply_to(engine, messages, None, self.settings.config(max_new_tokens))
        if RunKind.parse(mode).is_remote:  # the server's token count (its ids are unknown); no figures of ours
            return TurnOutput([UNKNOWN_TOKEN] * result.stats.new_tokens, result.text, result.stats.wall_s)
        if isinstance(engine, PeerEngine):  # another program's: its own draft counters, no figures of ours
            return TurnOutput(list(result.token_ids), result.text, result.stats.wall_s,
                              draft_proposed=engine.last.draft_proposed, draft_accepted=engine.last.draft_accepted)
        prompt_ids = None
        if RunKind.parse(mode).is_plain and hasattr(engine, "fit"):  # the prompt it read (remembered: no new work)
            prompt_ids = list(engine.fit(messages, None, max_new_tokens).ids)
        return TurnOutput(list(result.token_ids), result.text, result.stats.wall_s, result.stats,
                          prompt_ids=prompt_ids)

    @torch.inference_mode()
    def _run_hf(self, drafter: str, prompt_ids: list[int], max_new_tokens: int) -> PeerReply:
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
        return PeerReply(output[0, len(prompt_ids):].tolist(), wall)

    def run_prompt(self, prompt: BenchPrompt, mode: str, max_new_tokens: int | None = None) -> ModeRecord:
        """All turns of one prompt; each later turn follows this mode's own earlier replies."""
        history: list[Message] = []
        outputs = []
        for turn in prompt.turns:
            history.append(Message("user", turn))
            output = self._fastest_of_repeats(mode, list(history), max_new_tokens or self.settings.max_new_tokens)
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
            proposed_by_position=add_lists(s.proposed_by_position for s in ours),
            accepted_by_position=add_lists(s.accepted_by_position for s in ours),
            prefill_s=sum(s.prefill_s for s in ours) if ours else None,
            rejected_steps=sum(s.rejected_steps for s in ours) if ours else None,
            steps_by_k=add_lists(s.steps_by_k for s in ours),
            verify_s_by_k=add_lists(s.verify_s_by_k for s in ours),
            overhead_s={part: sum(getattr(s, part) for s in ours) for part in (*OVERHEAD_PARTS, "other_s")}
            if ours else {},
            token_ids=[t for o in outputs for t in o.token_ids],
            text="\n\n".join(o.text for o in outputs),
            plain_turns=plain_turns(outputs) if RunKind.parse(mode).is_plain else [],
        )

    def _fastest_of_repeats(self, mode: str, messages: list[Message], max_new_tokens: int) -> TurnOutput:
        """On a shared, noisy machine the minimum of a few runs is the best estimate of the undisturbed time."""
        runs = [self.run_turn(mode, messages, max_new_tokens) for _ in range(self.settings.repeats)]
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
                if mode in self._modes:
                    self._modes.pop(mode).close()

    def _run(self, prompts, modes, progress, cancel) -> list[ModeRecord]:
        self.warm_up(modes, prompts[0])
        records = []
        total = len(prompts) * len(modes)
        for prompt in prompts:
            by_mode = {}
            for mode in modes:
                if cancel is not None and cancel.is_set():
                    return _with_measured_oracles(records)
                record = self.run_prompt(prompt, mode)
                if mode == PLAIN:
                    attach_oracle(record, self.oracle_curve())
                by_mode[mode] = record
                if progress:
                    progress(len(records) + len(by_mode), total, record)
            _compare_with_plain(by_mode)
            records.extend(by_mode.values())
        return _with_measured_oracles(records)

    def oracle_curve(self) -> CostCurve | None:
        """The verification cost curve the oracle prices its passes on: the plain engine's (StepCosts.curve,
        measured at load for llama.cpp and torch targets alike), or None (a mode with no engine of ours:
        _with_measured_oracles then builds one from the run's own steps)."""
        engine = getattr(self._modes.get(PLAIN), "engine", None)
        return getattr(getattr(engine, "step_costs", None), "curve", None)


def plain_turns(outputs: list[TurnOutput]) -> list[PlainTurn]:
    """Plain decoding's turns as the oracle reads them (oracle.PlainTurn): prompt and reply ids, the prefill's
    seconds and the decoding's after it (the turn's wall time less its prefill). Empty unless every turn has its
    prompt ids and our figures."""
    if not outputs or any(o.prompt_ids is None or o.stats is None for o in outputs):
        return []
    return [PlainTurn(tuple(o.prompt_ids), tuple(o.token_ids), o.stats.prefill_s,
                      max(o.wall_s - o.stats.prefill_s, 0.0)) for o in outputs]


def attach_oracle(record: ModeRecord, curve: CostCurve | None) -> None:
    """Sets plain decoding's record's oracle figures (oracle_s, oracle_plain_s, oracle_copied and the speedups,
    prefill included and decode only), over its turns on `curve`; nothing without a curve or turns."""
    if curve is None or not record.plain_turns:
        return
    turns = [oracle_of(turn, curve) for turn in record.plain_turns]
    record.oracle_s = sum(t.oracle_s for t in turns)
    record.oracle_plain_s = sum(t.plain_s for t in turns)
    record.oracle_copied = sum(t.copied for t in turns)
    prefill = sum(t.prefill_s for t in turns)
    record.oracle_speedup = record.oracle_plain_s / record.oracle_s if record.oracle_s > 0 else None
    decode = record.oracle_s - prefill
    record.oracle_decode_speedup = (record.oracle_plain_s - prefill) / decode if decode > 0 else None


def _with_measured_oracles(records: list[ModeRecord]) -> list[ModeRecord]:
    """The records, with the oracle of every plain record that has none yet (its engine had no cost curve)
    priced on a curve measured from the run's own steps (oracle.measured_curve: every mode of ours, plain
    decoding's one-token steps the baseline); left without one when the run did not measure a longer pass."""
    missing = [r for r in records if r.mode == PLAIN and r.plain_turns and r.oracle_s is None]
    if missing:
        curve = measured_curve((r.steps_by_k, r.verify_s_by_k) for r in records if r.steps_by_k)
        for record in missing:
            attach_oracle(record, curve)
    return records


def _compare_with_plain(by_mode: dict[str, ModeRecord]) -> None:
    """Each record of one prompt against plain decoding's (by_mode[PLAIN]): whether its output is the same (its
    text, for a remote engine, whose token ids are unknown) and its speedup (run_kind.speedup: none for a remote
    engine, whose speed is another machine's). Sets `identical` and `speedup` in place."""
    plain = by_mode[PLAIN]
    for record in by_mode.values():
        if RunKind.parse(record.mode).is_remote:
            record.identical = record.text == plain.text
        else:
            record.identical = record.token_ids == plain.token_ids
        record.speedup = speedup(record.tokens_per_s, plain.tokens_per_s, record.mode)


def add_lists(lists: Iterable[list[int]]) -> list[int]:
    """Per-position sums of lists of different lengths (a longer list extends the sum): the by-position and
    by-K counters of several turns or records, summed."""
    total: list[int] = []
    for values in lists:
        total += [0] * (len(values) - len(total))
        for i, value in enumerate(values):
            total[i] += value
    return total


def rounded(value: float | None, digits: int = 3) -> float | None:
    """A figure of the report rounded to `digits`; None stays None (a figure the mode does not have)."""
    return None if value is None else round(value, digits)
