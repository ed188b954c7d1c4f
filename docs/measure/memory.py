"""Peak resident memory of a process that loads the embedded pair as the app does and generates one reply."""
import resource
import sys
import time

from specchat.bench import resident_mb
from specchat.engine.chat_prompt import Message, build_prompt_ids
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.load import LoadOptions
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource, default_draft_for

backend, drafter, with_draft = sys.argv[1], sys.argv[2], sys.argv[3] == "draft"
packed = len(sys.argv) > 4 and sys.argv[4] == "packed"
t = ModelSource.parse("embedded")
before = resident_mb()
pair = load_pair(t, default_draft_for(t) if with_draft else None, LoadOptions(backend=backend))
pair.packed_weights = packed
loaded = resident_mb()
ids = build_prompt_ids(pair.target.tokenizer, [Message("user", "Summarize: " + "The library opens at nine. " * 40)])
r = pair.engine(drafter).generate(ids, GenerationConfig(max_new_tokens=64))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{backend:<9} {drafter:<12} draft={with_draft!s:<5} packed={packed!s:<5} before {before:.0f} MB, loaded {loaded:.0f} MB, after reply {resident_mb():.0f} MB, peak {peak:.0f} MB")
