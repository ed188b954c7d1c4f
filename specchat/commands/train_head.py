"""`specchat train-head`: an EAGLE-style draft head trained on a target's own hidden states (specchat/training)."""

from __future__ import annotations

from .train import add_training_parser, training_pipeline


def add_parser(subparsers) -> None:
    train = add_training_parser(
        subparsers, "train-head", "train an EAGLE-style draft head on a target's own hidden states",
        ("full", "broad", "quick"),
        "full (the shipped head, about 70 min on 2 CPU cores after train-draft's replies, about 25 more with "
        "--attention), broad (requests the target writes, real documents and follow-ups: about 51 min; "
        "measured below the shipped head, see docs/drafters.md) or quick")
    train.add_argument("--attention", action="store_true",
                       help="then add an attention block over the earlier positions and train it (EAGLE "
                            "proper; measured no faster than the shipped stateless head, see the README)")
    train.set_defaults(handler=run)


def run(args) -> int:
    from ..training.head_pipeline import HeadPipeline  # torch loads only when the command runs: --help stays torch-free

    summary = training_pipeline(args, HeadPipeline).run()
    final = summary["epochs"][-1] if summary["epochs"] else {}
    print(f"trained {summary['parameters'] / 1e6:.1f}M-parameter draft head in "
          f"{sum(summary['timings_s'].values()) / 60:.0f} min; held-out acceptance by draft position "
          f"{final.get('heldout_acceptance_by_position')}; saved to {args.out}")
    return 0
