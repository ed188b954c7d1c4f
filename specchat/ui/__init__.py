"""The desktop window (PySide6): it adapts the engine and the storage layers to Qt; they never import it."""
