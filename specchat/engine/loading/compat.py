"""Can this draft model propose tokens for that target? Checked on tokenizers and configs before any weights load."""

from __future__ import annotations

from dataclasses import dataclass, field

SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")


@dataclass
class CompatibilityReport:
    reasons: list[str] = field(default_factory=list)  # each one alone makes the pair unusable
    notes: list[str] = field(default_factory=list)  # harmless differences worth knowing
    # How the tokenizers differ, when they do: the draft then drafts through text (drafting/universal.py).
    tokenizer_differences: list[str] = field(default_factory=list)

    @property
    def compatible(self) -> bool:
        return not self.reasons

    @property
    def through_text(self) -> bool:
        """True when the draft's token ids mean other texts than the target's: it can only draft through text."""
        return bool(self.tokenizer_differences)

    def summary(self) -> str:
        if not self.compatible:
            return "incompatible: " + "; ".join(self.reasons)
        if self.through_text:
            return ("compatible through text (universal drafting): the tokenizers differ ("
                    + "; ".join(self.tokenizer_differences) + "), so each step decodes the draft's tokens to text "
                    "and encodes it for the target; output stays exactly the target's, each step costs more than "
                    "with a shared tokenizer" + "".join(f"; {note}" for note in self.notes))
        return "compatible" + (f" ({'; '.join(self.notes)})" if self.notes else "")


def shares_token_ids(target_tokenizer, draft_tokenizer) -> bool:
    """Whether every token id means the same text to both tokenizers, so drafts can be compared id for id."""
    return target_tokenizer.get_vocab() == draft_tokenizer.get_vocab()


def check_pair(target_tokenizer, draft_tokenizer, target_config=None, draft_config=None) -> CompatibilityReport:
    """Speculative decoding compares token ids: when both sides mean the same text by every id, drafts are
    compared id for id; otherwise they go through text (the universal drafter), which any two tokenizers allow."""
    report = CompatibilityReport()
    target_vocab, draft_vocab = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if len(target_vocab) != len(draft_vocab):
        report.tokenizer_differences.append(
            f"vocabulary sizes differ: target {len(target_vocab)} tokens, draft {len(draft_vocab)}")
    differing = _differing_tokens(target_vocab, draft_vocab)
    if differing:
        report.tokenizer_differences.append(
            f"{differing[0]} token ids have different texts, e.g. " + ", ".join(differing[1]))
    if report.through_text:
        return report  # special ids and output rows only matter when ids are compared directly
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
