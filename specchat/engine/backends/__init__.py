"""Where a model runs: the target behind one runner interface on torch (torch/) or llama.cpp (llamacpp/), and a
draft model's backend (draft_backends)."""
