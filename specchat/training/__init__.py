"""Training draft models for a target by self-distillation (Qt-free, like the engine)."""
