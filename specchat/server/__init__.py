"""`specchat serve`: an OpenAI-compatible HTTP API on the speculative engine (no Qt).

protocol: the wire format; jobs: one generation at a time on the device, a bounded line behind it; served: the
model, prompts and run records; app: the FastAPI routes; run: binding and running."""
