"""specchat: a desktop chat app for local language models, driven by speculative decoding."""

__version__ = "0.1.0"
