"""`specchat --self-test`: can this installation generate, speculatively and losslessly, with no display?

Loads the default pair (the embedded target, its shipped draft model and draft head), opens the GUI toolkit
offscreen, creates a scratch chat database (which runs every migration), generates a few tokens with plain decoding
and with each shipped drafter (the draft head's and the draft model's, each with prompt lookup), and checks that
they are the same tokens. The line says where each model ran (the CPU, or a GPU with n of m layers), which
backends llama.cpp and torch were built with, and a GPU here that they cannot use, with the fix. One line out,
exit code 0 (pass) or 1 (fail), so that packagers and CI can run it inside a bundle.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from .. import __version__

SELF_TEST_PROMPT = "Name three colours of the rainbow."
SELF_TEST_TOKENS = 24
SELF_TEST_K = 4


def run_self_test(out=None) -> int:
    out = out or sys.stdout
    started = time.perf_counter()
    try:
        verdict = _check()
    except Exception as error:  # the verdict line is the whole output, whatever went wrong
        print(f"specchat self-test: FAIL: {type(error).__name__}: {error}", file=out)
        return 1
    print(f"specchat self-test: {verdict} ({time.perf_counter() - started:.1f} s)", file=out)
    return 0 if verdict.startswith("PASS") else 1


def _check() -> str:
    # The libraries load here, inside the check: one that is missing or broken makes a FAIL verdict, not a traceback
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["specchat-self-test"])  # the GUI toolkit and its plugins load
    _check_database()
    from ..engine.chat_prompt import Message, build_prompt_ids
    from ..engine.decoding.speculative import GenerationConfig
    from ..engine.loading.load import LoadOptions
    from ..engine.loading.pair import load_pair
    from ..models.sources import ModelSource, default_draft_for

    target = ModelSource.parse("embedded")
    # Bit-identical: the check compares tokens, which a GPU's fastest kernels promise only in distribution (its
    # passes are capped where they are exact instead; on the CPU the embedded model is exact at every size).
    pair = load_pair(target, default_draft_for(target), LoadOptions(exactness="bit-identical"))
    # The default drafter (the draft head with prompt lookup) and the draft model's: every shipped part drafts.
    drafters = [d for d, usable in (("eagle-hybrid", pair.has_head), ("hybrid", pair.draft is not None)) if usable]
    prompt = build_prompt_ids(pair.target.tokenizer, [Message("user", SELF_TEST_PROMPT)])
    # A fixed K: the adaptive policy drafts nothing on a first reply it knows nothing about (docs/how-it-works.md),
    # and a check whose drafts were never verified would compare plain decoding with itself.
    config = GenerationConfig(max_new_tokens=SELF_TEST_TOKENS, seed=0, k=SELF_TEST_K, adaptive_k=False)
    plain = pair.engine("none").generate(prompt, config)
    accepted = proposed = 0
    for drafter in drafters or ["pld"]:
        speculative = pair.engine(drafter).generate(prompt, config)
        app.processEvents()
        if speculative.token_ids != plain.token_ids:
            return (f"FAIL: the {drafter} drafter's {len(speculative.token_ids)} tokens differ from plain decoding's "
                    f"(specchat {__version__}, {pair.target.name})")
        if speculative.stats.draft_proposed == 0 and drafters:  # prompt lookup alone may find nothing to copy
            return (f"FAIL: the {drafter} drafter proposed no draft to check (specchat {__version__}, "
                    f"{pair.target.name})")
        accepted += speculative.stats.draft_accepted
        proposed += speculative.stats.draft_proposed
    parts = [pair.target.name.split(" (")[0]] + ([pair.draft.name.split(",")[0]] if pair.draft else []) + (
        ["draft head"] if pair.has_head else [])
    return (f"PASS: {len(plain.token_ids)} tokens identical to plain decoding with the {' and '.join(drafters or ['pld'])}"
            f" drafter{'s' if len(drafters) > 1 else ''}, {accepted}/{proposed} drafts accepted (specchat "
            f"{__version__}, {' + '.join(parts)}; {_where(pair)}; Qt {_qt_version()})")


def _where(pair) -> str:
    """Where each model ran, what llama.cpp and torch were built with, and any GPU here that they cannot use (with
    the fix), in one line: the self-test's output is a single line."""
    from ..engine.backends.llamacpp.built import build_report, where_models_run

    report = build_report()
    return "; ".join([where_models_run(pair), report.llama_line(), report.torch_line()]
                     + [f"unused GPU: {note}" for note in report.unused_gpu()])


def _check_database() -> None:
    """A scratch database, migrated to the head revision, holds a chat: the storage layer works here."""
    from ..storage import Store, open_database  # inside: a broken storage layer is a FAIL verdict too

    with tempfile.TemporaryDirectory(prefix="specchat-self-test-") as folder:
        store = Store(open_database(Path(folder) / "self-test.db"))
        try:
            chat = store.create_conversation("self-test")
            store.add_message(chat.id, "user", SELF_TEST_PROMPT)
            if [m.text for m in store.messages(chat.id)] != [SELF_TEST_PROMPT]:
                raise RuntimeError("the chat database did not keep a message")
        finally:
            store.close()


def _qt_version() -> str:
    from PySide6.QtCore import qVersion

    return qVersion()
