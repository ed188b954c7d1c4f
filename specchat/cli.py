"""Command-line interface: `specchat [chat|generate|serve|bench|costs|models|stats|...]`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from .run_kind import DRAFTER_KINDS, MODEL_DRAFTERS, REMOTE, SHAPE_NAMES, RunKind  # torch-free: `--help` stays fast

EXIT_USAGE = 2


def gui_main() -> int:
    """The GUI entry point (`specchat-gui`, no console window on Windows): always the desktop window."""
    _quiet_libraries(allow_network=False, progress_bars=False)
    from .ui.app import run_gui

    return run_gui()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "stats":  # stats reads SQLite only: no torch, no transformers, instant
        downloading = args.command == "models" and getattr(args, "models_command", "") == "download"
        _quiet_libraries(allow_network=downloading, progress_bars=downloading or args.command in ("train-draft", "train-head"))
    try:
        return args.handler(args)
    except _user_errors(args.command) as error:
        print(f"specchat: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\nspecchat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `| head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # a bug, not bad input: one line, with a way to see the details
        if os.environ.get("SPECCHAT_DEBUG"):
            raise
        print(f"specchat: unexpected error: {type(error).__name__}: {error} (set SPECCHAT_DEBUG=1 for details)",
              file=sys.stderr)
        return 1


def _user_errors(command: str | None) -> tuple[type[Exception], ...]:
    """Errors that are the user's to fix (one line, exit code 2); the engine's are not imported for `stats`."""
    from .storage import StorageError

    if command == "stats":
        return (StorageError,)
    from .engine import SpecchatError

    return (SpecchatError, StorageError)


def _quiet_libraries(allow_network: bool, progress_bars: bool) -> None:
    """No network unless the user asked for a download; progress bars only where the command is long and shows
    its own (downloads, training); no library chatter."""
    if not allow_network:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not progress_bars:
        os.environ.setdefault("TQDM_DISABLE", "1")  # e.g. transformers' GGUF conversion bar; we print one line
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import warnings

    warnings.filterwarnings("ignore")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    if not allow_network:
        transformers.utils.logging.disable_progress_bar()


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def unit_interval(text: str) -> float:
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] (got {value})")
    return value


def non_negative(text: str) -> float:
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (got {value})")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="specchat", description=__doc__)
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    parser.add_argument("--self-test", action="store_true",
                        help="load the default models headless, check that speculative and plain decoding agree, "
                             "print a one-line verdict and exit 0 (pass) or 1 (fail)")
    parser.set_defaults(handler=run_app, command=None)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    chat = commands.add_parser("chat", help="interactive chat in the terminal")
    _model_options(chat)
    _decoding_options(chat)
    chat.add_argument("--system", help="system prompt")
    chat.set_defaults(handler=run_chat)

    generate = commands.add_parser("generate", help="generate one reply and print it")
    generate.add_argument("--prompt", required=True, help="the user message")
    generate.add_argument("--system", help="system prompt")
    _model_options(generate)
    _decoding_options(generate)
    generate.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop string (repeatable)")
    generate.add_argument("--show-rejected", action="store_true", help="show rejected draft tokens, struck through")
    generate.add_argument("--json", action="store_true", help="print one JSON record instead of streaming")
    generate.set_defaults(handler=run_generate)

    bench = commands.add_parser("bench", help="benchmark the drafters against plain decoding and transformers")
    bench.add_argument("--prompts", type=Path, help="Spec-Bench JSONL file (default: the shipped suite)")
    bench.add_argument("--suite", choices=("own", "spec-bench", "humaneval"), default="own",
                       help="spec-bench: Spec-Bench's 480 questions (shipped), grouped by its six tasks; humaneval: "
                            "openai/human-eval's 164 code prompts (shipped); own: the 48-prompt smoke suite (default)")
    bench.add_argument("--per-task", type=positive_int,
                       help="with --suite spec-bench: a fixed, seeded sample of N questions per task")
    bench.add_argument("--limit", type=positive_int, help="use only the first N prompts")
    bench.add_argument("--categories", help="comma-separated categories to keep")
    bench.add_argument("--modes", default="none,pld,hf-none,hf-pld",
                       help="comma-separated: none, default (the app's pick), pld, history, model, hybrid, eagle, "
                            "eagle-hybrid, universal (ours); hf-none, "
                            "hf-pld, hf-model (transformers' generate); llama-cpp, llama-cpp-pld (llama-cpp-python "
                            "on the target's GGUF file); llama-server[-draft|-ngram] (llama.cpp's: `make peers`)")
    bench.add_argument("--peer-draft", type=Path, metavar="PATH",
                       help="GGUF draft of the llama-server-draft mode (default: the --draft model's file)")
    bench.add_argument("--universal-draft", metavar="SRC",
                       help="the universal mode's draft, with its own tokenizer (default: the --draft model)")
    _model_options(bench)
    bench.add_argument("--k", type=positive_int, default=5, help="draft length (starting value when adaptive)")
    bench.add_argument("--no-adaptive", action="store_true", help="keep K fixed")
    bench.add_argument("--packed-weights", action=argparse.BooleanOptionalAction, default=True,
                       help="verification passes use MKL-packed weights where MKL has them (default: on; off saves "
                            "about the target's size in memory)")
    bench.add_argument("--max-new-tokens", type=positive_int, default=128)
    bench.add_argument("--repeats", type=positive_int, default=1,
                       help="run each prompt N times per mode and keep the fastest (less noise)")
    bench.add_argument("--out", type=Path, help="write the JSON report here")
    bench.add_argument("--profile", action="store_true",
                       help="also print the engine's efficiency, its overhead breakdown, the verify cost curve and "
                            "memory use")
    bench.add_argument("--remote", metavar="URL", help="also measure a remote OpenAI-compatible engine (specchat "
                                                       "serve, vLLM, SGLang) as the mode 'remote': text against "
                                                       "plain decoding here, no speedup (docs/remote.md)")
    bench.add_argument("--remote-key", metavar="KEY", help="the remote engine's API key. Prefer the environment "
                                                           "variable SPECCHAT_REMOTE_KEY or --remote-key-file: a "
                                                           "key on the command line shows in `ps`")
    bench.add_argument("--remote-key-file", type=Path, metavar="FILE", help="read the remote engine's API key "
                                                                            "from FILE (its first line)")
    bench.set_defaults(handler=run_bench)

    costs = commands.add_parser("costs", help="measure the verification cost curve, the draft's cost and the "
                                              "engine's ceiling on this hardware")
    costs.add_argument("--target", help="target model SRC (default: the embedded one)")
    costs.add_argument("--shape", choices=sorted(SHAPE_NAMES), help="random weights of this shape instead of --target")
    costs.add_argument("--draft", help="draft model SRC")
    costs.add_argument("--draft-shape", choices=sorted(SHAPE_NAMES), help="random draft weights of this shape")
    costs.add_argument("--device", default="auto")
    costs.add_argument("--dtype", default="auto")
    costs.add_argument("--backend", choices=("auto", "llama.cpp", "torch"), default="auto",
                       help="how a GGUF --target runs (default: llama.cpp on the CPU where installed)")
    costs.add_argument("--threads", type=positive_int, help="llama.cpp threads (default: every core)")
    costs.add_argument("--max-n", type=positive_int, default=9, help="measure forwards of 1..N new tokens")
    costs.add_argument("--context", type=positive_int, default=256, help="tokens already cached")
    costs.add_argument("--repeats", type=positive_int, default=10)
    costs.add_argument("--k", type=positive_int, default=4, help="K of the alpha = 1 ceiling run")
    costs.add_argument("--tokens", type=positive_int, default=96, help="tokens of the ceiling run")
    costs.add_argument("--alphas", type=lambda text: [unit_interval(a) for a in text.split(",")],
                       default=[0.3, 0.5, 0.7, 0.9], help="acceptance rates to predict speedups for")
    costs.add_argument("--static-cache", action=argparse.BooleanOptionalAction, default=None,
                       help="static KV cache (default: on for CUDA)")
    costs.add_argument("--packed-weights", action=argparse.BooleanOptionalAction, default=True,
                       help="MKL-packed weights for passes of 4-17 tokens where MKL has them (default: on)")
    costs.add_argument("--json", action="store_true")
    costs.set_defaults(handler=run_costs, trust_remote_code=False, allow_pickle=False)

    for name, handler, what, full in (
            ("train-draft", run_train_draft, "train a small draft model for a target by self-distillation",
             "full (the shipped draft, about 55 min on 2 CPU cores) or quick (a smoke test)"),
            ("train-head", run_train_head, "train an EAGLE-style draft head on a target's own hidden states",
             "full (the shipped head, about 70 min on 2 CPU cores after train-draft's replies, about 25 more with "
             "--attention), broad (requests the target writes, real documents and follow-ups: about 51 min; "
             "measured below the shipped head, see docs/drafters.md) or quick")):
        train = commands.add_parser(name, help=what)
        train.add_argument("--target", default="embedded", help="target model (default: the embedded one)")
        train.add_argument("--out", type=Path, required=True, help="folder for the result")
        train.add_argument("--work", type=Path, help="folder for intermediate data, reused when rerun and shared by "
                           "train-draft and train-head (default: in the user cache folder)")
        presets = ("full", "broad", "quick") if name == "train-head" else ("full", "quick")
        train.add_argument("--preset", choices=presets, default="full", help=full)
        train.add_argument("--epochs", type=positive_int, help="training epochs (default: the preset's)")
        train.add_argument("--seed", type=int, help="random seed (default: the preset's, 0)")
        if name == "train-head":
            train.add_argument("--attention", action="store_true",
                               help="then add an attention block over the earlier positions and train it (EAGLE "
                                    "proper; measured no faster than the shipped stateless head, see the README)")
        train.set_defaults(handler=handler)

    manifest = commands.add_parser("manifest", help="check drafters' training-prompt manifests against the benchmark")
    manifest_commands = manifest.add_subparsers(dest="manifest_command", metavar="ACTION", required=True)
    manifest_check = manifest_commands.add_parser(
        "check", help="does any training prompt overlap the benchmark (the same text, a shared run of 13 words, or "
                      "a shorter benchmark text inside it)? exit 0 if none does, 1 if one does")
    manifest_check.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                                help="manifest.jsonl(.gz) files or drafter folders (default: the shipped drafters')")
    manifest_check.add_argument("--benchmark", type=Path,
                                help="Spec-Bench-style JSONL file (default: Spec-Bench's 480 questions, shipped)")
    manifest_check.set_defaults(handler=run_manifest_check)

    from .serve_cli import add_serve_command

    add_serve_command(commands, _model_options, _decoding_options, handler=run_serve)

    stats = commands.add_parser("stats", help="speedup statistics from the chat database, per session and model pair")
    stats.add_argument("--json", action="store_true", help="print JSON instead of tables")
    stats.add_argument("--db", type=Path, help="database file (default: the app's)")
    stats.set_defaults(handler=run_stats)

    models = commands.add_parser("models", help="list, check and download models")
    models_commands = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    listing = models_commands.add_parser("list", help="models available offline")
    listing.set_defaults(handler=run_models_list)
    check = models_commands.add_parser("check", help="can DRAFT draft for TARGET?")
    check.add_argument("target")
    check.add_argument("draft")
    check.add_argument("--trust-remote-code", action="store_true")
    check.set_defaults(handler=run_models_check)
    download = models_commands.add_parser("download", help="download a model from the Hugging Face Hub")
    download.add_argument("hub_id", help="a Hub id (org/name: its safetensors) or one GGUF file of a repository "
                                         "(org/name/file.gguf, as `specchat models catalog --json` names them)")
    download.set_defaults(handler=run_models_download)
    from .pair_cli import add_install_pair_command

    add_install_pair_command(models_commands)
    catalog = models_commands.add_parser("catalog", help="curated targets and their drafts: licence, size, memory, "
                                                         "whether each fits here, predicted speedup")
    catalog.add_argument("--search", metavar="TEXT", help="only models whose id, family, licence or tokenizer has TEXT")
    catalog.add_argument("--alpha", type=unit_interval, default=0.7, help="acceptance rate to predict at (0.7)")
    catalog.add_argument("--dtype", metavar="FORMAT",
                         help="weight format of the fits-here verdict: fp32, bf16, fp16, q8_0, q4 or a GGUF type such "
                              "as Q4_K_M (default: each model's format here, as the app would use it)")
    catalog.add_argument("--costs", type=Path, help="cost table to predict from (default: the shipped one; "
                                                    "docs/measure/catalog_costs.sh writes one for this machine)")
    catalog.add_argument("--json", action="store_true", help="print JSON instead of a table")
    catalog.set_defaults(handler=run_models_catalog)
    return parser


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="embedded",
                        help="target model: embedded (default), a folder, a .gguf file or a downloaded Hub id")
    parser.add_argument("--draft", help="draft model for --drafter model (same forms as --target; default: the shipped "
                                        "draft when the target is the embedded model)")
    parser.add_argument("--head", type=Path, help="EAGLE-style draft head folder for --drafter eagle / eagle-hybrid "
                                                   "(made by train-head; default: the shipped head of the embedded "
                                                   "model)")
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="auto", help="auto (default), float32, float16 or bfloat16")
    parser.add_argument("--trust-remote-code", action="store_true", help="run code shipped with a Hub model")
    parser.add_argument("--allow-pickle", action="store_true", help="allow pickle (.bin) weights")
    parser.add_argument("--backend", choices=("auto", "llama.cpp", "torch"), default="auto",
                        help="how a GGUF target runs: llama.cpp on its own quantized weights (the default on the CPU "
                             "where llama-cpp-python is installed) or torch on a float32 copy")
    parser.add_argument("--exactness", choices=("auto", "bit-identical", "distribution"), default="auto",
                        help="a llama.cpp target's promise: bit-identical to plain decoding (passes capped where its "
                             "kernels are batch-invariant), or the same distribution on its fastest kernels; auto: "
                             "bit-identical where that costs no speed (docs/exactness.md)")
    parser.add_argument("--threads", type=positive_int, help="llama.cpp threads (default: SPECCHAT_THREADS, else "
                                                             "every core)")


def _decoding_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--drafter", choices=DRAFTER_KINDS, default=None,
                        help="hybrid (draft model + prompt lookup), model (draft model), eagle-hybrid (draft head + "
                             "prompt lookup), eagle (draft head), pld (prompt lookup) or none; default: eagle-hybrid "
                             "when the target has a draft head (the embedded one ships one), else "
                             "hybrid when there is a draft model (given or shipped), else pld")
    parser.add_argument("--k", type=positive_int, default=5, help="draft length (starting value when adaptive)")
    parser.add_argument("--no-adaptive", action="store_true", help="keep K fixed")
    parser.add_argument("--temperature", type=non_negative, default=0.0, help="0 (default) is greedy")
    parser.add_argument("--top-p", type=unit_interval, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--seed", type=int, help="random seed (sampling is reproducible with the same seed)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=256)


def _draft_source(args):
    """--draft, else the default draft of the target (the shipped one for the embedded model), else None."""
    from .engine import ModelSource
    from .engine.models import default_draft_for

    return ModelSource.parse(args.draft) if args.draft else default_draft_for(ModelSource.parse(args.target))


def _load_options(args):
    from .engine import LoadOptions

    return LoadOptions(device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                       allow_pickle=args.allow_pickle, backend=getattr(args, "backend", None),
                       threads=getattr(args, "threads", None), exactness=getattr(args, "exactness", "auto"))


def _load(args, with_draft: bool, on_loaded=None):
    from .engine import ModelSource
    from .engine.models import needs_conversion
    from .engine.pair import load_pair

    options = _load_options(args)
    target = ModelSource.parse(args.target)
    draft = _draft_source(args) if with_draft else None
    for source in (target, draft):
        if source is not None and needs_conversion(source) and (source is draft or args.backend == "torch"):
            print(f"Preparing {source.describe()} for its first use (dequantising, about 30 s)…", file=sys.stderr,
                  flush=True)
    pair = load_pair(target, draft, options, on_loaded)
    pair.head_folder = getattr(args, "head", None)
    return pair


def _has_head(args) -> bool:
    from .engine import ModelSource
    from .engine.models import default_head_for

    return getattr(args, "head", None) is not None or default_head_for(ModelSource.parse(args.target)) is not None


def _drafter_choice(args) -> str:
    """--drafter, else prompt lookup for a target on llama.cpp (no drafter beats plain decoding there on Spec-Bench,
    and lookup needs no extra weights: docs/performance.md); else the fastest the target has on the torch path:
    the draft head with prompt lookup, else the draft model with prompt lookup, else prompt lookup alone."""
    from .engine import ModelSource
    from .engine.models import runs_on_llama_cpp

    has_draft = _draft_source(args) is not None
    drafter = getattr(args, "drafter", None) or (
        "pld" if runs_on_llama_cpp(ModelSource.parse(args.target), _load_options(args)) else
        "eagle-hybrid" if _has_head(args) and not args.draft else "hybrid" if has_draft else "pld")
    if drafter in MODEL_DRAFTERS and not has_draft:
        from .engine import SpecchatError
        raise SpecchatError(f"the {drafter} drafter needs a draft model (give --draft SRC)")
    return drafter


def _generation_config(args):
    from .engine import GenerationConfig, SamplingParams

    if args.top_k < 0:
        from .engine import SpecchatError
        raise SpecchatError(f"--top-k must be >= 0 (got {args.top_k})")
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens, k=args.k, adaptive_k=not args.no_adaptive, seed=args.seed,
        sampling=SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k),
        stop_strings=tuple(getattr(args, "stop", ()) or ()),
    )


def run_app(args) -> int:
    """A bare `specchat`: the desktop window (the terminal chat when there is no display to open it on)."""
    if args.self_test:
        from .selftest import run_self_test

        return run_self_test()
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                                                 or os.environ.get("QT_QPA_PLATFORM")):
        print("specchat: no display found; starting the terminal chat instead (specchat chat)", file=sys.stderr)
        return run_chat(build_parser().parse_args(["chat"]))
    from .ui.app import run_gui

    return run_gui()


def run_chat(args) -> int:
    from .terminal import TerminalChat

    config = _generation_config(args)
    drafter = _drafter_choice(args)
    print("Loading the model…", file=sys.stderr, flush=True)
    pair = _load(args, with_draft=drafter in MODEL_DRAFTERS)
    TerminalChat(pair, drafter, config, system=args.system).loop()
    return 0


def run_generate(args) -> int:
    from .engine import Message, build_prompt_ids
    from .terminal import StreamPrinter

    if not args.prompt.strip():
        from .engine import PromptError
        raise PromptError("the prompt is empty")
    config = _generation_config(args)
    drafter = _drafter_choice(args)
    pair = _load(args, with_draft=drafter in MODEL_DRAFTERS)
    engine = pair.engine(drafter)
    prompt_ids = build_prompt_ids(pair.target.tokenizer, [Message("user", args.prompt)], args.system)
    if args.json:
        result = engine.generate(prompt_ids, config)
        record = {"prompt": args.prompt, "system": args.system, "target": pair.target.name,
                  "draft": pair.draft.name if pair.draft else None, "drafter": drafter, "k": args.k,
                  "adaptive_k": not args.no_adaptive, "prompt_tokens": len(prompt_ids), **result.to_dict()}
        print(json.dumps(record, ensure_ascii=False))
        return 0
    printer = StreamPrinter(sys.stdout, show_rejected=args.show_rejected)
    cancel = threading.Event()
    result = engine.generate(prompt_ids, config, cancel, on_event=printer.show)
    printer.finish(result, drafter, file=sys.stderr)
    return 0


def run_serve(args) -> int:
    from .serve_cli import run_serve as serve

    drafter = _drafter_choice(args)
    return serve(args, _generation_config(args), drafter, lambda: _load(args, with_draft=drafter in MODEL_DRAFTERS))


def run_bench(args) -> int:
    from . import bench
    from .resources import default_prompt_suite, human_eval_problems, spec_bench_questions

    modes = bench.parse_modes(args.modes, has_draft=_draft_source(args) is not None,
                              has_universal_draft=args.universal_draft is not None)
    categories = {c.strip() for c in args.categories.split(",") if c.strip()} if args.categories else None
    if args.prompts:
        try:
            lines = args.prompts.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            from .engine import PromptError
            raise PromptError(f"cannot read {args.prompts}: {getattr(error, 'strerror', None) or error}") from error
        source = str(args.prompts)
    elif args.suite == "spec-bench":
        lines, source = spec_bench_questions().read_text(encoding="utf-8").splitlines(), "Spec-Bench"
    else:
        lines, source = default_prompt_suite().read_text(encoding="utf-8").splitlines(), "the shipped suite"
    prompts = bench.load_prompts(lines, source)
    if args.suite == "humaneval" and not args.prompts:
        import gzip

        source = "HumanEval"
        prompts = bench.human_eval_prompts(gzip.decompress(human_eval_problems().read_bytes()).decode("utf-8"))
    if args.suite in ("spec-bench", "humaneval") and not args.prompts:
        prompts = bench.spec_bench_sample(prompts, args.per_task)
    prompts = bench.select_prompts(prompts, source, args.limit, categories)
    memory = {"before loading": bench.resident_mb()}
    kinds = [RunKind.parse(mode) for mode in modes]  # a given --peer-draft serves llama-server-draft instead
    drafted = any(k.needs_draft_model and not (k.is_llama_server and args.peer_draft) for k in kinds)
    pair = _load(args, with_draft=drafted,
                 on_loaded=lambda which: memory.__setitem__(f"with the {which}", bench.resident_mb()))
    print(f"target: {pair.target.name} on {pair.target.backend}", file=sys.stderr)
    settings = bench.BenchSettings(k=args.k, adaptive=not args.no_adaptive, max_new_tokens=args.max_new_tokens,
                                   repeats=args.repeats, packed_weights=args.packed_weights,
                                   peer_draft=str(args.peer_draft) if args.peer_draft else None,
                                   default_drafter=_drafter_choice(args), universal_draft=args.universal_draft)
    runner = bench.BenchRunner(pair, settings, remote=_remote_engine(args) if args.remote else None)
    if args.remote:
        modes.append(REMOTE)

    def progress(done: int, total: int, record) -> None:
        print(f"[{done}/{total}] {record.category:<14} q{record.question_id:<4} {record.mode:<9}"
              f"{record.new_tokens:>5} tokens {record.tokens_per_s:7.2f} tok/s", file=sys.stderr, flush=True)

    records = runner.run(prompts, modes, progress)
    summary = bench.summarize(records)
    memory["peak"] = bench.peak_resident_mb()
    bench.print_summary(summary, modes)
    if args.profile:
        bench.print_profile(summary, modes, memory)
    if args.out:
        from .serve_cli import without_keys

        report = {"command": "specchat " + " ".join(without_keys(sys.argv[1:])),
                  "environment": bench.environment(),
                  "target": pair.target.name, "backend": pair.target.backend, "draft": pair.draft.name if pair.draft else None,
                  "settings": vars(settings), "modes": modes, "summary": summary, "memory_mb": memory,
                  "records": [r.to_dict() for r in records]}
        args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"report written to {args.out}", file=sys.stderr)
    return 0


def _remote_engine(args):
    from .remote import RemoteEndpoint
    from .remote.engine import plain_http_key_warning
    from .serve_cli import secret_from

    key = secret_from(args.remote_key, args.remote_key_file, "SPECCHAT_REMOTE_KEY", "--remote-key")
    endpoint = RemoteEndpoint(args.remote, api_key=key)
    warning = plain_http_key_warning(endpoint.url, key)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    info = endpoint.connect()
    print(f"remote: {info.describe()}", file=sys.stderr)
    return endpoint.engine(info)


def run_costs(args) -> int:
    from . import costs

    if args.target and args.shape:
        from .engine import SpecchatError
        raise SpecchatError("give --target or --shape, not both")
    return costs.run(args)


def run_models_list(args) -> int:
    """`specchat models list` (catalog_report.py): unfinished downloads are set apart, not listed as models."""
    from .catalog_report import print_local_models

    return print_local_models()


def run_models_check(args) -> int:
    from .engine import LoadOptions, ModelSource
    from .engine.pair import check_sources

    report = check_sources(ModelSource.parse(args.target), ModelSource.parse(args.draft),
                           LoadOptions(trust_remote_code=args.trust_remote_code))
    print(report.summary())
    return 0 if report.compatible else EXIT_USAGE


def run_models_catalog(args) -> int:
    """`specchat models catalog` (catalog_report.py)."""
    from .catalog_report import print_catalog

    return print_catalog(args.search, args.json, args.alpha, args.dtype, args.costs)


def run_models_download(args) -> int:
    from .engine.models import download_from_hub

    path = download_from_hub(args.hub_id)
    print(f"downloaded {args.hub_id} to {path}")
    return 0


def _training_pipeline(args, pipeline_class):
    from tqdm.auto import tqdm

    from .engine import ModelSource
    from .resources import default_prompt_suite
    from .training.pipeline import default_work_dir, settings_for

    target = ModelSource.parse(args.target)
    settings = settings_for(args.preset, args.epochs, args.seed, getattr(args, "attention", False))
    return pipeline_class(target, args.out, args.work or default_work_dir(target, args.preset), settings,
                          default_prompt_suite().read_text(encoding="utf-8"),
                          log=lambda line: print(line, file=sys.stderr, flush=True), progress_bar=tqdm)


def run_train_draft(args) -> int:
    from .training.pipeline import Pipeline

    summary = _training_pipeline(args, Pipeline).run()
    final = summary["epochs"][-1] if summary["epochs"] else {}
    print(f"trained {summary['parameters'] / 1e6:.1f}M-parameter draft in {sum(summary['timings_s'].values()) / 60:.0f}"
          f" min; held-out top-1 agreement {final.get('heldout_top1', float('nan')):.3f}; saved to {args.out}")
    return 0


def run_train_head(args) -> int:
    from .training.head_pipeline import HeadPipeline

    summary = _training_pipeline(args, HeadPipeline).run()
    final = summary["epochs"][-1] if summary["epochs"] else {}
    print(f"trained {summary['parameters'] / 1e6:.1f}M-parameter draft head in "
          f"{sum(summary['timings_s'].values()) / 60:.0f} min; held-out acceptance by draft position "
          f"{final.get('heldout_acceptance_by_position')}; saved to {args.out}")
    return 0


def run_manifest_check(args) -> int:
    """Checks training-prompt manifests against a benchmark: exit 0 if no prompt overlaps it, 1 if any does."""
    from .engine import SpecchatError
    from .engine.models import SHIPPED_DRAFT, SHIPPED_HEAD
    from .resources import resource
    from .training.manifest import MANIFEST, BenchmarkIndex, benchmark_texts, check_manifest, spec_bench_texts

    if args.benchmark:
        try:
            texts = benchmark_texts(args.benchmark.read_text(encoding="utf-8"), args.benchmark.stem)
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
            raise SpecchatError(f"cannot read {args.benchmark} as Spec-Bench-style JSONL: {error}") from error
    else:
        texts = spec_bench_texts()
    benchmark = BenchmarkIndex(texts)
    paths = args.paths or [Path(str(resource("models", name))) for name in (SHIPPED_DRAFT, SHIPPED_HEAD)]
    clean = True
    for path in paths:
        path = path / MANIFEST if path.is_dir() else path
        try:
            checked, overlaps = check_manifest(path, benchmark)
        except (OSError, UnicodeDecodeError, ValueError, IndexError) as error:
            raise SpecchatError(f"cannot read the manifest {path}: {error}") from error
        print(f"{path}: {checked} texts, {len(overlaps) or 'no'} overlap{'s' if len(overlaps) != 1 else ''} with "
              f"{len(texts)} benchmark texts")
        for overlap in overlaps:
            print(f"  {overlap}")
        clean = clean and not overlaps
    return 0 if clean else 1


def run_stats(args) -> int:
    """`specchat stats` (stats_report.py: SQLite only, no torch)."""
    from .stats_report import print_stats

    return print_stats(args.db, args.json)
