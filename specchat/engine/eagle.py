"""An EAGLE-style draft head: drafting from the target's own last hidden state (Li et al. 2024, "EAGLE").

A standalone draft model must rebuild from the tokens alone what the target already knows about the text. The
head instead reads the target's last hidden state f_t (computed anyway by the verification pass that produced
token x_{t+1}) and the embedding of x_{t+1}, and predicts the target's next hidden state f_{t+1}; the target's own
output head turns that into a guess for x_{t+2}. Further tokens chain the head on its own predicted states:

    f^_{t+1} = head(f_t, e(x_{t+1})),  x^_{t+2} = argmax f^_{t+1} W^T,  f^_{t+2} = head(f^_{t+1}, e(x^_{t+2})), ...

The head is stateless (residual MLP blocks, no attention and so no cache to roll back): all the context it needs
is in f_t. Its output head is the target's own, cut to the V' most frequent tokens of the target's replies
(FR-Spec, Zhao et al. 2025): the full 49152 x 576 matrix would cost a fifth of a target pass per drafted token,
the cut one a few percent, and a token outside it is only a missed draft, never a wrong output. The shipped file
holds just the head's own weights and the kept token ids; the embeddings and output rows come from the target.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from .drafters import Draft, Drafter, PromptLookupDrafter, over_vocabulary
from .errors import IncompatibleDraftError, ModelLoadError
from .sampling import Sampler

CONFIG_FILE = "eagle.json"
WEIGHTS_FILE = "eagle.safetensors"
FORMAT = "specchat-eagle-head"


@dataclass(frozen=True)
class HeadShape:
    hidden: int  # the target's hidden size
    inner: int = 1536  # width of each residual block
    blocks: int = 2
    vocab: int = 8192  # tokens the head can propose (the most frequent in the target's replies)


class EagleHead(nn.Module):
    """[f_t, e(x_{t+1})] -> f^_{t+1}: one linear map of the pair, then residual RMSNorm-SiLU-MLP blocks."""

    def __init__(self, shape: HeadShape):
        super().__init__()
        self.shape = shape
        self.fuse = nn.Linear(2 * shape.hidden, shape.hidden)
        self.norms = nn.ModuleList([nn.RMSNorm(shape.hidden, eps=1e-5) for _ in range(shape.blocks)])
        self.ups = nn.ModuleList([nn.Linear(shape.hidden, shape.inner) for _ in range(shape.blocks)])
        self.downs = nn.ModuleList([nn.Linear(shape.inner, shape.hidden) for _ in range(shape.blocks)])
        # The token ids the head proposes from (row i of its output head is the target's row vocab_ids[i]).
        self.register_buffer("vocab_ids", torch.zeros(shape.vocab, dtype=torch.long))

    def forward(self, feature: torch.Tensor, token_embedding: torch.Tensor) -> torch.Tensor:
        u = self.fuse(torch.cat([feature, token_embedding], dim=-1))
        for norm, up, down in zip(self.norms, self.ups, self.downs):
            u = u + down(nn.functional.silu(up(norm(u.float()).to(u.dtype))))  # the norm in float32
        return u


def save_head(head: EagleHead, folder: Path, info: dict) -> None:
    """Weights in float16 (half the size; the drafter computes in the target's dtype) and a small JSON config."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: (t.to(torch.float16) if t.is_floating_point() else t.to(torch.int32)).contiguous()
               for name, t in head.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS_FILE))
    config = {"format": FORMAT, "shape": asdict(head.shape), **info}
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def is_eagle_folder(folder: Path) -> bool:
    return (Path(folder) / CONFIG_FILE).is_file()


def load_head(folder: Path, target: nn.Module) -> EagleHead:
    """The head in `folder`, checked against the target it will read hidden states from."""
    from safetensors.torch import load_file

    folder = Path(folder)
    try:
        config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        if config.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        shape = HeadShape(**config["shape"])
        tensors = load_file(str(folder / WEIGHTS_FILE))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ModelLoadError(f"cannot read the draft head in {folder}: {error}") from error
    embeddings = target.get_input_embeddings().weight
    if shape.hidden != embeddings.shape[1]:
        raise IncompatibleDraftError(f"the draft head in {folder} reads hidden states of size {shape.hidden}, "
                                     f"but the target's are {embeddings.shape[1]}")
    head = EagleHead(shape)
    head.load_state_dict({name: t.to(torch.long) if name == "vocab_ids" else t for name, t in tensors.items()})
    if int(head.vocab_ids.max()) >= embeddings.shape[0]:
        raise IncompatibleDraftError(f"the draft head in {folder} proposes token ids outside the target's vocabulary")
    return head.to(device=embeddings.device, dtype=embeddings.dtype).eval()


class EagleDrafter(Drafter):
    """Drafts with an EagleHead from the target's hidden state of the last verified position.

    The engine hands over that state after every target pass (`wants_target_features`); a proposal of k tokens
    costs k passes of the head (a few percent of a target pass each), and nothing has to be rolled back.
    """

    name = "eagle"
    uses_model = True
    wants_target_features = True

    def __init__(self, head: EagleHead, target: nn.Module):
        self.head = head
        self.embeddings = target.get_input_embeddings().weight
        # The kept rows of the target's output head, contiguous: one small matrix product per drafted token.
        output = target.get_output_embeddings()
        self.output_rows = output.weight.detach()[head.vocab_ids].contiguous()
        self.output_bias = output.bias.detach()[head.vocab_ids] if output.bias is not None else None
        self._feature: torch.Tensor | None = None
        self._forwards = 0

    def begin(self, prompt: Sequence[int], sampler: Sampler, target_vocab_size: int) -> None:
        self._sampler = sampler
        self._target_vocab = target_vocab_size
        self._feature = None
        self._forwards = 0

    def accept_target_feature(self, feature: torch.Tensor) -> None:
        """The target's last hidden state at the position that produced the context's last token."""
        self._feature = feature

    @property
    def forward_count(self) -> int:
        return self._forwards

    @torch.inference_mode()
    def propose(self, context: Sequence[int], k: int) -> Draft | None:
        if self._feature is None:
            return None
        feature, token = self._feature.unsqueeze(0), context[-1]
        tokens: list[int] = []
        dists: list[torch.Tensor] = []
        for _ in range(k):
            feature = self.head(feature, self.embeddings[token].unsqueeze(0))
            logits = nn.functional.linear(feature[0], self.output_rows, self.output_bias)
            self._forwards += 1
            if self._sampler.greedy:
                token = int(self.head.vocab_ids[int(torch.argmax(logits))])
            else:
                # -inf outside the head's tokens: q is a proper distribution and the verification rule stays exact
                q = self._sampler.probs(over_vocabulary(logits, self.head.vocab_ids, self._target_vocab))
                token = int(self._sampler.sample(q))
                dists.append(q)
            tokens.append(token)
        return Draft(tokens=tokens, probs=torch.stack(dists) if dists else None)


class EagleHybridDrafter(EagleDrafter):
    """The head, and prompt lookup where the text repeats itself (as HybridDrafter does for a draft model): each
    step the engine weighs a lookup match (free) against the head (its acceptance rate and its cost) and takes the
    better. The head has no state to catch up on, so lookup steps need no bookkeeping at all."""

    name = "eagle-hybrid"

    def __init__(self, head: EagleHead, target: nn.Module):
        super().__init__(head, target)
        self._lookup = PromptLookupDrafter()

    def free_proposal(self, context: Sequence[int], k: int) -> Draft | None:
        return self._lookup.propose(context, k)
