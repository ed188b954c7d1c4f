"""`specchat bench`: the drafters against plain decoding, transformers and llama.cpp on a prompt suite
(specchat/bench measures; this module reads the options, loads the pair and writes the report)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

from ..core.errors import SpecchatError
from ..core.run_kind import REMOTE, RunKind
from ..resources import (default_prompt_suite, doc_suite_documents, doc_suite_texts, human_eval_fix_problems,
                         human_eval_problems, quixbugs_programs, spec_bench_questions)
from .options import model_options, positive_int, secret_from, without_keys

SUITES = ("own", "spec-bench", "humaneval", "humanevalfix", "quixbugs", "documents")


def add_parser(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="benchmark the drafters against plain decoding and transformers")
    bench.add_argument("--prompts", type=Path, help="Spec-Bench JSONL file (default: the shipped suite)")
    bench.add_argument("--suite", choices=SUITES, default="own",
                       help="spec-bench: Spec-Bench's 480 questions (shipped), grouped by its six tasks; humaneval: "
                            "openai/human-eval's 164 code prompts (shipped); humanevalfix: HumanEvalFix, "
                            "bigcode-project/octopack's 164 buggy functions to fix (shipped), a code-edit suite where "
                            "replies copy their prompt; quixbugs: jkoppel/QuixBugs's 40 buggy programs to fix "
                            "(shipped), a second code-edit suite; documents: 60 learner texts to proofread and "
                            "return whole (HaifaCLG/ILCoWE) and 60 documents of 1,500-3,000 tokens to answer a "
                            "question from (SQuAD 2.0's dev articles), both shipped; own: the 48-prompt smoke suite "
                            "(default)")
    bench.add_argument("--per-task", type=positive_int,
                       help="with a shipped public suite: a fixed, seeded sample of N "
                            "questions per task (per part of the documents suite)")
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
    model_options(bench)
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
                            "memory use (on a GPU each phase then waits for the device, so its time counts where "
                            "it is spent)")
    bench.add_argument("--remote", metavar="URL", help="also measure a remote OpenAI-compatible engine (specchat "
                                                       "serve, vLLM, SGLang) as the mode 'remote': text against "
                                                       "plain decoding here, no speedup (docs/remote.md)")
    bench.add_argument("--remote-key", metavar="KEY", help="the remote engine's API key. Prefer the environment "
                                                           "variable SPECCHAT_REMOTE_KEY or --remote-key-file: a "
                                                           "key on the command line shows in `ps`")
    bench.add_argument("--remote-key-file", type=Path, metavar="FILE", help="read the remote engine's API key "
                                                                            "from FILE (its first line)")
    bench.set_defaults(handler=run)


def run(args) -> int:
    # torch and the models load only when the command runs: --help stays fast and torch-free
    from .. import bench
    from .loading import load, run_options

    # Every mode reads each prompt itself: a state kept on the per-chat shelf by the mode before would spare the
    # next one its prompt (engine/backends/llamacpp/state_shelf.py), and the ratios would measure the shelf.
    os.environ.setdefault("SPECCHAT_STATE_MEMORY_MIB", "0")
    options = run_options(args, decoding=False)  # the model options read once: nothing below takes args
    if args.out:
        check_writable(args.out)  # before the run: a report that cannot be written is said now, not after it
    modes = bench.parse_modes(args.modes, has_draft=options.draft is not None,
                              has_universal_draft=args.universal_draft is not None)
    prompts = _prompts(args, bench)
    memory = {"before loading": bench.resident_mb()}
    default = options.drafter  # what the "default" mode runs: the app's pick for this pair
    # a given --peer-draft serves llama-server-draft instead
    kinds = [RunKind.parse(default if mode == "default" else mode) for mode in modes]
    drafted = any(k.needs_draft_model and not (k.is_llama_server and args.peer_draft) for k in kinds)
    pair = load(options, with_draft=drafted,
                on_loaded=lambda which: memory.__setitem__(f"with the {which}", bench.resident_mb()))
    print(f"target: {pair.target.name} on {pair.target.backend}", file=sys.stderr)
    if pair.target.native is not None:  # its one-time measurements before anything is timed, not between replies
        pair.target.native.settle()
    settings = bench.BenchSettings(k=args.k, adaptive=not args.no_adaptive, max_new_tokens=args.max_new_tokens,
                                   repeats=args.repeats, packed_weights=args.packed_weights,
                                   peer_draft=str(args.peer_draft) if args.peer_draft else None,
                                   default_drafter=default, universal_draft=args.universal_draft,
                                   profile=args.profile)
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
        report = {"command": "specchat " + " ".join(without_keys(sys.argv[1:])),
                  "environment": bench.environment(),
                  "target": pair.target.name, "backend": pair.target.backend,
                  "draft": pair.draft.name if pair.draft else None,
                  "settings": vars(settings), "modes": modes, "summary": summary, "memory_mb": memory,
                  "records": [r.to_dict() for r in records]}
        write_report(args.out, json.dumps(report, indent=1, ensure_ascii=False))
    return 0


def check_writable(path: Path) -> None:
    """SpecchatError when the report cannot be written at `path` (a folder, a missing or read-only folder, a
    read-only file), checked before a run of many minutes; creates nothing."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise SpecchatError(f"--out {path} is a folder: give a file name, such as {path / 'report.json'}")
    if not folder.is_dir():
        raise SpecchatError(f"--out {path}: the folder {folder} does not exist")
    if not os.access(path if path.exists() else folder, os.W_OK):
        raise SpecchatError(f"--out {path}: {'the file' if path.exists() else 'its folder'} is not writable")


def write_report(path: Path, text: str) -> Path:
    """Writes `text` to `path`, or, when that fails after all (the disk filled, the folder went away during the
    run), to a new file in the temporary folder, so that a long run's figures are not lost; says on stderr where.
    Returns the file written."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        import tempfile

        handle, spare = tempfile.mkstemp(prefix="specchat-bench-", suffix=".json")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"cannot write {path} ({error.strerror or error}): the report is in {spare}", file=sys.stderr)
        return Path(spare)
    print(f"report written to {path}", file=sys.stderr)
    return path


def _prompts(args, bench) -> list:
    """The prompts --prompts, --suite, --per-task, --limit and --categories choose (bench: the specchat.bench
    package, which run imported)."""
    from ..core.errors import PromptError  # the engine (torch) loads only when the command runs

    categories = {c.strip() for c in args.categories.split(",") if c.strip()} if args.categories else None
    if args.prompts:
        try:
            lines = args.prompts.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise PromptError(f"cannot read {args.prompts}: {getattr(error, 'strerror', None) or error}") from error
        source = str(args.prompts)
    elif args.suite == "spec-bench":
        lines, source = spec_bench_questions().read_text(encoding="utf-8").splitlines(), "Spec-Bench"
    else:
        lines, source = default_prompt_suite().read_text(encoding="utf-8").splitlines(), "the shipped suite"
    prompts = bench.load_prompts(lines, source)
    if args.suite == "humaneval" and not args.prompts:
        source = "HumanEval"
        prompts = bench.human_eval_prompts(gzip.decompress(human_eval_problems().read_bytes()).decode("utf-8"))
    if args.suite == "humanevalfix" and not args.prompts:
        source = "HumanEvalFix"
        prompts = bench.human_eval_fix_prompts(
            gzip.decompress(human_eval_fix_problems().read_bytes()).decode("utf-8"))
    if args.suite == "quixbugs" and not args.prompts:
        source = "QuixBugs"
        prompts = bench.quixbugs_prompts(gzip.decompress(quixbugs_programs().read_bytes()).decode("utf-8"))
    if args.suite == "documents" and not args.prompts:
        source = "the documents suite"
        prompts = [*bench.proofread_prompts(gzip.decompress(doc_suite_texts().read_bytes()).decode("utf-8")),
                   *bench.document_qa_prompts(gzip.decompress(doc_suite_documents().read_bytes()).decode("utf-8"))]
    if args.suite != "own" and not args.prompts:
        prompts = bench.spec_bench_sample(prompts, args.per_task)
    return bench.select_prompts(prompts, source, args.limit, categories)


def _remote_engine(args):
    # the remote engine's client loads only when --remote is given: --help stays fast and torch-free
    from ..remote import RemoteEndpoint
    from ..remote.engine import plain_http_key_warning

    key = secret_from(args.remote_key, args.remote_key_file, "SPECCHAT_REMOTE_KEY", "--remote-key")
    endpoint = RemoteEndpoint(args.remote, api_key=key)
    warning = plain_http_key_warning(endpoint.url, key)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    info = endpoint.connect()
    print(f"remote: {info.describe()}", file=sys.stderr)
    return endpoint.engine(info)

