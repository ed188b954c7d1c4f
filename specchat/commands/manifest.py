"""`specchat manifest check`: does any drafter's training prompt overlap the benchmark?"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import SpecchatError
from ..resources import resource


def add_parser(subparsers) -> None:
    manifest = subparsers.add_parser("manifest", help="check drafters' training-prompt manifests against the benchmark")
    manifest_commands = manifest.add_subparsers(dest="manifest_command", metavar="ACTION", required=True)
    check = manifest_commands.add_parser(
        "check", help="does any training prompt overlap the benchmark (the same text, a shared run of 13 words, or "
                      "a shorter benchmark text inside it)? exit 0 if none does, 1 if one does")
    check.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                       help="manifest.jsonl(.gz) files or drafter folders (default: the shipped drafters')")
    check.add_argument("--benchmark", type=Path,
                       help="Spec-Bench-style JSONL file (default: Spec-Bench's 480 questions, shipped)")
    check.set_defaults(handler=run)


def run(args) -> int:
    """Checks training-prompt manifests against a benchmark: exit 0 if no prompt overlaps it, 1 if any does."""
    # torch loads only when the command runs (the shipped drafters' names): --help stays fast and torch-free
    from ..models.sources import SHIPPED_DRAFT, SHIPPED_HEAD
    from ..training.manifest import MANIFEST, BenchmarkIndex, benchmark_texts, check_manifest, spec_bench_texts

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
