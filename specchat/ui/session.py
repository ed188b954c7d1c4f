"""What the window works with: the store, the settings, the loaded models and the speed calibration."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Callable, Generator, Sequence

from PySide6.QtCore import QObject, QSettings, Signal

from .. import __version__
from ..chats import Comparisons, Conversations, ReplyController, ReplyEngine, ReplyRecorder, RunBook, RunContext
from ..core.errors import SpecchatError, StorageError
from ..core.formatting import format_size
from ..core.fs import atomic_write_text
from ..core.run_kind import RunKind
from ..core.vocabulary import HEAD_DRAFTERS, LOOKUP_DRAFTERS, MODEL_DRAFTERS, drafter_kind
from ..engine.backends.llamacpp.built import build_report
from ..engine.chat_engine import EngineCache, LocalChatEngine, reply_to
from ..engine.chat_prompt import Message, encoded
from ..engine.decoding.events import GenerationResult
from ..engine.decoding.speculative import GenerationConfig
from ..engine.drafting.past_replies import SuffixIndex
from ..engine.loading.load import LoadOptions
from ..engine.loading.pair import ModelPair, checking_sources, load_pair
from ..models.sources import ModelSource, default_draft_for
from .downloads import Downloads
from .settings import AppSettings
from .workers import FunctionWorker, JobThread

CALIBRATION_PROMPT = "Write three sentences about the sea."
CALIBRATION_CHAT = (Message("user", CALIBRATION_PROMPT),)
# As long as a typical reply (this prompt's ends near 80 tokens): the first tokens of a reply decode faster than a
# whole reply (the KV cache is still short), and a baseline measured on them made every reply look slower than plain.
CALIBRATION_TOKENS = 96
# How long closing the window waits for the threads: a running job stops at its next check (a reply or race after
# its current step), but loading a model cannot be interrupted.
SHUTDOWN_WAIT_MS = 10_000
MAX_IMPORT_BYTES = 50_000_000  # read whole into memory, on the background thread: bounded all the same
TOKENIZED_AT_ONCE = 64  # past replies encoded under one hold of the tokenizer's lock: the GUI's counts wait less


class ChatSession(QObject):
    """Loads models in the background and keeps the plain-decoding calibration fresh; runs are recorded by its RunBook.

    The windows reach their rows through specchat/chats (no Qt), never the Store itself: the chat window its chats
    through `conversations` and its replies through `replies` (the ReplyController, whose calls return what the
    window draws), the race its comparisons through `comparisons`, the dashboard the runs through `runs`.
    model_thread runs all model work, the windows' included: loading, calibration, replies, races, benchmarks."""

    status_changed = Signal()
    stats_changed = Signal()  # runs were recorded (a chat reply's, a race's, a benchmark's): the figures changed

    def __init__(self, store, settings: AppSettings | None = None, load_models: bool = True,
                 pair: ModelPair | None = None):
        super().__init__()
        self.store = store
        self.settings = settings or AppSettings.load(QSettings())
        self.app_session_id = store.start_app_session(__version__)
        # The user's past replies, for the lookup drafters to draft from ("Draft from past replies" in Settings).
        # Built and read on the model thread only (every reply runs there), so it needs no lock.
        self.history: SuffixIndex | None = None
        self.pair = pair  # also sets `engines`: the pair's engines, for the chat, the race and the API alike
        self.loading = False
        self._load_generation = 0  # counts load_models calls: only the newest one's result is taken
        self.error: str | None = None  # for the window's banner, as an error
        self.note: str | None = None  # for the window's banner, as information (what a load runs with)
        self.runs = RunBook(store, self.app_session_id)  # recording runs, and the plain-decoding baseline
        self.conversations = Conversations(store)
        self.comparisons = Comparisons(store)
        self.replies = ReplyController(ReplyRecorder(store, self.runs), self.conversations.search_for)
        self.model_thread = JobThread("specchat-model")
        # Downloads are network I/O, not model work: they run on a thread of their own.
        self.downloads = Downloads(JobThread("specchat-downloads"))
        self.downloads.ended.connect(self._on_download_ended)
        # Pair checks and chat imports: file work that may take a minute (converting a GGUF tokenizer, storing a
        # large chat), kept off the GUI thread and out of the model thread's queue, one job at a time.
        self.background = JobThread("specchat-background")
        self._device_users: set[str] = set()
        self.remote = None  # the RemoteConnection (ui/remote_target.py) the chat's replies come from, if any
        if pair is None and load_models:
            self.load_models()
        else:
            self._load_history()

    # -- models ---------------------------------------------------------------------------------------------------

    @property
    def pair(self) -> ModelPair | None:
        return self._pair

    @pair.setter
    def pair(self, pair: ModelPair | None) -> None:
        """A new pair (or none) also drops the old pair's engines, which hold its models in memory."""
        self._pair = pair
        self.engines: EngineCache | None = EngineCache(pair) if pair is not None else None

    @property
    def ready(self) -> bool:
        return self.pair is not None and not self.loading

    @property
    def tokenizer(self):
        return self.pair.target.tokenizer

    def engine_maker(self) -> Callable[[], LocalChatEngine]:
        """What a reply's worker calls, on the model thread, for the chat engine of the chosen drafter; raises
        SpecchatError here, on the GUI thread, when that drafter cannot run. The engine comes from the pair's
        EngineCache, so what it measured carries over from reply to reply, and it is built on the model thread:
        torch work on the GUI thread gives that thread an OpenMP team of its own, which slows generation in the
        model thread (README, "Threads"). The drafter is checked here, once: the engine is built without checking
        it again."""
        pair, drafter, engines = self.pair, self.settings.drafter, self.engines
        pair.check_drafter(drafter)
        return lambda: engines.chat_engine(drafter, self._history_for(drafter), checked=True)

    def reply_engine(self) -> ReplyEngine:
        """What the chat's next reply runs on (ReplyController.start): the connected remote engine, or the loaded
        pair's engine for the chosen drafter (SpecchatError when it cannot run), its prompt fitted by the pair's
        PromptFitter (EngineCache.fitter: the engines' own, used here on the GUI thread, once, before the reply
        starts, so that the window can say what was left out and the model thread streams these ids), and its
        finished reply joining the past replies. Its context is taken now, with the settings as they are."""
        if self.remote is not None:
            return self.remote.reply_engine(self.settings)
        make_engine = self.engine_maker()
        return ReplyEngine(self.run_context(), make_engine, self.engines.fitter(), self.remember_reply,
                           self.read_first)

    def _history_for(self, drafter: str) -> SuffixIndex | None:
        return self.history if self.settings.draft_from_history and drafter in LOOKUP_DRAFTERS else None

    def _drafter_that_ran(self) -> str:
        """The drafter a chat reply is recorded under: prompt lookup that also read past replies is the history
        drafter (so the footer and the statistics say so); the hybrids keep their names."""
        drafter = self.settings.drafter
        return str(RunKind.ours(drafter, history=self._history_for(drafter) is not None))

    def run_context(self, drafter: str | None = None, config: GenerationConfig | None = None) -> RunContext:
        """What a run starting now runs with, kept for its record (the settings or the models may change while it
        runs): `drafter` (None: the chat's, as its replies are recorded) with `config` (None: the settings') on the
        loaded pair, or on the connected remote engine for a remote drafter (the race's remote lane)."""
        config = config or self.settings.generation_config()
        if drafter is None:
            return RunContext.of_pair(self.pair, self._drafter_that_ran(), config)
        if RunKind.parse(drafter).is_remote and self.remote is not None:
            return RunContext(config, self.remote.models, drafter)
        return RunContext.of_pair(self.pair, drafter, config)

    def remember_reply(self, result: GenerationResult) -> None:
        """On the model thread, as a reply ends: its tokens join the past replies the lookup drafters read."""
        if self.history is not None and self.settings.draft_from_history and len(result.token_ids) >= 2:
            self.history.add(result.token_ids)

    def read_first(self, replies: Sequence[str]) -> None:
        """On the model thread, before a branch's reply: the replies beside it (its siblings, ReplyController)
        become the newest of the past replies, which the history drafter reads first on a tie, so that a
        regenerated or re-asked reply copies from its earlier versions. Nothing without the index."""
        if self.history is not None and self.settings.draft_from_history and self.pair is not None:
            self.history.extend(_tokenized(self.pair.target.tokenizer, list(replies)))

    def include_in_history(self, conversation_id: int) -> None:
        """A chat was opened: an imported one now feeds the history drafter too (its replies join the index)."""
        try:
            replies = self.store.include_in_history(conversation_id)
        except StorageError:  # only speed depends on it: the chat opens all the same, and the next open retries
            return
        if replies and self.history is not None and self.pair is not None:
            history, tokenizer = self.history, self.pair.target.tokenizer
            self._run_in_background(lambda: history.extend(_tokenized(tokenizer, replies)), lambda _: None,
                                    lambda _message: None)

    def _load_history(self) -> None:
        """Builds the past-replies index on the model thread, when the setting is on and none is built."""
        if not self.settings.draft_from_history or self.history is not None or self.pair is None:
            return
        try:
            replies = self.store.history_replies()
        except StorageError:
            replies = []  # drafting from past replies starts empty; replies written from now on still join
        tokenizer = self.pair.target.tokenizer

        def build() -> SuffixIndex:
            index = SuffixIndex()
            index.extend(_tokenized(tokenizer, replies))
            return index

        def built(index: SuffixIndex) -> None:
            if self.settings.draft_from_history:
                self.history = index
                self.status_changed.emit()

        self._run_in_background(build, built, lambda _message: None)

    def load_models(self) -> None:
        """Loads the settings' models on the model thread (never the GUI thread); the chat is ready (_on_loaded) as
        soon as the target is in. The draft model loads with it only when the chosen drafter needs one; else the
        pair keeps it for later (load_pair's draft_later), for the first race lane or benchmark mode that asks
        (ModelPair.load_draft, on the model thread), so the draft's seconds (and transformers') are not spent at
        launch. The calibration and a torch target's warm-up run after ready (_settle)."""
        settings = self.settings
        self._load_generation += 1  # a newer load makes the results of the older ones stale
        generation = self._load_generation
        self.loading = True
        self.status_changed.emit()
        cancel = threading.Event()  # set when the app closes during the load

        def load() -> ModelPair:
            target = ModelSource.parse(settings.target)
            uses_draft = settings.drafter in MODEL_DRAFTERS
            draft = ModelSource.parse(settings.draft) if uses_draft and settings.draft else default_draft_for(target)
            if uses_draft and draft is None:
                raise SpecchatError("The model drafter needs a draft model: choose one in Settings.")
            options = LoadOptions(device=settings.device, dtype=settings.load_dtype, exactness=settings.exactness,
                                  gpu_layers=settings.load_gpu_layers)
            # the shipped draft (25 MB) that the drafter does not use stays a source, so that races can still put it
            # beside the head: checked and loaded by the first engine that drafts with it
            pair = load_pair(target, draft, options, draft_later=not uses_draft)
            build_report()  # probed here, off the GUI thread: the banner, the status bar and About read it
            pair.packed_weights = settings.packed_weights
            if settings.drafter in HEAD_DRAFTERS:
                pair.head()  # loaded now, so that a missing or broken head shows here rather than at the first reply
            if cancel.is_set():
                raise SpecchatError("Loading was stopped.")
            return pair

        self._run_in_background(load, lambda pair: self._on_loaded(pair, generation),
                                lambda message: self._on_load_failed(message, generation), cancel)

    def _settle(self, generation: int) -> None:
        """After ready, one job on the model thread (a reply asked for meanwhile runs after it): the plain-decoding
        calibration, only when the store keeps none for this target as it runs (_calibration_key; a kept one is
        the baseline at once, and plain replies of short chats refresh it: chats.run_book), and for a torch target
        the chat's engine run once (_warm_up). A llama.cpp target needs no warm-up: its cost curve is measured in the
        background while the model is idle (core/one_time.py). The job of a load that a newer one replaced does
        nothing."""
        pair, engines, drafter = self.pair, self.engines, self.settings.drafter
        calibrate, warm = self.plain_tokens_per_s is None, pair.target.native is None
        if not (calibrate or warm):
            return
        cancel = threading.Event()  # set when the app closes meanwhile

        def settle() -> float | None:
            if generation != self._load_generation:
                return None
            speed = self._calibrate(engines, cancel) if calibrate else None
            if warm:
                self._warm_up(engines, drafter, cancel)
            return None if cancel.is_set() else speed  # cut short: it measured nothing worth keeping

        self._run_in_background(settle, lambda speed: self._on_calibrated(speed, pair), lambda _message: None,
                                cancel)

    def _calibration_key(self) -> tuple[str, str, str]:
        """What a calibration is kept under in the store: the target's name, its place and how it runs (its dtype,
        and for a llama.cpp target where and how: threads, GPU layers, kernels), as a plain speed depends on them."""
        target = self.pair.target
        kernels = str(target.dtype) if target.native is None else f"{target.dtype}; {target.runs_on}"
        return target.name, target.place, kernels

    def _on_calibrated(self, speed: float | None, pair: ModelPair) -> None:
        """The calibration measured `speed` on `pair` (None: none measured): the baseline now, kept in the store
        for the next launches, unless the pair was replaced meanwhile."""
        if speed is None or pair is not self.pair:
            return
        self.plain_tokens_per_s = speed
        try:
            self.store.save_calibration(*self._calibration_key(), speed)
        except StorageError:
            pass  # this launch has its baseline; the next one measures again

    @staticmethod
    def _warm_up(engines: EngineCache, drafter: str, cancel: threading.Event | None) -> None:
        """The chat's engine, built and run once: the first reply then starts with the cost curve measured (a fresh
        engine drafts blind for its first steps, which made the first reply after launch the slowest)."""
        try:
            engines.pair.check_drafter(drafter)
        except SpecchatError:
            return  # said when a reply is asked for
        reply_to(engines.chat_engine(drafter), CALIBRATION_CHAT, None, GenerationConfig(max_new_tokens=24), cancel)

    @staticmethod
    def _calibrate(engines: EngineCache, cancel: threading.Event | None = None) -> float:
        """Plain decoding speed of this target on this device: the baseline of every reply's speedup."""
        plain = engines.chat_engine("none")
        reply_to(plain, CALIBRATION_CHAT, None, GenerationConfig(max_new_tokens=4), cancel)  # warm-up
        result = reply_to(plain, CALIBRATION_CHAT, None, GenerationConfig(max_new_tokens=CALIBRATION_TOKENS), cancel)
        return result.stats.decode_tokens_per_s

    def _on_loaded(self, pair: ModelPair, generation: int) -> None:
        """The load `generation` has its pair: the chat is ready now, its baseline the stored calibration if any;
        the calibration and warm-up follow on the model thread (_settle)."""
        if generation != self._load_generation:
            return  # settings changed again while this load ran: the newer load's models are the ones to use
        self.pair = pair
        self._load_history()
        self.loading = False
        try:
            self.plain_tokens_per_s = self.store.latest_calibration(*self._calibration_key())
        except StorageError:
            self.plain_tokens_per_s = None  # measured again (_settle)
        # A float format or kernels that do not hold replies bit-identical (bfloat16, llama.cpp's fastest kernels)
        # are said once per load, in the banner: as information, not as an error.
        # So is a GPU that this installation cannot use (engine/backends/llamacpp/built.py), with the fix.
        notes = [self.pair.target.precision_note] + [f"A GPU is unused: {n}." for n in build_report().unused_gpu()]
        if any(notes):
            self.note = "\n".join(note for note in notes if note)
        self.status_changed.emit()
        self._settle(generation)

    def _on_load_failed(self, message: str, generation: int) -> None:
        if generation != self._load_generation:
            return
        self.loading = False
        self.pair = None
        self.error = f"The models could not be loaded: {message}\nChoose another model in Settings (Ctrl+,)."
        self.status_changed.emit()

    def _run_in_background(self, function, on_done, on_failed, cancel: threading.Event | None = None,
                           thread: JobThread | None = None) -> None:
        """function runs on `thread` (the model thread unless given); on_done or on_failed gets its end, queued to
        the GUI thread."""
        worker = FunctionWorker(function, cancel)
        worker.returned.connect(on_done)
        worker.errored.connect(on_failed)
        (thread or self.model_thread).submit(worker)

    def check_pair(self, target: str, draft: str) -> Generator[str, None, tuple[bool, str]]:
        """The Settings dialog's pair check, as a generator run on a background thread (it can take half a minute:
        engine.loading.pair.checking_sources): yields what it is doing, returns (compatible, the verdict for the
        user)."""
        try:
            report = yield from checking_sources(ModelSource.parse(target), ModelSource.parse(draft))
        except SpecchatError as error:
            return False, str(error)
        return report.compatible, report.summary().capitalize()

    def apply_settings(self, settings: AppSettings) -> None:
        reload = settings.model_key() != self.settings.model_key() or self.pair is None
        self.settings = settings
        settings.save(QSettings())
        if not settings.draft_from_history:
            self.history = None  # forgotten at once; rebuilt from the database when turned back on
        if reload:
            self.pair = None
            self.load_models()
        else:
            self._load_history()
        self.status_changed.emit()

    def download(self, hub_id: str, link) -> None:
        """Lets the asking dialog follow the downloads through `link` (downloads.DownloadsLink) and, given a Hub id,
        queues its download on the download thread (an empty id only links)."""
        link.attach(self.downloads)
        if hub_id.strip():
            self.downloads.start(hub_id)

    def _on_download_ended(self, repo_id: str) -> None:
        """A download that failed while no dialog showed it is said in the window's banner."""
        state = self.downloads.state(repo_id)
        if state is not None and state.status == "failed" and not self.downloads.watchers:
            self.error = state.message
            self.status_changed.emit()

    def status_text(self) -> str:
        if self.loading:
            from ..models.sources import EMBEDDED_NAME

            name = EMBEDDED_NAME if self.settings.target in ("", "embedded") else self.settings.target
            return f"Loading {name}…"
        if self.pair is None:
            return "No model loaded"
        drafter = drafter_kind(self.settings.drafter).label
        if self._history_for(self.settings.drafter) is not None and self.settings.drafter != "history":
            drafter += " + past replies"
        k = "adaptive K" if self.settings.adaptive_k else f"K = {self.settings.k}"
        # The status bar is narrow: "(embedded, GGUF Q4_1)" is dropped, and a file is named without its folder.
        target = Path(self.pair.target.name.split(" (")[0]).name
        draft = self.pair.draft
        where = f" · draft: {draft.runs_on.removeprefix('llama.cpp, ').split(',')[0]}" if draft is not None else ""
        return f"{target} · {drafter} · {k} · {self.pair.target.runs_on}{where}"

    # -- one generation at a time -----------------------------------------------------------------------------------

    def claim_device(self, user: str) -> None:
        """A chat reply, a race or a benchmark is using the models; the others wait (they share the models, and
        running two at once would also spoil every speed measurement)."""
        self._device_users.add(user)
        self.status_changed.emit()

    def release_device(self, user: str) -> None:
        self._device_users.discard(user)
        self.status_changed.emit()

    def device_busy(self, besides: str | None = None) -> bool:
        return bool(self._device_users - {besides})

    # -- runs and statistics (chats/run_book.py) ------------------------------------------------------------------

    @property
    def plain_tokens_per_s(self) -> float | None:
        """Plain decoding's speed on this device: the baseline of every chat reply's speedup."""
        return self.runs.plain_tokens_per_s

    @plain_tokens_per_s.setter
    def plain_tokens_per_s(self, value: float | None) -> None:
        self.runs.plain_tokens_per_s = value

    def run_footer(self, message_id: int) -> str:
        """The line under the reply `message_id`: its run's figures and how it ended (RunBook.footer)."""
        return self.runs.footer(message_id)

    def stats_text(self, conversation_id: int | None) -> str:
        """The status bar's figures for this chat (None: none open) and this app session (RunBook.status_text)."""
        return self.runs.status_text(conversation_id)

    def export(self, conversation_id: int, path: str, kind: str) -> str | None:
        """Writes the chat to `path`, readable by the user only, all at once (a failed export leaves no half file
        and keeps an older file of that name). JSON is indented while it stays within what import_file reads back,
        else compact. Returns a warning for the user when even the compact file is too large to import back, else
        None. Raises StorageError (reading the chat) or OSError (writing)."""
        warning = None
        if kind == "md":
            text = self.store.export_markdown(conversation_id)
        else:
            data = self.store.export_json(conversation_id)
            text = json.dumps(data, indent=1, ensure_ascii=False, default=str)
            if len(text.encode("utf-8")) > MAX_IMPORT_BYTES:
                text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str)
                size = len(text.encode("utf-8"))
                if size > MAX_IMPORT_BYTES:
                    warning = (f"The export has {format_size(size)}: more than the {format_size(MAX_IMPORT_BYTES)} "
                               "that Import reads back. It is complete, but specchat cannot import it.")
        atomic_write_text(Path(path), text, mode=0o600, durable=True, make_folder=False)
        return warning

    def import_file(self, path: str, on_progress: Callable | None = None) -> int:
        """Imports an exported chat and returns its id; StorageError says what is wrong with the file (nothing is
        written then). Runs on the background thread (ui/chat_files.py): a large file takes seconds to check and
        store. on_progress hears the store's storage.exchange.ImportProgress reports."""
        file = Path(path)
        try:
            size = file.stat().st_size
            if size > MAX_IMPORT_BYTES:
                raise StorageError(f"the file has {format_size(size)}; a specchat chat export is at most "
                                   f"{format_size(MAX_IMPORT_BYTES)}")
            data = file.read_bytes()
        except OSError as error:
            raise StorageError(f"the file cannot be read ({error.strerror or error})") from None
        return self.store.import_json(data, on_progress).id

    def shutdown(self, timeout_ms: int = SHUTDOWN_WAIT_MS) -> None:
        """Cancels the running and waiting jobs and ends the threads, waiting at most timeout_ms for each."""
        for thread in (self.model_thread, self.downloads.thread, self.background):
            thread.stop(timeout_ms)
        self._keep_baseline()
        self.store.end_app_session(self.app_session_id)

    def _keep_baseline(self) -> None:
        """The plain-decoding baseline as this launch's plain replies refreshed it (RunBook.complete), kept for the
        next launch: a stored calibration is the baseline at once (_on_loaded), so one taken on a busy machine must
        not outlive the plain replies that measured better."""
        if self.pair is None or self.plain_tokens_per_s is None:
            return
        key = self._calibration_key()
        try:
            if self.store.latest_calibration(*key) != self.plain_tokens_per_s:
                self.store.save_calibration(*key, self.plain_tokens_per_s)
        except StorageError:
            pass  # the next launch calibrates again


def _tokenized(tokenizer, texts: list[str]) -> list[list[int]]:
    """The ids of each of `texts` (past replies, on the model thread), encoded a few at a time under the tokenizer's
    lock (chat_prompt.encoded): the GUI and background threads count with the same tokenizer meanwhile."""
    ids: list[list[int]] = []
    for start in range(0, len(texts), TOKENIZED_AT_ONCE):
        ids += encoded(tokenizer, texts[start:start + TOKENIZED_AT_ONCE])
    return ids
