"""What the subcommands share on the command line: argument types, the model and decoding options, and the API
keys of `serve` and `bench`. Torch-free: `specchat --help` builds every parser from these."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from ..core.errors import SpecchatError
from ..core.machine_load import usable_cores
from ..core.vocabulary import DRAFTER_KINDS, EXACTNESS, INT64_MAX, INT64_MIN, MAX_TEMPERATURE, MIN_TEMPERATURE

EXIT_USAGE = 2
# --dtype's choices: engine/loading/load.py's DTYPES (its names and short names) and auto; checked before any load
DTYPE_CHOICES = ("auto", "float32", "float16", "bfloat16", "fp32", "fp16", "bf16")
KEY_ON_COMMAND_LINE = ("note: {flag} on the command line can be read by other users of this machine (ps, shell "
                       "history); prefer {env} or {flag}-file FILE")


def positive_int(text: str) -> int:
    return _whole(text, 1, INT64_MAX)


def non_negative_int(text: str) -> int:
    return _whole(text, 0, INT64_MAX)


def seed(text: str) -> int:
    """A seed the statistics database can store (a 64-bit integer, as the server's)."""
    return _whole(text, INT64_MIN, INT64_MAX)


def thread_count(text: str) -> int:
    """llama.cpp's threads: 1 to the cores this process may run on (more only wait on each other, and a typo such
    as 10000 would start 20,000 threads)."""
    return _whole(text, 1, usable_cores())


def temperature(text: str) -> float:
    """0 (greedy) or a finite temperature in [MIN_TEMPERATURE, MAX_TEMPERATURE], as the server takes."""
    value = _float(text)
    if value != 0 and not MIN_TEMPERATURE <= value <= MAX_TEMPERATURE:
        raise argparse.ArgumentTypeError(f"must be 0 (greedy) or from {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g} "
                                         f"(got {text})")
    return value


def _whole(text: str, low: int, high: int) -> int:
    """`text` as an int in [low, high]; ArgumentTypeError naming the bound it breaks. Digits are counted before
    int() reads them, so a 5,000-digit number gets this message rather than Python's own limit."""
    digits = text.strip().lstrip("+-")
    if not digits.isdigit() or not digits.isascii():
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number")
    if len(digits) > 20:
        raise argparse.ArgumentTypeError(f"must be at most {high} (got a {len(digits)}-digit number)")
    value = int(text)
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low} (got {value})")
    if value > high:
        raise argparse.ArgumentTypeError(f"must be at most {high} (got {value})")
    return value


def unit_interval(text: str) -> float:
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] (got {value})")
    return value


def _float(text: str) -> float:
    """`text` as a finite float; ArgumentTypeError for anything else (nan and inf pass every comparison's test)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a finite number")
    return value


def model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="embedded",
                        help="target model: embedded (default), a folder, a .gguf file or a downloaded Hub id")
    parser.add_argument("--draft", help="draft model for --drafter model (same forms as --target; default: the shipped "
                                        "draft when the target is the embedded model)")
    parser.add_argument("--head", type=Path, help="EAGLE-style draft head folder for --drafter eagle / eagle-hybrid "
                                                   "(made by train-head; default: the shipped head of the embedded "
                                                   "model)")
    parser.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES, metavar="DTYPE",
                        help="auto (default), float32, float16 or bfloat16 (a torch model's; a GGUF file on "
                             "llama.cpp runs its own quantized weights)")
    parser.add_argument("--trust-remote-code", action="store_true", help="run code shipped with a Hub model")
    parser.add_argument("--allow-pickle", action="store_true", help="allow pickle (.bin) weights")
    parser.add_argument("--backend", choices=("auto", "llama.cpp", "torch"), default="auto",
                        help="how a GGUF target runs: llama.cpp on its own quantized weights (the default on the CPU "
                             "where llama-cpp-python is installed) or torch on a float32 copy")
    parser.add_argument("--exactness", choices=EXACTNESS, default="auto",
                        help="a llama.cpp target's promise: bit-identical to plain decoding (passes capped where its "
                             "kernels are batch-invariant), or the same distribution on its fastest kernels; auto: "
                             "bit-identical where that costs no speed (docs/exactness.md)")
    parser.add_argument("--threads", type=thread_count, help="llama.cpp threads, at most the cores (default: "
                                                             "SPECCHAT_THREADS, else every core)")


def decoding_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--drafter", choices=DRAFTER_KINDS, default=None,
                        help="hybrid (draft model + prompt lookup), model (draft model), eagle-hybrid (draft head + "
                             "prompt lookup), eagle (draft head), pld (prompt lookup) or none; default: pld on a "
                             "llama.cpp (GGUF) target, such as the embedded model, where a checked pass costs the "
                             "most; on a torch target, eagle-hybrid when it has a draft head, else hybrid when "
                             "there is a draft model (given or shipped), else pld")
    parser.add_argument("--k", type=positive_int, default=5, help="draft length (starting value when adaptive)")
    parser.add_argument("--no-adaptive", action="store_true", help="keep K fixed")
    parser.add_argument("--temperature", type=temperature, default=0.0,
                        help=f"0 (default) is greedy; else {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}")
    parser.add_argument("--top-p", type=unit_interval, default=1.0)
    parser.add_argument("--top-k", type=non_negative_int, default=0, help="0 (default): no top-k cut")
    parser.add_argument("--seed", type=seed, help="random seed (sampling is reproducible with the same seed)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=256)


def secret_from(value: str | None, key_file: Path | None, env: str, flag: str) -> str | None:
    """A key from the command line (with a note on stderr that `ps` shows it), a key file (its first line), or the
    environment variable `env`, in that order, without spaces at either end (a client's key is trimmed the same
    way, so a stray space locks nobody out); None when none is given. SpecchatError for a key file that cannot
    be read or is empty."""
    if value and value.strip():
        print(KEY_ON_COMMAND_LINE.format(flag=flag, env=env), file=sys.stderr)
        return value.strip()
    if key_file is not None:
        try:
            lines = key_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise SpecchatError(f"cannot read the key file {key_file}: {getattr(error, 'strerror', None) or error}") \
                from None
        if not lines or not lines[0].strip():
            raise SpecchatError(f"the key file {key_file} is empty")
        return lines[0].strip()
    return os.environ.get(env, "").strip() or None


def without_keys(argv: list[str]) -> list[str]:
    """The command line as a report records it, with the value of --remote-key / --api-key replaced by "…"."""
    shown, hide = [], False
    for arg in argv:
        name = arg.split("=", 1)[0]
        shown.append("…" if hide else f"{name}=…" if name in ("--remote-key", "--api-key") and "=" in arg else arg)
        hide = arg in ("--remote-key", "--api-key")
    return shown


def attach_option(parser) -> None:
    """--attach FILE (repeatable): documents to ask about, for `specchat generate` and `specchat chat`."""
    parser.add_argument("--attach", action="append", default=[], type=Path, metavar="FILE",
                        help="a document to ask about (text, Markdown, code, PDF, DOCX, HTML; repeatable): read "
                             "whole when it fits the context window, else the passages that best match the question")
