"""`specchat models download HUB_ID`: a model from the Hugging Face Hub."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    download = subparsers.add_parser("download", help="download a model from the Hugging Face Hub")
    download.add_argument("hub_id", help="a Hub id (org/name: its safetensors) or one GGUF file of a repository "
                                         "(org/name/file.gguf, as `specchat models catalog --json` names them)")
    download.set_defaults(handler=run)


def run(args) -> int:
    # torch and huggingface_hub load only when the command runs (after cli.main opened the network for it)
    from ..models.hub.download import download_from_hub

    path = download_from_hub(args.hub_id)
    print(f"downloaded {args.hub_id} to {path}")
    return 0
