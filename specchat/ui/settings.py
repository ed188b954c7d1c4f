"""User settings, persisted with QSettings, and the dialog that edits them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFileDialog,
                               QFormLayout, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QSpinBox,
                               QVBoxLayout, QWidget)

from ..core.errors import SpecchatError
from ..core.vocabulary import EXACTNESS, EXACTNESS_LABELS, HEAD_DRAFTERS, LOOKUP_DRAFTERS, MENU, MODEL_DRAFTERS
from ..engine.decoding.sampling import SamplingParams
from ..engine.decoding.speculative import GenerationConfig
from ..models.sources import ModelSource
from .downloads import DownloadsLink
from .pair_check import PairCheck
from .workers import JobThread

PRECISIONS = ("auto", "float32", "bfloat16")
PRECISION_LABELS = {"auto": "Automatic (float32 unless the model does not fit)", "float32": "float32 (exact)",
                    "bfloat16": "bfloat16 (half the memory, not exact)"}
EXACTNESS_TIP = (
    "What a reply with drafts promises on a GGUF model run by llama.cpp.\n"
    "Bit-identical: every verification stays within the pass sizes where this llama.cpp build computes each token "
    "exactly as a one-token pass does (measured once per file), so greedy replies equal plain decoding token for "
    "token.\n"
    "Same distribution: llama.cpp's fastest kernels at every size; every token still follows the model's "
    "distribution exactly, but rounding can differ, so a greedy reply can part from plain decoding where two "
    "tokens nearly tie.\n"
    "Automatic: bit-identical where this llama.cpp build's fastest kernels already are (the embedded model), else "
    "the same distribution on the fastest kernels.\n"
    "The status bar, each reply's footer and the race's verdict say which one ran; changing it reloads the model.")
PRECISION_TIP = (
    "The float format of a model that runs on torch (a Hub model or a folder; the embedded model runs on "
    "llama.cpp, where this does not apply).\n"
    "float32: replies with drafts are exactly plain decoding's, token for token.\n"
    "bfloat16: half the memory, faster on large models, but a reply with drafts can differ from plain decoding "
    "where two tokens nearly tie.\n"
    "Automatic: float32, unless the model would not fit in memory at float32 and this CPU computes bfloat16 "
    "natively (GPUs: bfloat16). The status bar says which format runs; changing it reloads the models.")


@dataclass
class AppSettings:
    target: str = "embedded"
    draft: str = ""  # empty: the target's default draft (the shipped one for the embedded model)
    # One of engine.drafting.DRAFTER_KINDS. Prompt lookup: on the default GGUF path (llama.cpp) no drafter beats
    # plain decoding on Spec-Bench and lookup needs no extra weights (docs/performance.md); on the torch path the
    # draft head with lookup ("eagle-hybrid") is the fastest.
    drafter: str = "pld"
    k: int = 5
    adaptive_k: bool = True
    temperature: float = 0.0
    regenerate_temperature: float = 0.7  # Regenerate under greedy decoding samples at this, so a new reply differs
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 512
    device: str = "auto"
    packed_weights: bool = True  # verification with MKL-packed layer weights (engine/backends/torch/packed.py): faster, more memory
    # Prompt lookup (and the hybrids' lookup) also proposes continuations from the user's earlier replies
    # (engine/drafting/past_replies.py); imported chats join once opened. Drafts are verified, so replies are unchanged.
    draft_from_history: bool = True
    # The float format of a torch target (engine/backends/torch/precision.py): "auto" keeps float32 unless the model would not fit
    # in memory at float32 (then bfloat16, on a CPU that computes it natively); float32 holds replies exact.
    precision: str = "auto"
    # What a llama.cpp target's replies promise (engine/backends/llamacpp/kernels.py): bit-identical, distribution or auto.
    exactness: str = "auto"
    # Layers of a GGUF model that llama.cpp puts on the GPU (engine/backends/llamacpp/offload.py): AUTO_LAYERS as many as fit (or
    # $SPECCHAT_GPU_LAYERS), 0 none, n that many.
    gpu_layers: int = -1

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            self.precision = "auto"  # a damaged or unknown value: the default, not a failed load
        if self.exactness not in EXACTNESS:
            self.exactness = "auto"

    @property
    def load_gpu_layers(self) -> int | None:
        """LoadOptions.gpu_layers for the setting: None lets the engine choose (AUTO_LAYERS)."""
        return None if self.gpu_layers < 0 else self.gpu_layers

    @property
    def load_dtype(self) -> str | None:
        """LoadOptions.dtype for the precision: None lets the engine choose."""
        return None if self.precision == "auto" else self.precision

    def generation_config(self, seed: int | None = None) -> GenerationConfig:
        return GenerationConfig(max_new_tokens=self.max_new_tokens, k=self.k, adaptive_k=self.adaptive_k, seed=seed,
                                sampling=SamplingParams(self.temperature, self.top_p, self.top_k))

    def model_key(self) -> tuple:
        """Settings that need the models reloaded when they change."""
        return (self.target, self.draft if self.drafter in MODEL_DRAFTERS else "", self.drafter in MODEL_DRAFTERS,
                self.device, self.precision, self.exactness, self.gpu_layers,
                self.packed_weights)  # reloaded so that turning packing off frees the packed copies

    @classmethod
    def load(cls, store: QSettings) -> AppSettings:
        values = {}
        for field in dataclasses.fields(cls):
            raw = store.value(f"generation/{field.name}")
            if raw is None:
                continue
            try:
                values[field.name] = _convert(raw, type(field.default))
            except (TypeError, ValueError):
                pass  # a damaged value falls back to the default
        return cls(**values)

    def save(self, store: QSettings) -> None:
        for field in dataclasses.fields(self):
            store.setValue(f"generation/{field.name}", getattr(self, field.name))


def devices_here_text() -> str:
    """What the Device setting can use here: the CPU, llama.cpp's devices and torch's, and a GPU that no build can
    use with the fix (engine/backends/llamacpp/built.py; probed once per process)."""
    from ..engine.backends.llamacpp.built import build_report

    report = build_report()
    llama = ", ".join(d.describe() for d in report.llama_devices if d.is_gpu) or "no GPU"
    torch_gpus = ", ".join(report.torch_gpus) or "no CUDA or MPS device"
    lines = [f"Here: CPU · llama.cpp: {llama if report.llama_version else 'not installed'} · torch: {torch_gpus}"]
    return "\n".join(lines + [f"Unused: {note}." for note in report.unused_gpu()])


def _convert(raw, kind):
    if kind is bool:
        return raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes")
    return kind(raw)


class SourcePicker(QWidget):
    """A model source: the embedded model, a folder, a .gguf file or a Hub id."""

    changed = Signal()

    def __init__(self, allow_empty: bool, parent=None):
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("default (shipped draft), a folder or .gguf" if allow_empty else
                                     "embedded SmolLM2-135M, a folder, .gguf or Hub id")
        self.edit.setToolTip("Empty: the target's default draft (for the embedded model, the draft shipped with "
                             "specchat)" if allow_empty else "Empty: the embedded SmolLM2-135M-Instruct")
        self.edit.textChanged.connect(self.changed)
        layout.addWidget(self.edit, 1)
        for label, handler in (("Folder…", self._pick_folder), ("GGUF…", self._pick_file)):
            button = QPushButton(label)
            button.clicked.connect(handler)
            layout.addWidget(button)

    def text(self) -> str:
        return self.edit.text().strip()

    def set_text(self, text: str) -> None:
        self.edit.setText(text)

    def _pick_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Model folder")
        if folder:
            self.edit.setText(folder)

    def _pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model file", filter="GGUF models (*.gguf)")
        if path:
            self.edit.setText(path)


class SettingsDialog(QDialog):
    """Edits AppSettings; checks the draft/target pair as the user picks it; "Models…" opens the catalog, where
    models are chosen and downloaded."""

    # A Hub id to download, or "" to follow the downloads under way: the window routes it, with download_progress,
    # to ChatSession.download, which attaches the session's downloads to that link.
    download_requested = Signal(str)

    def __init__(self, settings: AppSettings, check_pair, parent=None, check_thread: JobThread | None = None):
        """settings: the values the fields start with; check_pair(target, draft) -> (ok, message), or a generator
        that yields what it is doing first (ChatSession.check_pair): the pair check, which may take half a minute,
        so it runs on edits only (and once now), on check_thread (a thread of the dialog's own when None), while
        the dialog says "Checking the pair…" (ui/pair_check.py)."""
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(820)  # room for the model pickers' hints beside their buttons
        self.pair_check = PairCheck(check_pair, check_thread, self)
        self.pair_check.progress.connect(self._show_checking)
        self.pair_check.checked.connect(self._show_compat)
        target_row = self._build_model_fields(settings)
        self._build_generation_fields(settings)
        self._build_runtime_fields(settings)
        self._build_layout(target_row)
        # Checking a pair reads two tokenizers: wait until the user stops typing.
        self._recheck_timer = QTimer(self, singleShot=True, interval=500)
        self._recheck_timer.timeout.connect(self.recheck)
        for signal in (self.target.changed, self.draft.changed, self.drafter.currentIndexChanged):
            signal.connect(self._recheck_timer.start)
        self.recheck()

    def exec(self) -> int:
        """Runs the dialog modally, as QDialog.exec, and schedules its deletion: the caller reads settings() before
        it returns to the event loop, and then the dialog, its Models dialog and their connections to the
        session's downloads go (a dialog per opening would otherwise live as long as the window)."""
        try:
            return super().exec()
        finally:
            self.deleteLater()

    def done(self, result: int) -> None:
        """Closes the dialog (OK or Cancel) and drops a pair check still under way."""
        self.pair_check.close()
        super().done(result)

    def _build_model_fields(self, settings: AppSettings) -> QHBoxLayout:
        """The target and draft pickers, the drafter, the pair's verdict and the Models… button; returns the
        target's row (the picker and the button)."""
        self.target = SourcePicker(allow_empty=False)
        self.target.set_text("" if settings.target == "embedded" else settings.target)
        self.draft = SourcePicker(allow_empty=True)
        self.draft.set_text(settings.draft)
        self.drafter = QComboBox()
        for info in MENU:
            if info.menu_label is not None:  # the history drafter is prompt lookup with "from past replies" on
                self.drafter.addItem(info.menu_label, info.key)
        self.drafter.setCurrentIndex(max(self.drafter.findData(settings.drafter), 0))
        self.compat = QLabel(textFormat=Qt.TextFormat.PlainText)
        self.compat.setWordWrap(True)
        self.check_progress = QProgressBar(maximumWidth=120, textVisible=False, visible=False)
        self.check_progress.setRange(0, 0)  # busy: a tokenizer's conversion does not say how far it is
        self.from_history = QCheckBox("Draft from my past replies")
        self.from_history.setToolTip(
            "Prompt lookup also proposes text from the replies in your saved chats (imported chats only once you "
            "have opened them). The model checks every proposal, so replies are exactly the same with it on or "
            "off; only the speed changes. The index stays in memory on this computer and is dropped when you turn "
            "this off.")
        self.from_history.setChecked(settings.draft_from_history)
        self.download_progress = DownloadsLink(self)  # the name the window passes on (download_requested)
        self.models_dialog = None
        models = QPushButton("Models…")
        models.setToolTip("The model catalog and the models on this computer: sizes, whether each fits in memory "
                          "here, compatible drafts, and downloads")
        models.clicked.connect(self.open_models)
        target_row = QHBoxLayout()
        target_row.addWidget(self.target, 1)
        target_row.addWidget(models)
        return target_row

    def _build_generation_fields(self, settings: AppSettings) -> None:
        """K and its adaptation, the sampling parameters and the reply's length."""
        self.k = QSpinBox()
        self.k.setRange(1, 16)
        self.k.setValue(settings.k)
        self.adaptive = QCheckBox("Adapt K to the acceptance rate")
        self.adaptive.setChecked(settings.adaptive_k)
        self.temperature = _double(0.0, 2.0, 0.05, settings.temperature)
        self.regenerate_temperature = _double(0.05, 2.0, 0.05, settings.regenerate_temperature)
        self.regenerate_temperature.setToolTip("Under greedy decoding (temperature 0) Regenerate would give the same "
                                               "reply again: it samples at this temperature instead, and the new "
                                               "reply's footer says so.")
        self.top_p = _double(0.05, 1.0, 0.05, settings.top_p)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setSpecialValueText("off")
        self.top_k.setValue(settings.top_k)
        self.max_new = QSpinBox()
        self.max_new.setRange(1, 8192)
        self.max_new.setValue(settings.max_new_tokens)

    def _build_runtime_fields(self, settings: AppSettings) -> None:
        """Where and how the models run: the device, packed weights, the float format and the exactness."""
        self.device = QComboBox()
        self.device.addItems(["auto", "cpu", "cuda", "mps"])
        self.device.setCurrentText(settings.device)
        self.device.setToolTip("auto: GGUF models on llama.cpp's GPU where it was built with one (else the CPU), "
                               "other models on torch's CUDA or MPS device where there is one. cpu: everything on "
                               "the CPU. Changing it reloads the models.")
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(-1, 999)
        self.gpu_layers.setSpecialValueText("auto (every layer that fits)")
        self.gpu_layers.setValue(max(settings.gpu_layers, -1))
        self.gpu_layers.setToolTip("How many layers of a GGUF model llama.cpp puts on the GPU: auto counts the GPU's "
                                   "free memory (or takes SPECCHAT_GPU_LAYERS); 0 keeps the model on the CPU.")
        self.devices_here = QLabel(devices_here_text())
        self.devices_here.setWordWrap(True)
        self.devices_here.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.packed = QCheckBox("Packed weights for verification (faster; about 400 MB more memory)")
        self.packed.setToolTip("Verifying several drafted tokens at once multiplies by copies of the target's "
                               "weights laid out for the CPU's math library (Intel MKL; about 400 MB for the "
                               "embedded model, none on a GPU). Turn off to save memory; changing it reloads the "
                               "models.")
        self.packed.setChecked(settings.packed_weights)
        self.precision = QComboBox()
        for key in PRECISIONS:
            self.precision.addItem(PRECISION_LABELS[key], key)
        self.precision.setCurrentIndex(max(self.precision.findData(settings.precision), 0))
        self.precision.setToolTip(PRECISION_TIP)
        self.exactness = QComboBox()
        for key in EXACTNESS:
            self.exactness.addItem(EXACTNESS_LABELS[key].setting, key)
        self.exactness.setCurrentIndex(max(self.exactness.findData(settings.exactness), 0))
        self.exactness.setToolTip(EXACTNESS_TIP)

    def _build_layout(self, target_row: QHBoxLayout) -> None:
        """The fields in a form, the hint on greedy decoding, and OK and Cancel (self.ok_button)."""
        form = QFormLayout()
        form.addRow("Target model", target_row)
        form.addRow("Drafter", self.drafter)
        form.addRow("Draft model", self.draft)
        compat_row = QHBoxLayout()
        compat_row.addWidget(self.compat, 1)
        compat_row.addWidget(self.check_progress)
        form.addRow("", compat_row)
        form.addRow("Draft length K", self.k)
        form.addRow("", self.adaptive)
        form.addRow("", self.from_history)
        form.addRow("Temperature", self.temperature)
        form.addRow("Regenerate temperature", self.regenerate_temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Top-k", self.top_k)
        form.addRow("Max new tokens", self.max_new)
        form.addRow("Device", self.device)
        form.addRow("", self.devices_here)
        form.addRow("GPU layers (GGUF)", self.gpu_layers)
        form.addRow("Precision", self.precision)
        form.addRow("Exactness", self.exactness)
        form.addRow("", self.packed)
        hint = QLabel("Temperature 0 is greedy decoding: the reply is identical with or without drafting.")
        hint.setWordWrap(True)
        hint.setEnabled(False)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(hint)
        layout.addWidget(buttons)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)

    def recheck(self) -> None:
        uses_draft = self.drafter.currentData() in MODEL_DRAFTERS
        self.draft.setEnabled(uses_draft)
        self.from_history.setEnabled(self.drafter.currentData() in LOOKUP_DRAFTERS)
        missing = _not_downloaded(self.target.text()) or (uses_draft and _not_downloaded(self.draft.text()))
        if missing:
            self._show_compat(False, f"{missing} is not downloaded yet: download it with Models… (beside the "
                                     "target).")
            return
        if self.drafter.currentData() in HEAD_DRAFTERS:
            has_head = self._has_default_head(self.target.text() or "embedded")
            self._show_compat(has_head, "The target's shipped draft head will be used." if has_head else
                              "No draft head is trained for this target (make one with specchat train-head and use "
                              "it from the command line with --head), so choose another drafter.")
            return
        if not uses_draft:
            self.pair_check.cancel()
            self.check_progress.setVisible(False)
            self.compat.setText("")
            self.ok_button.setEnabled(True)
            return
        draft = self.draft.text() or self._default_draft(self.target.text() or "embedded")
        if not draft:
            self._show_compat(False, "Choose a draft model: a folder or GGUF file with the target's tokenizer.")
            return
        self._show_checking("starting")
        self.pair_check.start(self.target.text() or "embedded", draft)

    @staticmethod
    def _has_default_head(target: str) -> bool:
        from ..models.sources import default_head_for

        try:
            return default_head_for(ModelSource.parse(target)) is not None
        except SpecchatError:
            return False

    @staticmethod
    def _default_draft(target: str) -> str:
        from ..models.sources import default_draft_for

        try:
            default = default_draft_for(ModelSource.parse(target))
        except SpecchatError:
            return ""
        return default.spec if default else ""

    def _show_checking(self, step: str) -> None:
        """The pair is being checked (on another thread): what it is doing, a busy bar, and OK waits for it."""
        self.compat.setText(f"Checking the pair… {step}")
        self.compat.setStyleSheet("color: #6b7280;")
        self.check_progress.setVisible(True)
        self.ok_button.setEnabled(False)

    def _show_compat(self, ok: bool, message: str) -> None:
        """The verdict on the pair (a check's, or one the dialog knows at once), which OK follows."""
        self.pair_check.cancel()  # a check still under way is superseded by this verdict
        self.check_progress.setVisible(False)
        self.compat.setText(("✔ " if ok else "✖ ") + message)
        self.compat.setStyleSheet("color: #2e8b57;" if ok else "color: #c0392b;")
        self.ok_button.setEnabled(ok)

    def open_models(self) -> None:
        """The Models dialog, window-modal over this one; choosing a model there fills the fields here."""
        from .models_dialog import ModelsDialog

        if self.models_dialog is not None:  # one at a time: an old one would keep following the downloads
            self.models_dialog.deleteLater()
        self.models_dialog = ModelsDialog(self.download_progress, self.download_requested.emit,
                                          precision=self.precision.currentData(), device=self.device.currentText(),
                                          current=self.target.text() or "embedded", parent=self)
        self.models_dialog.chosen.connect(self.use_models)
        self.models_dialog.finished.connect(self._recheck_timer.start)  # a model downloaded there may now be here
        self.models_dialog.open()

    def use_models(self, target: str, draft: str, drafter: str) -> None:
        """A target and draft chosen in the Models dialog, with the drafter that uses the draft ("model") or,
        without one, prompt lookup ("pld"); a drafter already chosen that uses a draft model or not alike (the
        hybrid, say, or the draft head) is kept."""
        self.target.set_text("" if target == "embedded" else target)
        self.draft.set_text(draft)
        uses_draft = self.drafter.currentData() in MODEL_DRAFTERS
        if uses_draft != (drafter in MODEL_DRAFTERS) and self.drafter.findData(drafter) >= 0:
            self.drafter.setCurrentIndex(self.drafter.findData(drafter))
        self._recheck_timer.stop()
        self.recheck()

    def settings(self) -> AppSettings:
        return AppSettings(target=self.target.text() or "embedded", draft=self.draft.text(),
                           drafter=self.drafter.currentData(), k=self.k.value(), adaptive_k=self.adaptive.isChecked(),
                           temperature=self.temperature.value(),
                           regenerate_temperature=self.regenerate_temperature.value(), top_p=self.top_p.value(),
                           top_k=self.top_k.value(),
                           max_new_tokens=self.max_new.value(), device=self.device.currentText(),
                           packed_weights=self.packed.isChecked(), draft_from_history=self.from_history.isChecked(),
                           precision=self.precision.currentData(), exactness=self.exactness.currentData(),
                           gpu_layers=self.gpu_layers.value())


def _not_downloaded(target: str) -> str | None:
    """The Hub id of a target that is not in the Hugging Face cache yet, else None (no network: the cache only)."""
    from ..models.hub.snapshots import cached_snapshot

    try:
        source = ModelSource.parse(target)
    except SpecchatError:
        return None  # said by the pair check
    return source.location if source.kind == "hub" and cached_snapshot(source.location) is None else None


def _double(low: float, high: float, step: float, value: float) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setDecimals(2)
    box.setValue(value)
    return box
