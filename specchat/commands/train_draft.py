"""`specchat train-draft`: a small draft model for a target, trained by self-distillation (specchat/training)."""

from __future__ import annotations

from .train import add_training_parser, training_pipeline


def add_parser(subparsers) -> None:
    train = add_training_parser(
        subparsers, "train-draft", "train a small draft model for a target by self-distillation", ("full", "quick"),
        "full (the shipped draft, about 55 min on 2 CPU cores) or quick (a smoke test)")
    train.set_defaults(handler=run)


def run(args) -> int:
    from ..training.pipeline import Pipeline  # torch loads only when the command runs: --help stays torch-free

    summary = training_pipeline(args, Pipeline).run()
    final = summary["epochs"][-1] if summary["epochs"] else {}
    print(f"trained {summary['parameters'] / 1e6:.1f}M-parameter draft in {sum(summary['timings_s'].values()) / 60:.0f}"
          f" min; held-out top-1 agreement {final.get('heldout_top1', float('nan')):.3f}; saved to {args.out}")
    return 0
