"""The memory of a runner's two llama.cpp contexts at 8,192 and 32,768 positions: the KV cache and the compute
buffer that llama.cpp reports when it makes the prompt reader (float16, no flash attention, passes of 256) and the
decoding context (bfloat16 K, float16 V, flash attention, passes of 512). docs/performance.md, "After a restart".

    .venv/bin/python docs/measure/context_buffers.py embedded|qwen2.5-coder-1.5b
"""

import sys, resource
from specchat.engine.backends.llamacpp import library
from specchat.engine.backends.llamacpp.llama_runner import LlamaCppModel, new_decoding_context
from specchat.engine.backends.llamacpp.prompt_reader import PromptReader
from specchat.models.sources import ModelSource
from specchat.engine.loading.load import load_model, LoadOptions
class Rec:
    """Stands in for a load's log (library._recording): keeps llama.cpp's buffer-size lines."""

    def __init__(self): self.lines = []
    def line(self, t):
        s = t.decode(errors="replace").strip()
        if "buffer size" in s: self.lines.append(s)
src = sys.argv[1]
m = load_model(ModelSource.parse(src), LoadOptions(threads=2, backend="llama.cpp")).native
for n in (8192, 32768):
    for name, make in (("reader", lambda: PromptReader(m, n)), ("decoding", lambda: new_decoding_context(m, False, n))):
        r = Rec(); library._recording = r
        obj = make()
        library._recording = None
        print(src, n, name, "; ".join(l for l in r.lines))
        if name == "reader": obj.close()
        else: m.llama.llama_free(obj)
