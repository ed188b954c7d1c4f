"""What every layer shares and none owns: the errors shown to the user (errors), the app's words defined once
(vocabulary: token origins, finish reasons, exactness, drafter kinds and their labels; run_kind: what produced a
run), the arithmetic of acceptance, the machine's accelerators, formatting, and the file-system helpers (paths, fs,
text). Imports neither torch nor Qt, nor any other part of specchat (pyproject.toml's import contracts)."""
