"""`specchat bench`: our engine against itself, transformers' generate() and llama.cpp, side by side in one run.

prompts.py reads the prompts and the modes, runner.py runs them (BenchRunner, also the dashboard's benchmark),
report.py sums and prints the figures and stores each record as a run; peers.py (llama-cpp-python) and
peer_server.py (llama-server) are llama.cpp's modes. The names below are those the command line and the
measurement scripts use.
"""

from .report import (bench_run_values, environment, peak_resident_mb, print_profile, print_summary, resident_mb,
                     summarize)
from .runner import BenchRunner, BenchSettings, ModeRecord, TurnOutput
from .suites import (MODES, MT_BENCH_CATEGORIES, BenchPrompt, document_qa_prompts, human_eval_fix_prompts,
                     human_eval_prompts, load_prompts, parse_modes, proofread_prompts, quixbugs_prompts, select_prompts,
                     spec_bench_sample)

__all__ = [
    "BenchPrompt", "BenchRunner", "BenchSettings", "MODES", "MT_BENCH_CATEGORIES", "ModeRecord",
    "TurnOutput", "bench_run_values", "document_qa_prompts", "environment", "human_eval_fix_prompts",
    "human_eval_prompts", "load_prompts", "parse_modes", "peak_resident_mb", "print_profile", "print_summary",
    "proofread_prompts", "quixbugs_prompts", "resident_mb", "select_prompts", "spec_bench_sample", "summarize",
]
