"""A target model with an optional draft model, checked for compatibility before the draft's weights load; the draft
loaded with the target, or later, by the first engine whose drafter needs it (load_pair's draft_later)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Generator

import torch

from ...core.errors import IncompatibleDraftError, SpecchatError
from ...core.vocabulary import DISTRIBUTION, HEAD_DRAFTERS, LOOKUP_DRAFTERS, MODEL_DRAFTERS, drafter_kind
from ...models.sources import ModelSource, default_head_for
from ..backends.torch.runners import STATIC_CACHE_TOKENS, runner_for
from ..decoding.cost_curve import PASS_SIZES, CostCurve, curve_for, measure_curve
from ..decoding.speculative import SpeculativeEngine
from ..drafting import TargetStateReader, make_drafter
from ..drafting.eagle_network import load_head
from ..drafting.past_replies import SuffixIndex
from .compat import CompatibilityReport, check_pair
from .load import LoadedModel, LoadOptions, load_config, load_model, load_tokenizer


@dataclass
class ModelPair:
    target: LoadedModel
    draft: LoadedModel | None = None  # the draft model, once loaded
    # The EAGLE-style head's folder (None: the default for the target); loaded on first use, a few MB.
    head_folder: Path | None = None
    # Engines verify 4-17 tokens with MKL-packed copies of the target's layers (engine/backends/torch/packed.py): faster where MKL
    # packs, for a second copy of the layers in memory (docs/performance-torch.md). False: plain weights only.
    packed_weights: bool = True
    # A draft model not loaded yet (load_pair's draft_later), with the options to load it with: load_draft loads it,
    # checked against the target first, when the first engine of a model drafter is built (a race lane, a benchmark).
    draft_source: ModelSource | None = None
    draft_options: LoadOptions | None = None
    _draft_failure: SpecchatError | None = field(default=None, repr=False, compare=False)  # load_draft's, said again
    _draft_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _head: torch.nn.Module | None = field(default=None, repr=False)
    _static_runners: dict = field(default_factory=dict, repr=False)  # on a GPU: _torch_runner
    _curves: dict = field(default_factory=dict, repr=False)  # a torch target's cost curves: cost_curve

    def context_window(self) -> int:
        """How many tokens the target reads at most (prompt and reply together)."""
        native = self.target.native
        if native is not None:
            return native.context_window
        window = getattr(self.target.model.config, "max_position_embeddings", None) or 1 << 30
        on_gpu = self.target.device.type == "cuda"  # StaticCacheRunner's static cache holds this many at most
        return min(window, STATIC_CACHE_TOKENS) if on_gpu else window

    def check_drafter(self, drafter: str) -> None:
        """SpecchatError if this pair cannot run `drafter` (no draft model, a draft that failed to load, no head),
        without building or loading anything: the GUI thread asks it."""
        if drafter in MODEL_DRAFTERS and not self.has_draft:
            raise SpecchatError(f"the {drafter} drafter needs a draft model (give --draft SRC)")
        if drafter in MODEL_DRAFTERS and self._draft_failure is not None:
            raise self._draft_failure.with_traceback(None)
        if drafter in HEAD_DRAFTERS and not self.has_head:
            raise SpecchatError(f"no draft head is trained for {self.target.name} (make one with "
                                "`specchat train-head`, then give --head DIR)")

    def engine(self, drafter: str, packed_weights: bool | None = None,
               history: SuffixIndex | None = None, checked: bool = False) -> SpeculativeEngine:
        """An engine for `drafter` on the target's backend; packed_weights None: the pair's setting (torch
        targets only). `history`: past replies for the lookup kinds to draft from (needed by "history").
        SpecchatError when the pair cannot run the drafter (check_drafter), unless the caller has checked already
        (checked: a chat reply checks on the GUI thread before it starts, once)."""
        if not checked:
            self.check_drafter(drafter)
        if drafter in MODEL_DRAFTERS:
            self.load_draft()  # a draft left for later loads now, once (IncompatibleDraftError when it cannot draft)
        if drafter_kind(drafter).needs_history and history is None:
            history = SuffixIndex()  # nothing yet: it drafts like prompt lookup until replies are added
        draft_model = self.draft.runnable if self.draft is not None else None
        head = self.head() if drafter in HEAD_DRAFTERS else None
        draft_vocab = self.draft.proposal_vocab if self.draft is not None else None
        # With both tokenizers the draft-model kinds draft through text when they differ (drafting/universal.py).
        tokenizers = (self.target.tokenizer, self.draft.tokenizer) if self.draft is not None else None
        made = make_drafter(drafter, draft_model, head, self._head_target() if head is not None else None,
                            draft_vocab, history=history if drafter in LOOKUP_DRAFTERS else None,
                            tokenizers=tokenizers)
        native = self.target.native
        packed = self.packed_weights if packed_weights is None else packed_weights
        reads_states = isinstance(made, TargetStateReader)  # its runner keeps the target's hidden states
        if native is not None:
            runner = native.runner(keeps_features=reads_states)
        else:
            runner = self._torch_runner(reads_states, packed)
        engine = SpeculativeEngine(runner, self.target.tokenizer, made, eos_token_ids=self.target.eos_token_ids(),
                                   cost_curve=self.cost_curve(runner, packed),
                                   one_time=native.one_time if native is not None else None)
        if drafter in MODEL_DRAFTERS and self.draft is not None and self.target.weight_bytes:
            # a draft token's price before the draft has run: its weights against the target's (StepCosts)
            engine.step_costs.draft_prior = self.draft.weight_bytes / self.target.weight_bytes
        return engine

    def cost_curve(self, runner, packed_weights: bool = True) -> CostCurve | Callable[[], CostCurve | None]:
        """The verification cost curve (decoding/cost_curve.py) of the target's passes on `runner`, which the K
        policy prices on: for a llama.cpp target, LlamaCppModel.known_cost_curve (the engine asks it at each reply
        until the background measurement is in: core/one_time.py); a torch target's measured on
        the runner (its sizes up to the runner's longest pass) and kept in the user cache likewise, per model,
        dtype, device, kind of runner, packed weights and threads, so that it costs its seconds once."""
        native = self.target.native
        if native is not None:  # known, or measured in the background while no reply runs
            return native.known_cost_curve
        key = (f"torch:{self.target.source.describe()}:{self.target.dtype}:{self.target.place}:"
               f"{type(runner).__name__}:features={runner.keeps_features}:packed={packed_weights}:"
               f"threads={torch.get_num_threads()}")
        if key not in self._curves:
            rows = getattr(runner, "max_pass_rows", None) or PASS_SIZES[-1]
            self._curves[key] = curve_for(key, lambda: measure_curve(runner, [n for n in PASS_SIZES if n <= rows]))
        return self._curves[key]

    def _torch_runner(self, keeps_features: bool, packed_weights: bool):
        """The torch target's runner. On a GPU the pair keeps one StaticCacheRunner per kind (keeping hidden states
        or not): its static cache and compiled steps are made once, by the first engine, while loading, and every
        engine of the pair shares them (they never run at once)."""
        model = self.target.model
        if next(model.parameters()).device.type != "cuda":
            return runner_for(model, keeps_features=keeps_features, packed_weights=packed_weights)
        if keeps_features not in self._static_runners:
            self._static_runners[keeps_features] = runner_for(model, keeps_features=keeps_features)
        return self._static_runners[keeps_features]

    def _head_target(self) -> torch.nn.Module:
        """Where a draft head finds the target's embeddings and output head: the model, or for a llama.cpp target
        just those two matrices read from its file."""
        native = self.target.native
        return native.embeddings() if native is not None else self.target.model

    @property
    def has_draft(self) -> bool:
        """Whether the pair has a draft model, loaded or left for later (what offers the model drafters)."""
        return self.draft is not None or self.draft_source is not None

    @property
    def draft_label(self) -> str | None:
        """The draft model's name, loaded or not yet; None when the pair has none."""
        if self.draft is not None:
            return self.draft.name
        return self.draft_source.describe() if self.draft_source is not None else None

    def load_draft(self) -> LoadedModel | None:
        """The draft model (None: the pair has none), loading a draft left for later now: checked against the
        target first (check_draft: tokenizers and configs), then its weights, beside the target. Model work, for the
        model thread; once per pair (a lock keeps two callers from loading it twice). A SpecchatError
        (IncompatibleDraftError, ModelLoadError) is kept and raised again at once by later calls and check_drafter,
        so a bad draft costs its seconds once and is said wherever a model drafter is asked for."""
        with self._draft_lock:
            if self.draft is None and self.draft_source is not None:
                if self._draft_failure is not None:
                    raise self._draft_failure.with_traceback(None)
                try:
                    self.draft = loaded_draft(self.target, self.draft_source, self.draft_options or LoadOptions())
                except SpecchatError as error:
                    self._draft_failure = error
                    raise
            return self.draft

    def draft_name(self, drafter: str) -> str | None:
        """What drafted for `drafter`, for the statistics: the draft model, the head, or None (model-free)."""
        if drafter in MODEL_DRAFTERS and self.has_draft:
            return self.draft_label
        if drafter in HEAD_DRAFTERS and self.has_head:
            folder = self._head_location()
            return f"EAGLE head ({folder.name if folder else 'loaded'})"
        return None

    @property
    def has_head(self) -> bool:
        return self._head is not None or self._head_location() is not None

    def head(self) -> torch.nn.Module:
        if self._head is None:
            folder = self._head_location()
            if folder is None:
                raise SpecchatError(f"no draft head is trained for {self.target.name} (make one with "
                                    "`specchat train-head`, then give --head DIR)")
            self._head = load_head(folder, self._head_target())
        return self._head

    def _head_location(self) -> Path | None:
        return Path(self.head_folder) if self.head_folder is not None else default_head_for(self.target.source)


def check_sources(target: ModelSource, draft: ModelSource, options: LoadOptions = LoadOptions()) -> CompatibilityReport:
    """Compares tokenizers and configs only, so a bad pair is refused in seconds, before any weights load."""
    steps = checking_sources(target, draft, options)
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value


def checking_sources(target: ModelSource, draft: ModelSource, options: LoadOptions = LoadOptions()
                     ) -> Generator[str, None, CompatibilityReport]:
    """check_sources step by step, for a window to follow: yields what it does next ("reading the target's
    tokenizer (1 of 3)"), before each part that can be slow, and returns the report. Reading a GGUF file's tokenizer
    converts it the first time (half a minute for a 1.5B model), so a window runs this off its GUI thread."""
    yield "reading the target's tokenizer (1 of 3)"
    target_tokenizer = load_tokenizer(target, options)
    yield "reading the draft's tokenizer (2 of 3)"
    draft_tokenizer = load_tokenizer(draft, options)
    yield "comparing the tokenizers (3 of 3)"
    return check_pair(target_tokenizer, draft_tokenizer, load_config(target, options), load_config(draft, options))


def check_draft(target: ModelSource, draft: ModelSource, options: LoadOptions = LoadOptions()) -> None:
    """IncompatibleDraftError, saying why, unless `draft` can draft for `target` (check_sources)."""
    report = check_sources(target, draft, options)
    if not report.compatible:
        raise IncompatibleDraftError(f"{draft.describe()} cannot draft for {target.describe()}: "
                                     + "; ".join(report.reasons))


def loaded_draft(target: LoadedModel, draft: ModelSource, options: LoadOptions = LoadOptions(),
                 check: bool = True) -> LoadedModel:
    """The draft model `draft` loaded for the loaded `target` with `options` (check: check_draft first) and placed
    beside it. A GGUF draft runs on llama.cpp in a context of its own (drafting/backends.py), on its fastest kernels:
    the draft's numbers only decide what is proposed, never what is accepted."""
    if check:
        check_draft(target.source, draft, options)
    return beside_the_target(load_model(draft, replace(options, exactness=DISTRIBUTION)), target)


def load_pair(target: ModelSource, draft: ModelSource | None = None, options: LoadOptions = LoadOptions(),
              on_loaded: Callable[[str], None] | None = None, draft_later: bool = False) -> ModelPair:
    """The target `target` with the draft `draft` (None: none), loaded with `options`; a bad pair is refused
    (IncompatibleDraftError) before any weights load. `on_loaded("target")` / `on_loaded("draft")` after each model
    is in memory (e.g. to measure memory). draft_later: the draft is neither checked nor loaded now, only kept as
    the pair's draft_source, for the first engine of a model drafter to load (ModelPair.load_draft): the window's
    chat, when its drafter needs no draft model, is ready without the draft's seconds (and transformers')."""
    if draft is not None and not draft_later:
        check_draft(target, draft, options)
    pair = ModelPair(load_model(target, options), draft_source=draft, draft_options=options)
    if on_loaded:
        on_loaded("target")
    if draft is not None and not draft_later:
        pair.draft = loaded_draft(pair.target, draft, options, check=False)
        if on_loaded:
            on_loaded("draft")
    return pair


def beside_the_target(draft: LoadedModel, target: LoadedModel) -> LoadedModel:
    """The draft where its tokens meet the target's: a torch draft of a llama.cpp target (whose logits come back
    to the host, wherever its layers run) moves to the CPU in float32, since the engine verifies on the target's
    device and samples with the target's generator; a GGUF draft stays where llama.cpp put it."""
    if target.native is None or draft.native is not None or draft.device.type == "cpu":
        return draft
    model = draft.model.to(device="cpu", dtype=torch.float32)
    return replace(draft, model=model, device=torch.device("cpu"), dtype=torch.float32,
                   proposal_vocab=draft.proposal_vocab.cpu() if draft.proposal_vocab is not None else None)
