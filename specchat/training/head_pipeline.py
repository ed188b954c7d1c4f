"""`specchat train-head`: an EAGLE-style draft head trained on the target's own hidden states over its replies.

The data (HeadRounds.data): "broad", the shipped head's, is written by the target itself and around real documents
(training/broad.py); "templated", the earlier heads', is the draft model's replies plus training/varied.py's rounds.
Each reply is teacher-forced once through the target to record its hidden states, then the head is trained on them
(training/eagle_head.py); with --attention an attention block is then added to it and trained on whole sequences.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import torch

from ..core.fs import atomic_write
from ..engine.backends.torch.lean import rope_theta
from ..engine.drafting.eagle_network import HeadShape, is_eagle_folder, load_head, save_head
from ..engine.loading.load import LoadedModel
from .broad import REQUEST_KINDS, BroadCounts, first_broad_prompts, follow_up_prompts, sample_turns
from .distill import Example, Labels
from .eagle_head import (HeadReport, Sequences, build_attending_head, build_head, split, split_indices,
                         teacher_features, train_attending_head, train_head)
from .pipeline import MANIFEST_NOTE, Pipeline, _eos_and_pad, _reply_vocabulary, examples_fingerprint, folder_megabytes
from .prompts import TrainingPrompt
from .varied import fourth_round_prompts, third_round_prompts


class HeadPipeline(Pipeline):
    """The draft pipeline's stages with the head's data (the module docstring) and the head's training: the
    replies are teacher-forced once through the target to record its hidden states, then the EAGLE-style head is
    trained on them (training/eagle_head.py)."""

    COMMAND = "specchat train-head"

    def _rounds(self, target: LoadedModel) -> list[tuple[str, list[tuple[Example, Labels]]]]:
        if self.settings.head_rounds.data == "broad":
            return self._broad_rounds(target)
        rounds = super()._rounds(target)
        extra = self.settings.head_rounds
        third = self._timed("third-round replies", lambda: self._replies(
            "round3", target, self._apart_from_suite("round3", third_round_prompts(extra.third_round,
                                                                                  self.settings.seed)),
            self.settings.max_new_tokens))
        fourth = self._timed("fourth-round replies", lambda: self._replies(
            "round4", target, self._fourth_prompts(target, rounds[0][1], third), extra.fourth_round_max_new_tokens))
        return rounds + [("round3", third), ("round4", fourth)]

    def _broad_rounds(self, target: LoadedModel) -> list[tuple[str, list[tuple[Example, Labels]]]]:
        extra, seed = self.settings.head_rounds, self.settings.seed
        counts = BroadCounts(extra.requests, extra.documents, extra.translations)
        key = {"head_rounds": asdict(extra), "seed": seed, "target": self.target_source.spec}
        prompts = self._timed("broad1 prompts", lambda: self._sampled_prompts("broad1", key, lambda: (
            first_broad_prompts(self._sampler(target, "broad1"), target.tokenizer, counts, seed))))
        first = self._timed("broad1 replies", lambda: self._replies(
            "broad1", target, self._apart_from_benchmark("broad1", prompts), self.settings.max_new_tokens))
        conversations = [(prompt, reply) for prompt, reply in self._answered(target, "broad1", first,
                                                                              extra.conversation_tokens)
                         if prompt.category in REQUEST_KINDS]
        key = {**key, "broad1": examples_fingerprint([e for e, _ in first])}
        follow_ups = self._timed("broad2 prompts", lambda: self._sampled_prompts("broad2", key, lambda: (
            follow_up_prompts(self._sampler(target, "broad2"), target.tokenizer, conversations, extra.follow_ups,
                              seed))))
        second = self._timed("broad2 replies", lambda: self._replies(
            "broad2", target, self._apart_from_benchmark("broad2", follow_ups), extra.fourth_round_max_new_tokens))
        return [("broad1", first), ("broad2", second)]

    def _sampler(self, target: LoadedModel, name: str):
        """(prefixes, max new tokens) -> the target's sampled user turns (training/broad.py), seeded per round."""
        eos, pad = _eos_and_pad(target)
        seed = self.settings.seed * 7 + int(name[-1])

        def sample(prefixes: list[list[int]], max_new_tokens: int) -> list[str | None]:
            with self.bar(total=len(prefixes), desc=f"{name} prompts", unit="prompt") as bar:
                return sample_turns(self._generator(target), target.tokenizer, prefixes, eos, pad, max_new_tokens,
                                    self.settings.generation_batch, seed, bar.update)
        return sample

    def _sampled_prompts(self, name: str, key: dict, make) -> list[TrainingPrompt]:
        """Prompts the target wrote, kept in the work folder with what made them (sampling them is not free)."""
        path, key = self.work / f"{name}-prompts.json", json.loads(json.dumps(key))
        if path.exists():
            stored = json.loads(path.read_text(encoding="utf-8"))
            if stored["key"] == key:
                self.log(f"  reusing {path}")
                self._reused = True
                return [TrainingPrompt(p["category"], p["text"], tuple(p["history"]), sources=tuple(p["sources"]))
                        for p in stored["prompts"]]
        prompts = make()
        rows = [{"category": p.category, "text": p.text, "history": list(p.history), "sources": list(p.sources)}
                for p in prompts]
        atomic_write(path, lambda tmp: tmp.write_text(json.dumps({"key": key, "prompts": rows}),
                                                           encoding="utf-8"))
        return prompts

    def _fourth_prompts(self, target: LoadedModel, first, third) -> list[TrainingPrompt]:
        extra = self.settings.head_rounds
        conversations = [(prompt.text, reply) for name, pairs in (("round1", first), ("round3", third))
                         for prompt, reply in self._answered(target, name, pairs, extra.conversation_tokens)]
        documents = [reply for prompt, reply in self._answered(target, "round3", third, extra.document_tokens)
                     if prompt.category == "writing"]
        return self._apart_from_suite("round4", fourth_round_prompts(conversations, documents, extra.fourth_round,
                                                                     self.settings.seed))

    def _train_and_save(self, target: LoadedModel, examples: list[Example], labels: list[Labels]) -> dict:
        features = self._features(target, examples)
        report, head = self._timed("head training", lambda: self._stateless_head(target, examples, features))
        if self.settings.head.attention:
            prompt_features = self._features(target, examples, span="prompt")
            self.facts["stateless_head_epochs"] = report.epochs
            report, head = self._timed("attending head training", lambda: self._train_attending_head(
                target, examples, prompt_features, features, head))
        return self._save_head(target, head, report, examples)

    def _features(self, target: LoadedModel, examples: list[Example], span: str = "reply") -> list[torch.Tensor]:
        """The target's hidden states on every reply (or prompt), computed and kept per round, so that a new or
        changed round costs only its own pass."""
        features, start = [], 0
        for name, size in self.round_sizes:
            part = examples[start : start + size]
            start += size
            stage = f"{name} hidden states" + (" (prompts)" if span == "prompt" else "")
            features += self._timed(stage, lambda: self._round_features(target, name, part, span))
        return features

    def _round_features(self, target: LoadedModel, name: str, part: list[Example], span: str) -> list[torch.Tensor]:
        path = self.work / (f"features-{name}.pt" if span == "reply" else f"features-{name}-prompt.pt")
        rows = (lambda e: len(e.ids) - e.prompt_len + 1) if span == "reply" else (lambda e: e.prompt_len - 1)
        if path.exists():
            stored = torch.load(path, weights_only=True)  # tensors only: a planted pickle runs nothing
            if [len(f) for f in stored] == [rows(e) for e in part]:
                self.log(f"  reusing {path}")
                self._reused = True
                return stored
        with self.bar(total=len(part), desc=f"{name} hidden states", unit="reply") as bar:
            computed = teacher_features(target.model, part, progress=bar.update, span=span)
        atomic_write(path, lambda tmp: torch.save(computed, tmp))
        return computed

    def _stateless_head(self, target: LoadedModel, examples: list[Example], features: list[torch.Tensor]):
        """The stateless head, kept in the work folder with the settings that made it (reused when they match:
        the attending stage can then be changed and rerun without retraining it)."""
        folder, record = self.work / "stateless-head", self.work / "stateless-head.json"
        sizes = {name: getattr(self.settings.head, name) for name in ("inner", "blocks", "vocab")}
        made_with = json.loads(json.dumps({"head": sizes, "head_train":
                                           asdict(self.settings.head_train), "seed": self.settings.seed,
                                           "heldout_fraction": self.settings.heldout_fraction,
                                           "examples": examples_fingerprint(examples)}))
        if is_eagle_folder(folder) and record.exists():
            stored = json.loads(record.read_text(encoding="utf-8"))
            if stored["made_with"] == made_with:
                self.log(f"  reusing {folder}")
                self._reused = True
                self.facts.update(stored["facts"])
                head = load_head(folder, target.model).float()
                return HeadReport(stored["epochs"]), head
        report, head = self._train_head(target, examples, features)
        save_head(head, folder, {"target": self.target_source.spec})
        facts = {k: self.facts[k] for k in ("train_positions", "heldout_positions", "head_vocabulary",
                                            "reply_tokens_covered")}
        record.write_text(json.dumps({"made_with": made_with, "facts": facts, "epochs": report.epochs}, indent=1),
                          encoding="utf-8")
        # As saved (float16), so that a rerun reusing it continues from exactly the same weights.
        return report, load_head(folder, target.model).float()

    def _train_attending_head(self, target: LoadedModel, examples: list[Example], prompt_features, features,
                              stateless):
        """The attending head, started from the stateless one (training/eagle_head.py, build_attending_head), on the
        same split of whole sequences."""
        options = self.settings.attending_train
        pick = lambda indices: Sequences([examples[i] for i in indices], [prompt_features[i] for i in indices],
                                         [features[i] for i in indices])
        train, heldout = map(pick, split_indices(len(examples), self.settings.heldout_fraction, self.settings.seed))
        config = target.model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = HeadShape(hidden=stateless.shape.hidden, inner=stateless.shape.inner, blocks=stateless.shape.blocks,
                          vocab=stateless.shape.vocab, heads=config.num_attention_heads,
                          kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
                          head_dim=head_dim, rope_theta=rope_theta(config))
        head = build_attending_head(stateless, shape, self.settings.seed)
        steps = len(train.batches(options.batch_tokens)) * options.epochs
        with self.bar(total=steps, desc="attending head training", unit="step") as bar:
            progress = self._epoch_progress(bar, "held-out acceptance by position {heldout_acceptance_by_position}")
            return train_attending_head(head, target.model, train, heldout, options, progress), head

    def _train_head(self, target: LoadedModel, examples: list[Example], features: list[torch.Tensor]):
        options = self.settings.head_train
        train, heldout = split(examples, features, self.settings.heldout_fraction, self.settings.seed, options.unroll)
        vocab_ids, covered = _reply_vocabulary(target, examples, self.settings.head.vocab)
        self.facts.update(train_positions=len(train), heldout_positions=len(heldout),
                          head_vocabulary=len(vocab_ids), reply_tokens_covered=covered)
        self.log(f"  {len(train)} training positions, {len(heldout)} held out; the head's {len(vocab_ids)} tokens "
                 f"cover {self.facts['reply_tokens_covered']:.1%} of reply tokens")
        hidden = target.model.get_input_embeddings().weight.shape[1]
        shape = HeadShape(hidden=hidden, inner=self.settings.head.inner, blocks=self.settings.head.blocks,
                          vocab=len(vocab_ids))
        head = build_head(target.model, vocab_ids, shape, self.settings.seed)
        steps = -(-len(train) // options.batch) * options.epochs
        with self.bar(total=steps, desc="head training", unit="step") as bar:
            progress = self._epoch_progress(bar, "held-out acceptance by position {heldout_acceptance_by_position}")
            return train_head(head, target.model, train, heldout, options, progress), head

    def _save_head(self, target: LoadedModel, head, report, examples: list[Example]) -> dict:
        summary = self._summary(sum(p.numel() for p in head.parameters()), report, examples)
        save_head(head, self.out, {"target": self.target_source.spec})
        (self.out / "training.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (self.out / "README.md").write_text(head_card(summary), encoding="utf-8")
        self._write_manifest()
        self.log(f"head saved to {self.out} ({folder_megabytes(self.out):.1f} MB)")
        return summary


def head_card(summary: dict) -> str:
    final = summary["epochs"][-1] if summary["epochs"] else {}
    head, facts = summary["settings"]["head"], summary["facts"]
    minutes = sum(summary["timings_s"].values()) / 60
    attention = ("an attention block over the earlier positions, with its own KV cache, then "
                 if head.get("attention") else "")
    return "\n".join([
        f"# EAGLE-style draft head for {summary['target']}", "",
        f"A {summary['parameters'] / 1e6:.1f}M-parameter head ({attention}{head['blocks']} residual MLP blocks of "
        f"width {head['inner']}, float16) that drafts from the target's own last hidden state and the next token's "
        f"embedding, through the target's output head cut to its {facts.get('head_vocabulary')} most frequent reply "
        f"tokens (covering {facts.get('reply_tokens_covered', 0):.1%} of them). It is not a model on its own: "
        "specchat loads it with its target (the `eagle` and `eagle-hybrid` drafters). transformers' "
        "`generate(assistant_model=...)` cannot use it.", "",
        f"Trained with `specchat train-head` ({minutes:.0f} minutes end to end on the machine that made it, the "
        f"replies included) on {_data_phrase(summary)}, {sum(summary['replies_by_category'].values())} replies in "
        f"all. Held-out acceptance by draft position (each given the previous ones accepted): "
        f"{final.get('heldout_acceptance_by_position')}. "
        "Details in `training.json`.", "", MANIFEST_NOTE, "",
        "Licence: Apache-2.0, like the target model (SmolLM2-135M-Instruct, Hugging Face).", ""])


def _data_phrase(summary: dict) -> str:
    if (summary["settings"].get("head_rounds") or {}).get("data") == "broad":
        return ("the target's own greedy replies to requests it wrote itself (open chat, advice, writing, code, math, "
                "explanations, and its own follow-up turns), to work on public-domain PEP passages (summaries, "
                "questions, extraction) and to French paragraphs of Python's documentation to translate")
    return ("the same self-distilled replies as the shipped draft model plus two more varied rounds (follow-up turns, "
            "factual questions, documents to summarize, rewrite and extract from)")
