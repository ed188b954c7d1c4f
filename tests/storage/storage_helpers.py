"""Helpers shared by the storage tests (a plain module: conftest.py is not importable reliably)."""


def make_run(**overrides) -> dict:
    """A generation run with every required column, as the GUI would record it."""
    run = dict(target="embedded", draft=None, drafter="pld", k=4, adaptive=True, temperature=0.0, top_p=1.0,
               top_k=0, seed=0, device="cpu", prompt_tokens=10, new_tokens=20, target_passes=10,
               draft_proposed=20, draft_accepted=10, tokens_per_s=10.0, prefill_s=0.1, draft_s=0.2, verify_s=1.5,
               wall_s=2.0, acceptance_by_position=[0.6, 0.4], speedup=None)
    run.update(overrides)
    return run
