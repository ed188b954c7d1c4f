"""The torch backend: target runners and their KV caches (runners, kv_cache, static_steps, host_syncs), the lean
Llama forward and packed weights (lean, packed), the tuned output head (tuned_head), and float formats (precision)."""
