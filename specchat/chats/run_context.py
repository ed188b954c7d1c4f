"""What a run runs with: one RunContext, a generation config plus the models it runs on and the drafter's name. The
chat's replies, the race's lanes, the API's requests (server/served.py), the benchmark's modes (bench/) and the CLI
(commands/) all make one, and every run's record is made from it (RunContext.record: storage's plain-values
RunProvenance and run_record, so that storage never sees an engine object). No torch and no Qt: a pair is read by
its attributes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from ..core.run_kind import remote_device
from ..engine.decoding.speculative import GenerationConfig
from ..storage.records import RunProvenance, RunRecord, run_record


@dataclass(frozen=True)
class RunModels:
    """The models a run came from, as the statistics name them."""

    target: str
    device: str
    draft: str | None = None  # None for the model-free drafters and for remote engines
    exactness: str | None = None  # "bit-identical", "distribution", or None when not known (a remote engine)

    @classmethod
    def of_pair(cls, pair, drafter: str) -> RunModels:
        """A local pair's (engine.loading.pair.ModelPair) target, device and exactness, and what drafts for
        `drafter`."""
        target = pair.target
        return cls(target.name, getattr(target, "place", str(target.device)), pair.draft_name(drafter),
                   getattr(target, "exactness", None))

    @classmethod
    def remote(cls, name: str, server: str | None = None) -> RunModels:
        """A remote engine's model `name`, on the "remote" device (with the server's kind when known)."""
        return cls(name, remote_device(server))


@dataclass(frozen=True)
class RunContext:
    """A run's generation config (K, sampling, seed, length) with the models it runs on and the drafter's name, as
    the run starts: the settings or the models may change while it runs (Settings applied mid-reply, a reload), and
    its record must name what produced it.

    own_k False: the engine chooses its own K (a remote server behind the chat), so the record says K 0, not
    adaptive, whatever the config's K."""

    config: GenerationConfig
    models: RunModels
    drafter: str
    own_k: bool = True

    @classmethod
    def of_pair(cls, pair, drafter: str, config: GenerationConfig) -> RunContext:
        """The context of `drafter` on a loaded pair (engine.loading.pair.ModelPair), running with `config`."""
        return cls(config, RunModels.of_pair(pair, drafter), drafter)

    def seeded(self, seed: int) -> RunContext:
        """The same context with the config's seed set (known before the run starts: its record is written then)."""
        return replace(self, config=replace(self.config, seed=seed))

    def sampling_at(self, temperature: float) -> RunContext:
        """The same context sampling at `temperature` (a regenerated reply under a greedy config)."""
        config = self.config
        return replace(self, config=replace(config, sampling=replace(config.sampling, temperature=temperature)))

    def provenance(self, seed: int | None = None, app_session_id: int | None = None) -> RunProvenance:
        """The run's plain values for storage: the models' names, the drafter and the decoding settings; `seed`
        when the engine picked it (the config's otherwise)."""
        config, models = self.config, self.models
        sampling = config.sampling
        return RunProvenance(
            target=models.target, drafter=self.drafter, k=config.k if self.own_k else 0,
            adaptive=config.adaptive_k and self.own_k, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k, seed=config.seed if seed is None else seed, device=models.device,
            draft=models.draft, exactness=models.exactness, app_session_id=app_session_id)

    def record(self, stats: Mapping[str, Any], source: str, seed: int | None = None,
               app_session_id: int | None = None, **extra: Any) -> RunRecord:
        """The run to store (storage's run_record): the engine's figures (a GenerationStats.to_dict(), or some of
        its keys), this context's values (provenance), the source (chat, race, bench or api) and `extra` RunRecord
        fields (message_id, finish_reason, speedup, ...)."""
        return run_record(stats, self.provenance(seed, app_session_id), source, **extra)
