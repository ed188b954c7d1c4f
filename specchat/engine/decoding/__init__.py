"""Decoding: the speculative step and its loop (speculative), the draft-length policy (adaptive) priced on the
measured cost curve (cost_curve), sampling and its exact acceptance rule (sampling, on_device), a reply's text and
end (reply, detokenize), and the events and statistics a generation emits (events, timing, divergence)."""
