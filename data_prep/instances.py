"""SOP sentence pairs and n-gram masking (truncation: `albert_tf.text.pairs`): the original algorithm as pure functions of (tokens, rng).

Everything works on token ids. `rng` is a `random.Random` owned by one document and dupe pass, so the
output does not depend on how documents are spread over processes. The original drew the n-gram size
from numpy's global, unseeded generator; here it comes from `rng` with the same
probabilities, which makes the whole job reproducible.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Sequence

from albert_tf.settings import setting
from albert_tf.text.ngrams import ngram_cumulative
from albert_tf.text.pairs import truncate_seq_pair_randomly

# Single punctuation characters that the original's SentencePiece start-piece rule treats as word starts
# (its string lists `"` twice; `'`, `<`, `=`, `>` are not in it).
_START_PUNCTUATION = frozenset('!"#$%&()*+,-./:;?@[\\]^_`{|}~')
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz") | _START_PUNCTUATION


def is_start_piece(piece: str) -> bool:
    """The original `_is_start_piece_sp`: does this SentencePiece piece open a new word?

    True for pieces starting with "▁" or "<", single punctuation pieces, and any piece holding a character
    that (lowercased) is neither a-z nor that punctuation (digits, apostrophes, accents, non-Latin).
    """
    return (
        piece.startswith("\u2581")
        or piece.startswith("<")
        or piece in _START_PUNCTUATION
        or not all(c.lower() in _WORD_CHARS for c in piece)
    )


def start_piece_table(pieces: Sequence[str]) -> list[bool]:
    """`is_start_piece` for every id of a vocabulary (pieces in id order)."""
    return [is_start_piece(p) for p in pieces]


@dataclasses.dataclass(frozen=True)
class PairConfig:
    """How documents become sentence pairs (the original flags: names, defaults).

    `single_sentence_random_doc=True` reproduces the original's leak: in SOP mode a chunk
    of one sentence gets B from a random other document and label 1. False instead cuts the sentence at a
    random word start into an ordinary SOP pair (swapped with probability 0.5); a one-token sentence then
    gives no instance.

    Args:
        every field is one flag of data prep, its help text in its `setting`.

    Example:
        PairConfig(max_seq_length=128, random_next_sentence=True)  # NSP records
    """

    max_seq_length: int = setting(512, "Maximum sequence length.")
    short_seq_prob: float = setting(
        0.1, "Probability of a shorter target length for a document pass."
    )
    random_next_sentence: bool = setting(
        False, "BERT-style NSP instead of sentence order prediction."
    )
    single_sentence_random_doc: bool = setting(
        True,
        "Reproduce the original's leak: a one-sentence chunk gets B from a random other "
        "document, label 1. False: cut the sentence at a random word start into an ordinary "
        "SOP pair.",
    )


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """Masked-LM settings (the original flags: names, defaults).

    Args:
        every field is one flag of data prep, its help text in its `setting`.

    Example:
        MaskingConfig(max_predictions_per_seq=20, ngram=3)
    """

    masked_lm_prob: float = setting(0.15, "Masked LM probability.")
    max_predictions_per_seq: int = setting(
        20,
        "Maximum masked LM predictions per sequence (the command line's default: "
        "min(20, --max_seq_length)).",
    )
    ngram: int = setting(3, "Maximum n-gram length (words) to mask.")
    favor_shorter_ngram: bool = setting(True, "p(n) ∝ 1/n; otherwise reversed.")
    do_whole_word_mask: bool = setting(True, "Mask whole words (all pieces of a word together).")
    do_permutation: bool = setting(
        False, "Experimental (original): also permute a second set of tokens."
    )

    def ngram_cumulative(self) -> list[float]:
        """Cumulative p(n) for n = 1..ngram, p(n) ∝ 1/n (reversed unless favor_shorter_ngram)."""
        return ngram_cumulative(self.ngram, self.favor_shorter_ngram)


@dataclasses.dataclass
class SentencePair:
    """Segments A and B (ids, already truncated) and the SOP label (1 = swapped or random-document B)."""

    tokens_a: list[int]
    tokens_b: list[int]
    label: int
    random_document: bool = False  # B came from another document (the single-sentence leak or NSP)


@dataclasses.dataclass
class MaskedInstance:
    """One packed instance `[CLS] A [SEP] B [SEP]`, masked (or not: `build_unmasked_instance`).

    `span_lengths` holds the length in words of every n-gram masked (after the fall-back to shorter
    n-grams); `replacements` counts the predictions replaced by [MASK], kept, and replaced at random.
    """

    input_ids: list[int]
    num_segment_a: int
    token_boundary: list[int]
    masked_positions: list[int]
    masked_label_ids: list[int]
    sop_label: int
    span_lengths: list[int]
    replacements: tuple[int, int, int]
    permuted: int = 0


def _split_single_sentence(
    sentence: list[int], word_start: Sequence[bool] | None, rng: random.Random
) -> tuple[list[int], list[int]] | None:
    """Cuts one sentence at a random word start (any token if it has no inner word start)."""
    if len(sentence) < 2:
        return None
    cuts = [k for k in range(1, len(sentence)) if word_start is None or word_start[sentence[k]]]
    if not cuts:
        cuts = list(range(1, len(sentence)))
    cut = cuts[rng.randrange(len(cuts))]
    return sentence[:cut], sentence[cut:]


def create_pairs_from_document(
    documents: Sequence[Sequence[list[int]]],
    document_index: int,
    config: PairConfig,
    rng: random.Random,
    word_start: Sequence[bool] | None = None,
) -> tuple[list[SentencePair], int]:
    """The original `create_instances_from_document` up to truncation.

    Returns the pairs and the number of one-token single-sentence chunks dropped (only when
    `single_sentence_random_doc` is off).

    Args:
      documents: the pool of tokenized documents (lists of sentences of ids) that random-document
        segments are drawn from; the original used the whole corpus, we use a bounded window.
      document_index: the document to cut into pairs.
      config: pair settings.
      rng: this document's (and dupe pass's) generator.
      word_start: start-piece table, only used when `single_sentence_random_doc` is off.
    """
    document = documents[document_index]
    max_num_tokens = config.max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < config.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    pairs: list[SentencePair] = []
    dropped = 0
    chunk: list[list[int]] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        chunk.append(segment)
        chunk_length += len(segment)
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for s in chunk[:a_end] for t in s]
            random_document = False
            if (
                len(chunk) == 1
                and not config.random_next_sentence
                and not config.single_sentence_random_doc
            ):
                halves = _split_single_sentence(chunk[0], word_start, rng)
                if halves is None:
                    dropped += 1
                    chunk, chunk_length, i = [], 0, i + 1
                    continue
                tokens_a, tokens_b = halves
                label = 1 if rng.random() < 0.5 else 0
                if label:
                    tokens_a, tokens_b = tokens_b, tokens_a
            elif len(chunk) == 1 or (config.random_next_sentence and rng.random() < 0.5):
                label, random_document = 1, True
                target_b_length = target_seq_length - len(tokens_a)
                for _ in range(10):
                    random_index = rng.randint(0, len(documents) - 1)
                    if random_index != document_index:
                        break
                random_doc = documents[random_index]
                tokens_b = []
                for j in range(rng.randint(0, len(random_doc) - 1), len(random_doc)):
                    tokens_b.extend(random_doc[j])
                    if len(tokens_b) >= target_b_length:
                        break
                i -= len(chunk) - a_end  # unused sentences go back to the document
            else:
                tokens_b = [t for s in chunk[a_end:] for t in s]
                label = 0
                if not config.random_next_sentence and rng.random() < 0.5:
                    tokens_a, tokens_b, label = tokens_b, tokens_a, 1
            tokens_a, tokens_b = truncate_seq_pair_randomly(tokens_a, tokens_b, max_num_tokens, rng)
            pairs.append(SentencePair(tokens_a, tokens_b, label, random_document))
            chunk, chunk_length = [], 0
        i += 1
    return pairs, dropped


class Masker:
    """The original `create_masked_lm_predictions` on ids.

    Args:
      config: masking settings.
      word_start: start-piece table indexed by id (`start_piece_table`).
      vocab_size: random replacements are uniform over all ids, special pieces included, as the original.
      cls_id, sep_id, mask_id: special ids.
    """

    def __init__(
        self,
        config: MaskingConfig,
        word_start: Sequence[bool],
        vocab_size: int,
        cls_id: int,
        sep_id: int,
        mask_id: int,
    ):
        self.config = config
        self.vocab_size = vocab_size
        self.cls_id, self.sep_id, self.mask_id = cls_id, sep_id, mask_id
        self._cumulative = config.ngram_cumulative()
        # [CLS]/[SEP] open no word but have token_boundary 1.
        self._opens_word = [int(bool(w)) for w in word_start]
        self._opens_word[cls_id] = self._opens_word[sep_id] = 0
        self._boundary = list(self._opens_word)
        self._boundary[cls_id] = self._boundary[sep_id] = 1

    def _word_starts(self, tokens: Sequence[int], first_sep: int) -> list[int]:
        """First position of every candidate word of `[CLS] A [SEP] B [SEP]`.

        A word runs from its first position to the next word's, skipping the [SEP] at `first_sep`; so a
        continuation piece right after that [SEP] joins the word before it, as in the original. The first
        token of A opens a word even when it is a continuation piece. Without whole-word masking every
        non-special token is a word.
        """
        last = len(tokens) - 1
        if not self.config.do_whole_word_mask:
            return [i for i in range(1, last) if i != first_sep]
        starts = list(
            itertools.compress(range(len(tokens)), map(self._opens_word.__getitem__, tokens))
        )
        if first_sep > 1 and (not starts or starts[0] != 1):
            starts.insert(0, 1)
        return starts

    def _select(
        self,
        starts: list[int],
        end_of_words: int,
        first_sep: int,
        budget: int,
        blocked: set[int],
        taken: list[tuple[list[int], int]],
        rng: random.Random,
    ) -> int:
        """Visits word indices in random order (an incremental Fisher-Yates shuffle, the same
        distribution as the original's full shuffle) and appends non-overlapping n-grams to `taken`, as
        (positions, number of words), until `budget` positions are chosen. Returns the number chosen."""
        cumulative = self._cumulative
        max_n = len(cumulative)
        num_words = len(starts)
        order = list(range(num_words))
        rand = rng.random
        chosen = 0
        for t in range(num_words):
            if chosen >= budget:
                break
            j = t + int(rand() * (num_words - t))
            order[t], order[j] = order[j], order[t]
            first = order[t]
            u = rand()
            n = 1
            while n < max_n and u >= cumulative[n - 1]:
                n += 1
            # Fall back to shorter n-grams while the candidate would overflow the budget.
            begin = starts[first]
            while n > 0:
                end = starts[first + n] if first + n < num_words else end_of_words
                positions = list(range(begin, end))
                if begin < first_sep < end:
                    positions.remove(first_sep)
                if chosen + len(positions) <= budget:
                    break
                n -= 1
            if n == 0 or not blocked.isdisjoint(positions):
                continue
            blocked.update(positions)
            taken.append((positions, min(n, num_words - first)))
            chosen += len(positions)
        return chosen

    def unmasked(self, tokens: list[int], num_segment_a: int, sop_label: int) -> MaskedInstance:
        """A packed `[CLS] A [SEP] B [SEP]` as it is: no predictions, the `token_boundary` that
        `mask` gives it (start-piece flag, 1 for [CLS]/[SEP]); draws nothing."""
        boundary = list(map(self._boundary.__getitem__, tokens))
        return MaskedInstance(
            list(tokens), num_segment_a, boundary, [], [], sop_label, [], (0, 0, 0)
        )

    def mask(
        self, tokens: list[int], num_segment_a: int, sop_label: int, rng: random.Random
    ) -> MaskedInstance:
        """Masks a packed `[CLS] A [SEP] B [SEP]` (ids; A and B hold no [CLS]/[SEP], which SentencePiece
        never produces from text) and returns the instance. `num_segment_a` is `len(A) + 2`."""
        config = self.config
        if config.masked_lm_prob == 0:
            return self.unmasked(tokens, num_segment_a, sop_label)
        boundary = list(map(self._boundary.__getitem__, tokens))
        output = list(tokens)
        first_sep = num_segment_a - 1
        starts = self._word_starts(tokens, first_sep)
        budget = min(
            config.max_predictions_per_seq, max(1, int(round(len(tokens) * config.masked_lm_prob)))
        )
        covered: set[int] = set()
        spans: list[tuple[list[int], int]] = []
        self._select(starts, len(tokens) - 1, first_sep, budget, covered, spans, rng)
        rand, mask_id = rng.random, self.mask_id
        n_mask = n_keep = n_random = 0
        for span, _ in spans:
            for index in span:
                if rand() < 0.8:
                    output[index] = mask_id
                    n_mask += 1
                elif rand() < 0.5:
                    n_keep += 1
                else:
                    output[index] = rng.randint(0, self.vocab_size - 1)
                    n_random += 1
        positions = sorted(covered)
        labels = [tokens[p] for p in positions]
        permuted = 0
        if config.do_permutation:
            # The original reshuffles its n-gram list (rng is consumed only here, so we skip it otherwise)
            # and picks a second, disjoint set of positions whose tokens are permuted among themselves.
            selected: list[tuple[list[int], int]] = []
            self._select(starts, len(tokens) - 1, first_sep, budget, set(covered), selected, rng)
            sources = sorted(p for span, _ in selected for p in span)
            targets = list(sources)
            rng.shuffle(targets)
            before = list(output)
            for src, tgt in zip(sources, targets):
                output[src] = before[tgt]
            permuted = len(sources)
            positions = sorted(positions + sources)
            labels = [
                tokens[p] for p in positions
            ]  # permuted positions were not masked: their labels too
        return MaskedInstance(
            output,
            num_segment_a,
            boundary,
            positions,
            labels,
            sop_label,
            [num_words for _, num_words in spans],
            (n_mask, n_keep, n_random),
            permuted,
        )


def _pack(pair: SentencePair, masker: Masker) -> list[int]:
    return [masker.cls_id, *pair.tokens_a, masker.sep_id, *pair.tokens_b, masker.sep_id]


def build_instance(pair: SentencePair, masker: Masker, rng: random.Random) -> MaskedInstance:
    """Packs a pair as `[CLS] A [SEP] B [SEP]` and masks it."""
    return masker.mask(_pack(pair, masker), len(pair.tokens_a) + 2, pair.label, rng)


def build_unmasked_instance(pair: SentencePair, masker: Masker) -> MaskedInstance:
    """Packs a pair as `build_instance` does, unmasked: the trainer masks it when it reads it."""
    return masker.unmasked(_pack(pair, masker), len(pair.tokens_a) + 2, pair.label)
