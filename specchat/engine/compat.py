"""Can this draft model propose tokens for that target? Checked on tokenizers and configs before any weights load."""

from __future__ import annotations

from dataclasses import dataclass, field

SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")


@dataclass
class CompatibilityReport:
    reasons: list[str] = field(default_factory=list)  # each one alone makes the pair unusable
    notes: list[str] = field(default_factory=list)  # harmless differences worth knowing

    @property
    def compatible(self) -> bool:
        return not self.reasons

    def summary(self) -> str:
        if self.compatible:
            return "compatible" + (f" ({'; '.join(self.notes)})" if self.notes else "")
        return "incompatible: " + "; ".join(self.reasons)


def check_pair(target_tokenizer, draft_tokenizer, target_config=None, draft_config=None) -> CompatibilityReport:
    """Speculative decoding compares token ids, so both sides must mean the same text by every id."""
    report = CompatibilityReport()
    target_vocab, draft_vocab = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if len(target_vocab) != len(draft_vocab):
        report.reasons.append(f"vocabulary sizes differ: target {len(target_vocab)} tokens, draft {len(draft_vocab)}")
    differing = _differing_tokens(target_vocab, draft_vocab)
    if differing:
        report.reasons.append(f"{differing[0]} token ids have different texts, e.g. " + ", ".join(differing[1]))
    for name in SPECIAL_TOKENS:
        t, d = getattr(target_tokenizer, name, None), getattr(draft_tokenizer, name, None)
        if t != d:
            report.reasons.append(f"{name.removesuffix('_id').replace('_', ' ')} differs: target {t}, draft {d}")
    if target_config is not None and draft_config is not None:
        _check_embedding_rows(report, target_config, draft_config, len(target_vocab))
    return report


def _differing_tokens(target_vocab: dict[str, int], draft_vocab: dict[str, int]) -> tuple[int, list[str]] | None:
    target_by_id = {i: t for t, i in target_vocab.items()}
    draft_by_id = {i: t for t, i in draft_vocab.items()}
    ids = sorted(set(target_by_id) | set(draft_by_id))
    bad = [i for i in ids if target_by_id.get(i) != draft_by_id.get(i)]
    if not bad:
        return None
    examples = [f"id {i}: {target_by_id.get(i)!r} vs {draft_by_id.get(i)!r}" for i in bad[:3]]
    return len(bad), examples


def _check_embedding_rows(report: CompatibilityReport, target_config, draft_config, tokenizer_size: int) -> None:
    t_rows = getattr(target_config, "vocab_size", None)
    d_rows = getattr(draft_config, "vocab_size", None)
    if t_rows is None or d_rows is None or t_rows == d_rows:
        return
    if d_rows < tokenizer_size:
        report.reasons.append(f"the draft's output layer has {d_rows} rows but the tokenizer has {tokenizer_size} tokens")
    elif d_rows > t_rows:
        report.reasons.append(f"the draft's output layer ({d_rows} rows) is larger than the target's ({t_rows})")
    else:
        report.notes.append(f"output layers are padded differently ({t_rows} vs {d_rows} rows)")
