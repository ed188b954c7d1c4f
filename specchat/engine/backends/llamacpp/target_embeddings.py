"""A GGUF target's token embeddings and output head as torch modules, for a draft head that runs beside llama.cpp
(LlamaCppModel.embeddings): llama.cpp keeps its weights in its own buffers, and the head needs them as tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from specchat.core.errors import ModelLoadError


class TargetEmbeddings(torch.nn.Module):
    """What a draft head needs of its target besides hidden states: token embeddings and the output head (the same
    matrix when the file ties them). Offers the two accessors of a transformers model, so the head code is shared."""

    def __init__(self, embeddings: torch.Tensor, output: torch.Tensor | None = None):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding.from_pretrained(embeddings, freeze=True)
        self.lm_head = torch.nn.Linear(embeddings.shape[1], embeddings.shape[0], bias=False)
        self.lm_head.weight = self.embed_tokens.weight if output is None else torch.nn.Parameter(output, False)

    @classmethod
    def from_gguf(cls, path: Path) -> TargetEmbeddings:
        """The embeddings and output head of the GGUF file at `path`, dequantized to float32 (ModelLoadError
        where the file has no embeddings or cannot be read)."""
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
        from gguf.quants import dequantize

        from specchat.engine.loading.gguf_header import tensor_bytes

        sizes = {int(kind): size for kind, size in GGML_QUANT_SIZES.items()}
        tensors = tensor_bytes(path, {"token_embd.weight", "output.weight"}, sizes)
        if "token_embd.weight" not in tensors:
            raise ModelLoadError(f"{path.name} has no token embeddings")

        def read(name: str) -> torch.Tensor:
            tensor = tensors[name]
            if len(tensor.dims) != 2:
                raise ModelLoadError(f"{path.name}: {name} is not a matrix")
            try:
                values = dequantize(tensor.data, GGMLQuantizationType(tensor.ggml_type))
            except (RuntimeError, ValueError) as error:  # a type gguf cannot dequantize (a RuntimeError)
                raise ModelLoadError(f"{path.name}: {name}'s type cannot be read here ({error})") from error
            return torch.from_numpy(values.astype(np.float32, copy=False)
                                    .reshape(int(tensor.dims[1]), int(tensor.dims[0])).copy())

        return cls(read("token_embd.weight"), read("output.weight") if "output.weight" in tensors else None)

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed_tokens

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.lm_head
