"""What produced a run, for its record: the models' names, the device and the exactness promise, taken from a loaded
pair or named by a remote engine. The one place a RunContext (storage/records.py) is filled: the chat's runs
(chats/run_book.py), the API's (server/served.py) and the benchmark's (bench/report.py) all come through here.
No torch and no Qt: the pair is read by its attributes."""

from __future__ import annotations

from dataclasses import dataclass

from .run_kind import remote_device
from .storage.records import RunContext


@dataclass(frozen=True)
class RunModels:
    """The models a run came from, as the statistics name them."""

    target: str
    device: str
    draft: str | None = None  # None for the model-free drafters and for remote engines
    exactness: str | None = None  # "bit-identical", "distribution", or None when not known (a remote engine)

    @classmethod
    def of_pair(cls, pair, drafter: str) -> RunModels:
        """A local pair's (engine.pair.ModelPair) target, device and exactness, and what drafts for `drafter`."""
        target = pair.target
        return cls(target.name, getattr(target, "place", str(target.device)), pair.draft_name(drafter),
                   getattr(target, "exactness", None))

    @classmethod
    def remote(cls, name: str, server: str | None = None) -> RunModels:
        """A remote engine's model `name`, on the "remote" device (with the server's kind when known)."""
        return cls(name, remote_device(server))

    def context(self, drafter: str, k: int, adaptive: bool, seed: int, temperature: float = 0.0,
                top_p: float = 1.0, top_k: int = 0, app_session_id: int | None = None) -> RunContext:
        """The run's RunContext: these models with the drafter's name and the decoding settings it ran with (the
        defaults: greedy)."""
        return RunContext(target=self.target, drafter=drafter, k=k, adaptive=adaptive, temperature=temperature,
                          top_p=top_p, top_k=top_k, seed=seed, device=self.device, draft=self.draft,
                          exactness=self.exactness, app_session_id=app_session_id)
