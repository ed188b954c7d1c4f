"""The model catalog: its entries and the figures computed from them (entries), the checks of its fields
(fields), GGUF quantizations (quants), and what fits this machine (fit)."""
