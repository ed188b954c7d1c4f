"""Prompt lookup over a long document: the time of its first proposal and of the ones after, on a 30,000-token
prompt of public-domain PEP text (resources/documents) tokenized by the embedded model's tokenizer.

    python docs/measure/lookup_first_step.py [TOKENS]

Prompt lookup keeps no index: each proposal scans the context with numpy, so the first step costs what any step
costs. This prints the first proposal's time and the median of the next 200, the context growing a token a step.
"""

import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import specchat.resources as shipped
from specchat.engine.drafting.lookup import PromptLookupDrafter
from specchat.engine.loading.load import load_tokenizer
from specchat.models.sources import ModelSource

tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
tokenizer = load_tokenizer(ModelSource.parse("embedded"))
peps = Path(shipped.__file__).parent / "documents" / "peps.jsonl.gz"
texts = [json.loads(line)["text"] for line in gzip.open(peps, "rt")]
ids: list[int] = []
for text in texts:
    ids += tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) >= tokens:
        break
context = ids[:tokens]
drafter = PromptLookupDrafter()
start = time.perf_counter()
first = drafter.propose(context, 16)
first_s = time.perf_counter() - start
later = []
for step in range(200):
    context.append(ids[(tokens + step) % len(ids)])
    start = time.perf_counter()
    drafter.propose(context, 16)
    later.append(time.perf_counter() - start)
print(f"{len(context) - 200} tokens: first proposal {first_s * 1000:.2f} ms "
      f"({len(first.tokens) if first else 0} tokens proposed); next 200: "
      f"median {statistics.median(later) * 1000:.2f} ms, max {max(later) * 1000:.2f} ms")
