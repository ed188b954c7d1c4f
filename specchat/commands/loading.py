"""What the model commands (chat, generate, serve, bench) run on: the pair the model options name, the drafter and
the generation config. It imports the engine (and torch), so the commands import it inside `run`."""

from __future__ import annotations

import sys

from ..core.errors import SpecchatError
from ..core.run_kind import RunKind
from ..core.vocabulary import default_drafter
from ..engine.decoding.sampling import SamplingParams
from ..engine.decoding.speculative import GenerationConfig
from ..engine.loading.load import LoadOptions, needs_conversion, runs_on_llama_cpp
from ..engine.loading.pair import load_pair
from ..models.sources import ModelSource, default_draft_for, default_head_for


def draft_source(args):
    """--draft, else the default draft of the target (the shipped one for the embedded model), else None."""
    return ModelSource.parse(args.draft) if args.draft else default_draft_for(ModelSource.parse(args.target))


def load_options(args) -> LoadOptions:
    return LoadOptions(device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                       allow_pickle=args.allow_pickle, backend=getattr(args, "backend", None),
                       threads=getattr(args, "threads", None), exactness=getattr(args, "exactness", "auto"))


def load(args, with_draft: bool, on_loaded=None):
    options = load_options(args)
    target = ModelSource.parse(args.target)
    draft = draft_source(args) if with_draft else None
    for source in (target, draft):
        if source is not None and needs_conversion(source) and (source is draft or args.backend == "torch"):
            print(f"Preparing {source.describe()} for its first use (dequantising, about 30 s)…", file=sys.stderr,
                  flush=True)
    pair = load_pair(target, draft, options, on_loaded)
    pair.head_folder = getattr(args, "head", None)
    return pair


def load_for(args, drafter: str):
    """The pair, with the draft model when the drafter needs one."""
    return load(args, with_draft=RunKind.ours(drafter).needs_draft_model)


def has_head(args) -> bool:
    return getattr(args, "head", None) is not None or default_head_for(ModelSource.parse(args.target)) is not None


def drafter_choice(args) -> str:
    """--drafter, else vocabulary.default_drafter for this target: prompt lookup first, with the pair's draft model
    (--draft) where it pays, or its draft head on the torch path."""
    has_draft = draft_source(args) is not None
    on_llama_cpp = runs_on_llama_cpp(ModelSource.parse(args.target), load_options(args))
    drafter = getattr(args, "drafter", None) or default_drafter(
        on_llama_cpp, has_draft=has_draft, has_head=has_head(args) and not args.draft)
    if RunKind.ours(drafter).needs_draft_model and not has_draft:
        raise SpecchatError(f"the {drafter} drafter needs a draft model (give --draft SRC)")
    return drafter


def generation_config(args) -> GenerationConfig:
    if args.top_k < 0:
        raise SpecchatError(f"--top-k must be >= 0 (got {args.top_k})")
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens, k=args.k, adaptive_k=not args.no_adaptive, seed=args.seed,
        sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k),
        stop_strings=tuple(getattr(args, "stop", ()) or ()),
    )
