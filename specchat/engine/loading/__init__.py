"""Loading: a model from its source (load), GGUF metadata and headers (gguf_meta, gguf_header), a target with
its draft and drafter (pair), and whether two models can pair (compat)."""
