"""N-gram whole-word masking of packed examples inside tf.data, the data prep's `Masker` in-graph.

Data prep writes every instance masked once (`dupe_factor` copies at most). `DynamicMasker` masks an
unmasked packed example `[CLS] A [SEP] B [SEP]` with the same algorithm each time it is read, from a
stateless seed, so every epoch can see fresh masks while a run stays reproducible. It is built from
TF ops on tensors of the example's length (a `tf.while_loop` over words, stateless random ops), so
it runs inside `tf.data.Dataset.map` with parallel calls, and under XLA on request.

The random draws differ from `Masker`'s in how they are made, not in their distribution: the visit
order is one uniform shuffle (`Masker` shuffles incrementally), and every prediction draws its
[MASK]/kept/random outcome independently (`Masker` draws them in the order the n-grams were picked).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import tensorflow as tf

# The features masking reads; the others pass through.
_INPUTS = ("input_ids", "input_mask", "segment_ids", "token_boundary")


class MaskingSettings(Protocol):
    """The fields of `data_prep.instances.MaskingConfig` that masking reads (this layer cannot
    import data prep, so any object with them works)."""

    masked_lm_prob: float
    max_predictions_per_seq: int
    ngram: int
    favor_shorter_ngram: bool
    do_whole_word_mask: bool
    do_permutation: bool

    def ngram_cumulative(self) -> Sequence[float]: ...


def element_seed(base_seed, index) -> tf.Tensor:
    """The [2] int64 stateless seed of element `index` of a stream masked under `base_seed`.

    `base_seed` is an int or a [2] seed tensor; `index` a scalar, e.g. from `Dataset.enumerate()`,
    which keeps counting across `repeat()` epochs, so each epoch gets new masks. The seed is
    `stateless_fold_in(base, index)`: a function of both alone, whatever the map's parallelism.
    """
    if isinstance(base_seed, int):
        base = tf.constant([base_seed, 0], tf.int64)
    else:
        base = tf.cast(base_seed, tf.int64)
    return tf.random.experimental.stateless_fold_in(base, tf.cast(index, tf.int64))


class DynamicMasker:
    """Masks one unmasked packed example per call, as `data_prep.instances.Masker.mask` does.

    Input: a dict with `input_ids`, `input_mask`, `segment_ids`, `token_boundary` ([T] int32 or
    int64, zero-padded, as data prep writes them: token_boundary is the start-piece flag, 1 for
    [CLS]/[SEP]) and any other features (`next_sentence_labels`, ...), which pass through. Output: the
    same dict with `input_ids` masked (same dtype) and `masked_lm_positions`, `masked_lm_ids` (int32
    [max_predictions_per_seq], zero-padded, positions ascending) and `masked_lm_weights` (float32,
    1.0 for real predictions) set.

    The algorithm is `Masker`'s: words open where token_boundary is 1 on a token other than
    [CLS]/[SEP] (the first token of A always opens one; a word spans the first [SEP] without taking
    it); without whole-word masking every non-special token is a word. Budget
    `min(max_predictions_per_seq, max(1, round(real_length * masked_lm_prob)))` (half to even, as
    Python's `round`). Words are visited in random order; each draws n with p(n) ∝ 1/n
    (`ngram_cumulative`), falls back to shorter n while its n-gram would overflow the budget and is
    skipped at n = 0 or when it overlaps a chosen n-gram, until the budget is reached. Each chosen
    position becomes [MASK] (80%), stays (10%) or becomes an id uniform over [0, vocab_size) (10%).

    Args:
      config: masking settings (`data_prep.instances.MaskingConfig`); `do_permutation` is not
        supported.
      vocab_size: random replacements are uniform over all ids, special pieces included.
      cls_id, sep_id, mask_id: special ids.
      jit_compile: XLA-compile the masking (needs a static sequence length; several times faster).
        XLA makes its own random bits, so a seed gives other masks than without it (the same ones
        on every call).

    Example:
      >>> masker = DynamicMasker(MaskingConfig(), 30000, cls_id=2, sep_id=3, mask_id=4)
      >>> masked = masker.map_dataset(unmasked_examples, seed=12345)  # enumerate + parallel map
      >>> one = masker(example, element_seed(12345, 0))
    """

    def __init__(
        self,
        config: MaskingSettings,
        vocab_size: int,
        cls_id: int,
        sep_id: int,
        mask_id: int,
        jit_compile: bool = False,
    ):
        if config.do_permutation:
            raise ValueError(
                "DynamicMasker does not implement do_permutation: mask with data prep's Masker, or "
                "set do_permutation=False"
            )
        if config.max_predictions_per_seq <= 0 or vocab_size <= 0 or config.ngram <= 0:
            raise ValueError(
                f"max_predictions_per_seq, vocab_size and ngram must be > 0, got "
                f"{config.max_predictions_per_seq}, {vocab_size} and {config.ngram}"
            )
        self.config = config
        self.vocab_size = vocab_size
        self.cls_id, self.sep_id, self.mask_id = cls_id, sep_id, mask_id
        self.max_predictions = config.max_predictions_per_seq
        self.max_n = config.ngram
        # n = 1 + the number of these thresholds that u >= (Masker's loop over the cumulative).
        self._thresholds = [float(c) for c in config.ngram_cumulative()][:-1]
        self.jit_compile = jit_compile
        self._mask_fn = tf.function(self._mask, jit_compile=True) if jit_compile else self._mask

    def __call__(self, example: Mapping[str, tf.Tensor], seed) -> dict[str, tf.Tensor]:
        """The masked example (see the class); `seed` is a [2] int32/int64 stateless seed."""
        return self.mask_with_stats(example, seed)[0]

    def map_dataset(
        self,
        dataset: tf.data.Dataset,
        seed: int,
        num_parallel_calls: int | None = tf.data.AUTOTUNE,
        deterministic: bool | None = None,
    ) -> tf.data.Dataset:
        """Masks every element of a dataset of unmasked examples, element k with
        `element_seed(seed, k)`: the same stream and seed give the same masks."""
        return dataset.enumerate().map(
            lambda index, example: self(example, element_seed(seed, index)),
            num_parallel_calls=num_parallel_calls,
            deterministic=deterministic,
        )

    def mask_with_stats(
        self, example: Mapping[str, tf.Tensor], seed
    ) -> tuple[dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        """The masked example and what the masking did: `span_lengths` (int32 [P], words per chosen
        n-gram after the fall-back, ordered by position, zero-padded: `Masker`'s `span_lengths`),
        `replacements` (int32 [3]: [MASK], kept, random), `budget` and `num_words` (int32; both 0
        when masked_lm_prob is 0)."""
        inputs = {name: tf.convert_to_tensor(example[name]) for name in _INPUTS}
        seed = tf.convert_to_tensor(seed)
        if self.config.masked_lm_prob == 0:  # Masker predicts nothing then (the budget floor is 1)
            zeros = tf.zeros([self.max_predictions], tf.int32)
            masked = inputs["input_ids"]
            predictions = (zeros, zeros, tf.zeros([self.max_predictions], tf.float32))
            stats = {"span_lengths": zeros, "replacements": tf.zeros([3], tf.int32)}
            stats.update(budget=tf.constant(0), num_words=tf.constant(0))
        elif tf.executing_eagerly():
            # Input work: eager calls stay on the CPU, where tf.data runs the same function.
            with tf.device("/CPU:0"):
                masked, predictions, stats = self._mask_fn(inputs, seed)
        else:
            masked, predictions, stats = self._mask_fn(inputs, seed)
        out = dict(example)
        out["input_ids"] = masked
        out.update(zip(("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"), predictions))
        return out, stats

    def _draws(self, seed, num_words, length):
        """The random draws of one example: the word visit order ([length], a permutation of the
        first `num_words` word indices, then the rest), n-gram uniforms ([length], float64, by
        visit), replacement uniforms ([2, P], float64) and random ids ([P]), by prediction slot."""
        seeds = tf.random.experimental.stateless_split(seed, num=4)
        # argsort of iid keys is a uniform permutation; ties of float64 keys are negligible.
        keys = tf.random.stateless_uniform([length], seeds[0], dtype=tf.float64)
        order = tf.argsort(tf.where(tf.range(length) < num_words, keys, 2.0))
        ngram_u = tf.random.stateless_uniform([length], seeds[1], dtype=tf.float64)
        kind_u = tf.random.stateless_uniform([2, self.max_predictions], seeds[2], dtype=tf.float64)
        random_ids = tf.random.stateless_uniform(
            [self.max_predictions], seeds[3], minval=0, maxval=self.vocab_size, dtype=tf.int32
        )
        return tf.cast(order, tf.int32), ngram_u, kind_u, random_ids

    def _mask(self, inputs, seed):
        """(masked input_ids, (positions, labels, weights), stats) with tensors of static shapes:
        words are indexed over [T] slots, the first `num_words` real."""
        config, num_pred, max_n = self.config, self.max_predictions, self.max_n
        ids = tf.cast(inputs["input_ids"], tf.int32)
        length = tf.size(ids)
        pos = tf.range(length)
        real = tf.reduce_sum(tf.cast(inputs["input_mask"] > 0, tf.int32))
        segments = tf.cast(inputs["segment_ids"], tf.int32)
        first_sep = tf.reduce_sum(tf.cast((segments == 0) & (pos < real), tf.int32)) - 1
        last = real - 1  # the final [SEP]: words end there

        if config.do_whole_word_mask:
            boundary = tf.cast(inputs["token_boundary"], tf.int32)
            opens = (boundary == 1) & (ids != self.cls_id) & (ids != self.sep_id) & (pos < real)
            opens |= (pos == 1) & (first_sep > 1)
        else:
            opens = (pos >= 1) & (pos < last) & (pos != first_sep)
        word_of = tf.cumsum(tf.cast(opens, tf.int32)) - 1  # the word a position is in (or after)
        num_words = tf.reduce_sum(tf.cast(opens, tf.int32))
        word = pos  # word slots; real below num_words
        # Each word's first position; slots from num_words on hold `last`, where the words end.
        slots = tf.where(opens, word_of, length)  # positions that open no word go to a dropped slot
        starts = tf.scatter_nd(slots[:, None], pos, [length + 1])[:length]
        starts = tf.where(word < num_words, starts, last)
        budget = tf.minimum(
            num_pred,
            tf.maximum(
                1, tf.cast(tf.round(tf.cast(real, tf.float64) * config.masked_lm_prob), tf.int32)
            ),
        )

        # sizes[w, k-1]: positions of the k-gram from word w (up to the final [SEP] past the last
        # word, without the first [SEP]); non-decreasing in k, so the fall-back is a count.
        begins = starts[:, None]
        ends = tf.gather(
            starts, tf.minimum(word[:, None] + tf.range(1, max_n + 1)[None, :], num_words)
        )
        sizes = ends - begins - tf.cast((begins < first_sep) & (first_sep < ends), tf.int32)

        order, ngram_u, kind_u, random_ids = self._draws(seed, num_words, length)
        thresholds = tf.constant(self._thresholds, tf.float64, shape=[max_n - 1])
        drawn_n = 1 + tf.reduce_sum(
            tf.cast(ngram_u[:, None] >= thresholds[None, :], tf.int32), axis=1
        )
        visit_sizes = tf.gather(sizes, order)

        def keep_going(t, chosen, taken):
            return (t < num_words) & (chosen < budget)

        def visit(t, chosen, taken):
            # taken[w]: 0 free, the n-gram's length in words at its first word, -1 at its others.
            first, row = order[t], visit_sizes[t]
            n = tf.minimum(drawn_n[t], tf.reduce_sum(tf.cast(row <= budget - chosen, tf.int32)))
            # Words partition the positions, so n-grams overlap exactly when their words do.
            in_gram = (word >= first) & (word < first + n)
            accept = (n > 0) & ~tf.reduce_any(in_gram & (taken != 0))
            span = tf.minimum(n, num_words - first)
            taken = tf.where(in_gram & accept, tf.where(word == first, span, -1), taken)
            chosen += tf.where(accept, tf.gather(row, tf.maximum(n - 1, 0)), 0)
            return t + 1, chosen, taken

        _, _, taken = tf.while_loop(
            keep_going, visit, (tf.constant(0), tf.constant(0), tf.zeros([length], tf.int32))
        )

        in_word = (word_of >= 0) & (pos < last) & (pos != first_sep)
        covered = in_word & tf.gather(
            tf.concat([taken != 0, [False]], 0), tf.where(in_word, word_of, length)
        )
        positions, count, slot = _compact(covered, pos, num_pred)
        labels = _compact(covered, ids, num_pred)[0]
        real_slot = tf.range(num_pred) < count
        to_mask = real_slot & (kind_u[0] < 0.8)
        keep = real_slot & ~to_mask & (kind_u[1] < 0.5)
        new_ids = tf.where(to_mask, self.mask_id, tf.where(keep, labels, random_ids))
        masked = tf.where(covered, tf.gather(new_ids, tf.clip_by_value(slot, 0, num_pred - 1)), ids)

        n_mask = tf.reduce_sum(tf.cast(to_mask, tf.int32))
        n_keep = tf.reduce_sum(tf.cast(keep, tf.int32))
        stats = {
            "span_lengths": _compact(taken > 0, taken, num_pred)[0],
            "replacements": tf.stack([n_mask, n_keep, count - n_mask - n_keep]),
            "budget": budget,
            "num_words": num_words,
        }
        predictions = (positions, labels, tf.cast(real_slot, tf.float32))
        return tf.cast(masked, inputs["input_ids"].dtype), predictions, stats


def _compact(flags, values, size):
    """(values where flags, in order and zero-padded to `size`, their count, each flagged element's
    slot); at most `size` flags may be set."""
    slot = tf.cumsum(tf.cast(flags, tf.int32)) - 1
    # Unflagged elements all go to slot `size`, which is dropped.
    compact = tf.scatter_nd(tf.where(flags, slot, size)[:, None], values, [size + 1])[:size]
    return compact, tf.reduce_sum(tf.cast(flags, tf.int32)), slot
