"""What `specchat train-draft` and `specchat train-head` share: their options and their training pipeline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .options import positive_int


def add_training_parser(subparsers, name: str, what: str, presets: tuple[str, ...],
                        preset_help: str) -> argparse.ArgumentParser:
    """The subcommand `name` with the options both training commands take; returns it for the caller's own."""
    train = subparsers.add_parser(name, help=what)
    train.add_argument("--target", default="embedded", help="target model (default: the embedded one)")
    train.add_argument("--out", type=Path, required=True, help="folder for the result")
    train.add_argument("--work", type=Path, help="folder for intermediate data, reused when rerun and shared by "
                       "train-draft and train-head (default: in the user cache folder)")
    train.add_argument("--preset", choices=presets, default="full", help=preset_help)
    train.add_argument("--epochs", type=positive_int, help="training epochs (default: the preset's)")
    train.add_argument("--seed", type=int, help="random seed (default: the preset's, 0)")
    return train


def training_pipeline(args, pipeline_class):
    """A pipeline_class (training.pipeline.Pipeline or training.head_pipeline.HeadPipeline) for the options, its
    log lines and progress bars on stderr."""
    # torch and the training code load only when the command runs: --help stays fast and torch-free
    from tqdm.auto import tqdm

    from ..models.sources import ModelSource
    from ..resources import default_prompt_suite
    from ..training.pipeline import default_work_dir, settings_for

    target = ModelSource.parse(args.target)
    settings = settings_for(args.preset, args.epochs, args.seed, getattr(args, "attention", False))
    return pipeline_class(target, args.out, args.work or default_work_dir(target, args.preset), settings,
                          default_prompt_suite().read_text(encoding="utf-8"),
                          log=lambda line: print(line, file=sys.stderr, flush=True), progress_bar=tqdm)
