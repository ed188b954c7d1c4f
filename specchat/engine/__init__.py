"""The speculative decoding engine (no Qt): decoding/ (the speculative step, the draft-length policy, sampling, a
reply's text and events), drafting/ (the drafters), backends/ (where a target and a draft run: torch, llama.cpp),
loading/ (loading a model and a pair, GGUF metadata, compatibility), and at the top the chat prompt, the chat
engine and the race. Import what you need from its module: this package imports nothing, so that reaching one
part of the engine does not load the others (or torch)."""
