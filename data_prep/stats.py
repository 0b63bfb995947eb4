"""Statistics of a data-prep run (for the JSON summary) and the same statistics inferred from records.

`Stats` is filled from the instances as they are built, so its n-gram spans and [MASK]/kept/random
counts are exact. `record_statistics` infers them from finished tf.train.Example records (the only way
to get them from the original's file); both files go through that same inference in the equivalence test.
Unmasked instances (masked at training time) have the instance statistics only: the masking ones are
None (null in the JSON summary).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from data_prep.instances import MaskedInstance

# The summary and record statistics that describe masking (None for unmasked instances).
MASKING_SUMMARY_KEYS = (
    "predictions_per_instance",
    "ngram_span_histogram",
    "ngram_span_shares",
    "replacement_shares",
    "permuted_predictions",
)
MASKING_RECORD_KEYS = ("predictions_per_instance", "replacement_shares", "run_shares")


@dataclasses.dataclass
class Stats:
    """Counters merged across workers; `summary()` turns them into the summary fields."""

    documents: int = 0
    single_sentence_documents: int = 0
    sentences: int = 0
    tokens: int = 0
    instances: int = 0
    sop_label_1: int = 0
    random_document_b: int = 0
    real_tokens: int = 0
    predictions: int = 0
    masked: int = 0
    kept: int = 0
    randomized: int = 0
    permuted: int = 0
    dropped_one_token_chunks: int = 0
    span_lengths: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def add_instance(self, instance: MaskedInstance, random_document: bool) -> None:
        """Counts one finished instance."""
        self.instances += 1
        self.sop_label_1 += instance.sop_label
        self.random_document_b += random_document
        self.real_tokens += len(instance.input_ids)
        self.predictions += len(instance.masked_positions)
        n_mask, n_keep, n_random = instance.replacements
        self.masked += n_mask
        self.kept += n_keep
        self.randomized += n_random
        self.permuted += instance.permuted
        self.span_lengths.update(instance.span_lengths)

    def merge(self, other: "Stats") -> None:
        """Adds another worker's counters."""
        for field in dataclasses.fields(self):
            if field.name == "span_lengths":
                self.span_lengths.update(other.span_lengths)
            else:
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def summary(self, masked: bool = True) -> dict:
        """Counts, label balance, means, span histogram and replacement shares; without `masked`
        (unmasked instances) the masking statistics are None."""
        replaced = self.masked + self.kept + self.randomized
        summary = {
            "documents": self.documents,
            "single_sentence_documents": self.single_sentence_documents,
            "sentences": self.sentences,
            "tokens": self.tokens,
            "instances": self.instances,
            "sop_labels": {"0": self.instances - self.sop_label_1, "1": self.sop_label_1},
            "sop_label_1_share": _ratio(self.sop_label_1, self.instances),
            "random_document_b": self.random_document_b,
            "mean_real_length": _ratio(self.real_tokens, self.instances),
            "predictions_per_instance": _ratio(self.predictions, self.instances),
            "ngram_span_histogram": {str(n): c for n, c in sorted(self.span_lengths.items())},
            "ngram_span_shares": _shares(self.span_lengths),
            "replacement_shares": {
                "mask": _ratio(self.masked, replaced),
                "kept": _ratio(self.kept, replaced),
                "random": _ratio(self.randomized, replaced),
            },
            "permuted_predictions": self.permuted,
            "dropped_one_token_chunks": self.dropped_one_token_chunks,
        }
        if not masked:
            summary.update(dict.fromkeys(MASKING_SUMMARY_KEYS))
        return summary


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _shares(counter: Mapping[int, int]) -> dict[str, float]:
    total = sum(counter.values())
    return {str(n): _ratio(c, total) for n, c in sorted(counter.items())}


def masked_word_runs(features: Mapping[str, Sequence]) -> list[int]:
    """Lengths, in words, of the maximal runs of consecutive masked words of one record.

    Words are rebuilt from token_boundary exactly as the masking built them ([CLS] and the two [SEP],
    found from segment_ids and input_mask, open no word; a non-boundary piece continues the previous
    word). Adjacent n-grams masked separately merge into one run, identically for any producer, so runs
    compare the span-length distributions of two files without knowing the drawn n.
    """
    length = sum(features["input_mask"])
    num_a = list(features["segment_ids"][:length]).count(0)
    specials = {0, num_a - 1, length - 1}
    boundary = features["token_boundary"]
    words: list[list[int]] = []
    for position in range(length):
        if position in specials:
            continue
        if boundary[position] or not words:
            words.append([position])
        else:
            words[-1].append(position)
    masked = {
        p for p, w in zip(features["masked_lm_positions"], features["masked_lm_weights"]) if w > 0
    }
    runs, current = [], 0
    for word in words:
        if any(p in masked for p in word):
            current += 1
        elif current:
            runs.append(current)
            current = 0
    if current:
        runs.append(current)
    return runs


def record_statistics(records: Iterable[Mapping[str, Sequence]], mask_id: int = 4) -> dict:
    """Instances, SOP label-1 share, mean real length, predictions per instance, [MASK]/kept/random
    shares and the shares of masked-word run lengths (1, 2, 3, "4+") of decoded Example records.

    Records without `masked_lm_positions` (unmasked) count in the instance statistics only; the
    masking ones come from the masked records, None when there are only unmasked ones."""
    instances = label_1 = real = predictions = unmasked = 0
    kinds = collections.Counter()
    runs = collections.Counter()
    for features in records:
        instances += 1
        label_1 += features["next_sentence_labels"][0]
        real += sum(features["input_mask"])
        if "masked_lm_positions" not in features:
            unmasked += 1
            continue
        ids = features["input_ids"]
        for position, label, weight in zip(
            features["masked_lm_positions"],
            features["masked_lm_ids"],
            features["masked_lm_weights"],
        ):
            if weight <= 0:
                continue
            predictions += 1
            # A random replacement that hits [MASK] or the label itself (p ~ 1/30000) counts as those.
            kinds[
                "mask"
                if ids[position] == mask_id
                else "kept"
                if ids[position] == label
                else "random"
            ] += 1
        runs.update(min(r, 4) for r in masked_word_runs(features))
    total_kinds = sum(kinds.values())
    total_runs = sum(runs.values())
    statistics = {
        "instances": instances,
        "sop_label_1_share": _ratio(label_1, instances),
        "mean_real_length": _ratio(real, instances),
        "predictions_per_instance": _ratio(predictions, instances - unmasked),
        "replacement_shares": {
            k: _ratio(kinds[k], total_kinds) for k in ("mask", "kept", "random")
        },
        "run_shares": {
            ("4+" if n == 4 else str(n)): _ratio(runs[n], total_runs) for n in (1, 2, 3, 4)
        },
    }
    if unmasked and unmasked == instances:
        statistics.update(dict.fromkeys(MASKING_RECORD_KEYS))
    return statistics
