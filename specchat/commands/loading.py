"""What the model commands (chat, generate, serve, bench) run on: their model and decoding options read once from
the command line (RunOptions, built by run_options at the edge of each command's `run`), and the pair those
options name. It imports the engine (and torch), so the commands import it inside `run`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import SpecchatError
from ..core.run_kind import RunKind
from ..core.vocabulary import default_drafter
from ..engine.decoding.sampling import SamplingParams
from ..engine.decoding.speculative import GenerationConfig
from ..engine.loading.load import LoadOptions, needs_conversion, runs_on_llama_cpp
from ..engine.loading.pair import ModelPair, load_pair
from ..models.sources import ModelSource, default_draft_for, default_head_for


@dataclass(frozen=True)
class RunOptions:
    """A model command's options, read from its command line once (run_options): what loads and how it decodes.
    Everything below the command's `run` takes this, never the parsed `args`."""

    target: ModelSource
    draft: ModelSource | None  # --draft, else the target's default draft (the shipped one for the embedded model)
    head: Path | None  # --head; None: the target's default head (ModelPair.head_folder)
    load: LoadOptions
    drafter: str  # --drafter, else vocabulary.default_drafter for this pair
    generation: GenerationConfig | None  # None where the command has no decoding options (bench: BenchSettings)


def run_options(args: argparse.Namespace, decoding: bool = True) -> RunOptions:
    """The RunOptions of a model command, from its parsed command line `args` (model_options, and decoding_options
    where `decoding`: chat, generate and serve; bench has only --k, --no-adaptive and --max-new-tokens, which its
    BenchSettings read, so its drafter is the default and it gets no GenerationConfig). Each source text is parsed
    once and the default draft, head and drafter are resolved once, here: the one place that knows which command
    has which flags. Raises SpecchatError for bad input (an unknown source, a drafter that needs a
    draft model and has none), which the CLI prints as one line."""
    generation = _generation_config(args) if decoding else None
    target = ModelSource.parse(args.target)
    draft = ModelSource.parse(args.draft) if args.draft else default_draft_for(target)
    load = LoadOptions(device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                       allow_pickle=args.allow_pickle, backend=args.backend, threads=args.threads,
                       exactness=args.exactness)
    # a given --draft wins over the target's default head when choosing the drafter (the head still loads)
    head_drafts = (args.head is not None or default_head_for(target) is not None) and not args.draft
    drafter = _drafter(args.drafter if decoding else None, target, draft, load, head_drafts)
    return RunOptions(target=target, draft=draft, head=args.head, load=load, drafter=drafter, generation=generation)


def _drafter(given: str | None, target: ModelSource, draft: ModelSource | None, load: LoadOptions,
             head_drafts: bool) -> str:
    """The drafter a command runs: `given` (--drafter), else vocabulary.default_drafter for this target, prompt
    lookup first, with the pair's draft model where it pays or its draft head (`head_drafts`) on the torch path.
    Raises SpecchatError when the drafter needs a draft model and `draft` is None, ModelLoadError when --backend
    llama.cpp cannot run the target."""
    on_llama_cpp = runs_on_llama_cpp(target, load)
    drafter = given or default_drafter(on_llama_cpp, has_draft=draft is not None, has_head=head_drafts)
    if RunKind.ours(drafter).needs_draft_model and draft is None:
        raise SpecchatError(f"the {drafter} drafter needs a draft model (give --draft SRC)")
    return drafter


def _generation_config(args: argparse.Namespace) -> GenerationConfig:
    """The GenerationConfig of decoding_options (and generate's --stop, the only command that has it); argparse
    has checked every value's range (options.py)."""
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens, k=args.k, adaptive_k=not args.no_adaptive, seed=args.seed,
        sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k),
        stop_strings=tuple(args.stop) if "stop" in args else (),
    )


def load(options: RunOptions, with_draft: bool, on_loaded=None) -> ModelPair:
    """The pair `options` name, with its draft model when `with_draft`, and its head folder set; says on stderr when
    a GGUF file is first dequantised (about 30 s). `on_loaded` as for engine.loading.pair.load_pair."""
    draft = options.draft if with_draft else None
    for source in (options.target, draft):
        if source is not None and needs_conversion(source) and (source is draft or options.load.backend == "torch"):
            print(f"Preparing {source.describe()} for its first use (dequantising, about 30 s)…", file=sys.stderr,
                  flush=True)
    pair = load_pair(options.target, draft, options.load, on_loaded)
    pair.head_folder = options.head
    return pair


def load_for(options: RunOptions) -> ModelPair:
    """The pair `options` name, with the draft model when their drafter needs one."""
    return load(options, with_draft=RunKind.ours(options.drafter).needs_draft_model)
