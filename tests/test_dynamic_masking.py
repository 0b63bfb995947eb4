"""DynamicMasker against data prep's Masker: the same choices from the same draws, the same
statistics from independent draws, its invariants, and the same output eagerly and in tf.data."""

import math
import pathlib
import random

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.text.tokenization import AlbertTokenizer
from albert_tf.training.dynamic_masking import DynamicMasker, element_seed
from data_prep import instances
from data_prep.instances import MaskingConfig, PairConfig
from data_prep.stats import masked_word_runs

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SEQ = 128
CONFIGS = {
    "default": MaskingConfig(),
    # Small budget, long n-grams first: the fall-back to shorter n-grams runs often.
    "fallback": MaskingConfig(
        masked_lm_prob=0.3, max_predictions_per_seq=7, ngram=4, favor_shorter_ngram=False
    ),
    "tokens": MaskingConfig(masked_lm_prob=0.2, ngram=2, do_whole_word_mask=False),
}
# Statistics are compared within this many standard errors derived from their counts. The draws
# are seeded, so the outcome is fixed; at 5 sigma the 12 comparisons would pass for a correct
# masker on all but ~1e-5 of seeds, while a wrong rule shifts them by far more.
SIGMAS = 5.0


@pytest.fixture(scope="module")
def vocab():
    tok = AlbertTokenizer(FIXTURES / "albert_spm" / "30k-clean.model")
    pieces = [tok.sp_model.id_to_piece(i) for i in range(tok.vocab_size)]
    return tok, instances.start_piece_table(pieces)


@pytest.fixture(scope="module")
def examples(vocab):
    """Unmasked packed instances of corpus sentences as data prep builds them (packing, SOP
    pairs, token_boundary), plus pairs whose A and B open on a continuation piece."""
    tok, word_start = vocab
    with open(FIXTURES / "original_data" / "corpus_small.txt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][:400]
    sentences = [s for s in tok.encode_batch(lines) if s]
    documents = [sentences[i : i + 12] for i in range(0, len(sentences), 12)]
    unmasked = instances.Masker(
        MaskingConfig(masked_lm_prob=0),
        word_start,
        tok.vocab_size,
        tok.cls_id,
        tok.sep_id,
        tok.mask_id,
    )
    config = PairConfig(max_seq_length=SEQ, short_seq_prob=0.3)
    pairs = []
    for index in range(len(documents)):
        pairs += instances.create_pairs_from_document(
            documents, index, config, random.Random(index), word_start
        )[0]
    inner = [
        s[k:][:40] for s in sentences for k in range(1, len(s)) if not word_start[s[k]]
    ]  # sentence tails that open on a continuation piece
    pairs += [instances.SentencePair(a, b, 0) for a, b in zip(inner[0:40:2], inner[1:40:2])]
    built = [instances.build_instance(p, unmasked, random.Random(0)) for p in pairs]
    assert len(built) > 100 and len(inner) >= 40
    return built


def _features(instance):
    length, num_a = len(instance.input_ids), instance.num_segment_a
    pad = [0] * (SEQ - length)
    return {
        "input_ids": instance.input_ids + pad,
        "input_mask": [1] * length + pad,
        "segment_ids": [0] * num_a + [1] * (length - num_a) + pad,
        "token_boundary": instance.token_boundary + pad,
        "next_sentence_labels": [instance.sop_label],
    }


def _stacked(examples):
    features = [_features(e) for e in examples]
    return {k: np.array([f[k] for f in features], np.int64) for k in features[0]}


def _dynamic(vocab, config, jit_compile=False):
    tok, _ = vocab
    return DynamicMasker(
        config, tok.vocab_size, tok.cls_id, tok.sep_id, tok.mask_id, jit_compile=jit_compile
    )


def _static(vocab, config):
    tok, word_start = vocab
    return instances.Masker(config, word_start, tok.vocab_size, tok.cls_id, tok.sep_id, tok.mask_id)


def _mask_all(masker, features, repeats, base_seed):
    """Masks every example `repeats` times in a parallel tf.data map (element k: example
    k % N, seed `element_seed(base_seed, k)`); numpy arrays of outputs and stats, [N * repeats]."""
    dataset = tf.data.Dataset.from_tensor_slices(features).repeat(repeats).enumerate()
    dataset = dataset.map(
        lambda k, ex: masker.mask_with_stats(ex, element_seed(base_seed, k)),
        num_parallel_calls=tf.data.AUTOTUNE,
    ).batch(512)
    parts = list(dataset.as_numpy_iterator())
    out, stats = (
        {k: np.concatenate([p[i][k] for p in parts]) for k in parts[0][i]} for i in (0, 1)
    )
    return out, stats


def _positions(out, row):
    count = int(out["masked_lm_weights"][row].sum())
    return out["masked_lm_positions"][row][:count]


def _budget(config, length):
    return min(config.max_predictions_per_seq, max(1, int(round(length * config.masked_lm_prob))))


class _ScriptedRandom:
    """Hands Masker's `_select` the given draws in order."""

    def __init__(self, values):
        self._values = iter(values)

    def random(self):
        return next(self._values)


@pytest.mark.parametrize(
    "name, jit", [(name, False) for name in sorted(CONFIGS)] + [("default", True)]
)
def test_same_draws_give_masker_choices(vocab, examples, name, jit):
    # Masker's incremental shuffle and n-gram draws are scripted to the dynamic masker's own draws
    # (its private `_draws`, the only way to see them): every chosen position, every span length
    # and every replacement must then agree.
    config, tok = CONFIGS[name], vocab[0]
    dynamic, static = _dynamic(vocab, config, jit), _static(vocab, config)
    features = _stacked(examples)
    out, stats = _mask_all(dynamic, features, 2, base_seed=11)
    draws = tf.function(dynamic._draws, reduce_retracing=True, jit_compile=jit)
    for k in range(2 * len(examples)):
        example = examples[k % len(examples)]
        tokens, first_sep = example.input_ids, example.num_segment_a - 1
        starts = static._word_starts(tokens, first_sep)
        order, ngram_u, kind_u, random_ids = (
            t.numpy()
            for t in draws(element_seed(11, k), tf.constant(len(starts)), tf.constant(SEQ))
        )
        order, ngram_u = order[: len(starts)], ngram_u[: len(starts)]
        script, remaining = [], list(range(len(starts)))
        for t, word in enumerate(order):
            j = remaining.index(word)
            remaining[t], remaining[j] = remaining[j], remaining[t]
            script += [(j - t + 0.5) / (len(starts) - t), ngram_u[t]]
        covered, spans = set(), []
        budget = _budget(config, len(tokens))
        static._select(
            starts, len(tokens) - 1, first_sep, budget, covered, spans, _ScriptedRandom(script)
        )
        positions = _positions(out, k)
        assert (stats["budget"][k], stats["num_words"][k]) == (budget, len(starts))
        assert positions.tolist() == sorted(covered), (name, k)
        span_lengths = stats["span_lengths"][k]
        assert span_lengths[: len(spans)].tolist() == [n for _, n in sorted(spans)]
        assert not span_lengths[len(spans) :].any()
        labels = np.array(tokens)[positions]
        expected = np.where(
            kind_u[0, : len(positions)] < 0.8,
            tok.mask_id,
            np.where(kind_u[1, : len(positions)] < 0.5, labels, random_ids[: len(positions)]),
        )
        np.testing.assert_array_equal(out["input_ids"][k][positions], expected)
        to_mask = kind_u[0, : len(positions)] < 0.8
        keep = ~to_mask & (kind_u[1, : len(positions)] < 0.5)
        counts = [to_mask.sum(), keep.sum(), len(positions) - to_mask.sum() - keep.sum()]
        assert stats["replacements"][k].tolist() == counts
    if jit:  # XLA's own compile of an eager call masks as the one inside tf.data
        for k in range(4):
            one = {key: tf.constant(value[k]) for key, value in features.items()}
            for key, value in dynamic(one, element_seed(11, k)).items():
                np.testing.assert_array_equal(value.numpy(), out[key][k], err_msg=key)


def _words(features):
    """Positions of each word of one example as data prep's token_boundary defines them."""
    length = int(sum(features["input_mask"]))
    num_a = int((np.asarray(features["segment_ids"][:length]) == 0).sum())
    words = []
    for position in range(1, length - 1):
        if position == num_a - 1:
            continue
        if features["token_boundary"][position] or not words:
            words.append([position])
        else:
            words[-1].append(position)
    return words, {0, num_a - 1, length - 1}


@pytest.mark.parametrize("name", ["default", "fallback"])
def test_invariants_over_many_seeds(vocab, examples, name):
    config, tok = CONFIGS[name], vocab[0]
    masker = _dynamic(vocab, config)
    features = _stacked(examples)
    repeats = 8
    out, _ = _mask_all(masker, features, repeats, base_seed=3)
    num = len(examples)
    for k in range(num * repeats):
        source = {key: value[k % num] for key, value in features.items()}
        length = int(source["input_mask"].sum())
        positions = _positions(out, k)
        count = len(positions)
        assert 1 <= count <= _budget(config, length)
        assert (np.diff(positions) > 0).all()
        assert not out["masked_lm_positions"][k][count:].any()
        assert not out["masked_lm_ids"][k][count:].any()
        words, specials = _words(source)
        assert not specials & set(positions.tolist()) and positions.max() < length
        chosen = set(positions.tolist())
        for word in words:
            assert chosen.issuperset(word) or chosen.isdisjoint(word), (k, word)
        np.testing.assert_array_equal(
            out["masked_lm_ids"][k][:count], source["input_ids"][positions]
        )
        unchanged = np.ones(SEQ, bool)
        unchanged[positions] = False
        np.testing.assert_array_equal(
            out["input_ids"][k][unchanged], source["input_ids"][unchanged]
        )
        assert ((out["input_ids"][k] >= 0) & (out["input_ids"][k] < tok.vocab_size)).all()
        for key in ("input_mask", "segment_ids", "token_boundary", "next_sentence_labels"):
            np.testing.assert_array_equal(out[key][k], source[key])
    # Different seeds: long examples never repeat a mask; the same seed repeats it exactly.
    for i, example in enumerate(examples):
        if len(_words(_features(example))[0]) >= 30:
            masks = {tuple(_positions(out, i + r * num)) for r in range(repeats)}
            assert len(masks) == repeats, i
    again, _ = _mask_all(masker, features, 1, base_seed=3)
    for key in out:
        np.testing.assert_array_equal(again[key], out[key][:num])
    other, _ = _mask_all(masker, features, 1, base_seed=4)
    assert (other["masked_lm_positions"] != out["masked_lm_positions"][:num]).any(
        axis=1
    ).mean() > 0.9


def _assert_same_share(hits_a, total_a, hits_b, total_b, what):
    """Two binomial shares agree within SIGMAS pooled standard errors of their difference."""
    pooled = (hits_a + hits_b) / (total_a + total_b)
    error = math.sqrt(pooled * (1 - pooled) * (1 / total_a + 1 / total_b))
    diff = hits_a / total_a - hits_b / total_b
    assert abs(diff) <= SIGMAS * error, f"{what}: {hits_a}/{total_a} vs {hits_b}/{total_b}"


def _assert_same_mean(a, b, what):
    """Two sample means agree within SIGMAS standard errors of their difference."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    error = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    assert abs(a.mean() - b.mean()) <= SIGMAS * error, f"{what}: {a.mean()} vs {b.mean()}"


def test_statistics_match_the_static_masker(vocab, examples):
    config = CONFIGS["default"]
    repeats = math.ceil(4000 / len(examples))
    features = _stacked(examples)
    out, stats = _mask_all(_dynamic(vocab, config), features, repeats, base_seed=5)
    static = _static(vocab, config)
    masked = [
        static.mask(e.input_ids, e.num_segment_a, e.sop_label, random.Random(r * 7919 + i))
        for r in range(repeats)
        for i, e in enumerate(examples)
    ]
    num = len(masked)
    dynamic_records = [
        {
            **{key: features[key][k % len(examples)] for key in features},
            **{key: out[key][k] for key in ("input_ids", "masked_lm_positions", "masked_lm_ids")},
            "masked_lm_weights": out["masked_lm_weights"][k],
        }
        for k in range(num)
    ]
    static_records = []
    for instance in masked:
        record = _features(instance)  # input_ids as masked
        record["masked_lm_positions"] = instance.masked_positions
        record["masked_lm_ids"] = instance.masked_label_ids
        record["masked_lm_weights"] = [1.0] * len(instance.masked_positions)
        static_records.append(record)

    _assert_same_mean(
        out["masked_lm_weights"].sum(axis=1),
        [len(i.masked_positions) for i in masked],
        "predictions per instance",
    )
    # N-gram lengths as drawn (after the fall-back), n = 1..3.
    dynamic_spans = np.bincount(stats["span_lengths"].ravel(), minlength=4)[1:]
    static_spans = np.bincount([n for i in masked for n in i.span_lengths], minlength=4)[1:]
    assert len(dynamic_spans) == len(static_spans) == 3
    for n in range(3):
        _assert_same_share(
            dynamic_spans[n],
            dynamic_spans.sum(),
            static_spans[n],
            static_spans.sum(),
            f"{n + 1}-grams",
        )
    dynamic_kinds = stats["replacements"].sum(axis=0)
    static_kinds = np.sum([i.replacements for i in masked], axis=0)
    for kind, name in enumerate(("mask", "kept", "random")):
        _assert_same_share(
            dynamic_kinds[kind], dynamic_kinds.sum(), static_kinds[kind], static_kinds.sum(), name
        )
    # Masked word starts: a broken word rule changes which pieces are chosen.
    dynamic_starts = sum(
        int(r["token_boundary"][_positions(out, k)].sum()) for k, r in enumerate(dynamic_records)
    )
    static_starts = sum(sum(i.token_boundary[p] for p in i.masked_positions) for i in masked)
    _assert_same_share(
        dynamic_starts, dynamic_kinds.sum(), static_starts, static_kinds.sum(), "word starts"
    )
    # Runs of consecutive masked words, as data prep compares record files (`masked_word_runs`).
    dynamic_runs, static_runs = _run_counts(dynamic_records), _run_counts(static_records)
    for bucket in range(4):
        _assert_same_share(
            dynamic_runs[bucket],
            dynamic_runs.sum(),
            static_runs[bucket],
            static_runs.sum(),
            f"runs of {bucket + 1}{'+' if bucket == 3 else ''} words",
        )


def _run_counts(records):
    """Counts of masked-word runs of 1, 2, 3 and 4+ words."""
    runs = [min(run, 4) for record in records for run in masked_word_runs(record)]
    return np.bincount(runs, minlength=5)[1:]


def test_parallel_map_matches_eager_calls(vocab, examples):
    masker = _dynamic(vocab, CONFIGS["default"])
    features = _stacked(examples[:12])
    batch = next(
        masker.map_dataset(tf.data.Dataset.from_tensor_slices(features), seed=21)
        .batch(12)
        .as_numpy_iterator()
    )
    assert batch["masked_lm_positions"].shape == (12, 20)
    assert batch["masked_lm_ids"].dtype == np.int32 and batch["input_ids"].dtype == np.int64
    for k in range(12):
        one = {key: tf.constant(value[k]) for key, value in features.items()}
        eager = masker(one, element_seed(21, k))
        for key, value in eager.items():
            np.testing.assert_array_equal(value.numpy(), batch[key][k], err_msg=key)
    # int32 features and an int32 seed give the same masks.
    seed = tf.cast(element_seed(21, 0), tf.int32)
    wide = masker({key: tf.constant(value[0]) for key, value in features.items()}, seed)
    narrow = masker({key: tf.constant(value[0], tf.int32) for key, value in features.items()}, seed)
    for key in wide:
        np.testing.assert_array_equal(wide[key].numpy(), narrow[key].numpy(), err_msg=key)


def test_budget_rounds_half_to_even_like_python(vocab):
    # Every real length with probabilities whose products hit .5 exactly (0.25 * 10 = 2.5 -> 2).
    tok = vocab[0]
    word = tok.sp_model.piece_to_id("\u2581the")
    lengths = np.arange(4, SEQ + 1)
    ids = np.zeros((len(lengths), SEQ), np.int64)
    for row, length in enumerate(lengths):
        ids[row, :length] = [tok.cls_id, word, tok.sep_id] + [word] * (length - 4) + [tok.sep_id]
    features = {
        "input_ids": ids,
        "input_mask": (ids > 0).astype(np.int64),
        "segment_ids": np.where(np.arange(SEQ) >= 3, 1, 0)[None] * (ids > 0),
        "token_boundary": (ids > 0).astype(np.int64),
    }
    for prob in (0.15, 0.25, 0.1):
        config = MaskingConfig(masked_lm_prob=prob, max_predictions_per_seq=64)
        _, stats = _mask_all(_dynamic(vocab, config), features, 1, base_seed=1)
        expected = [_budget(config, int(n)) for n in lengths]
        assert stats["budget"].tolist() == expected, prob


def test_zero_probability_predicts_nothing(vocab, examples):
    masker = _dynamic(vocab, MaskingConfig(masked_lm_prob=0))
    features = {key: tf.constant(value[0]) for key, value in _stacked(examples[:1]).items()}
    out = masker(features, element_seed(0, 0))
    assert not out["masked_lm_weights"].numpy().any()
    np.testing.assert_array_equal(out["input_ids"].numpy(), features["input_ids"].numpy())


def test_permutation_is_refused(vocab):
    with pytest.raises(ValueError, match="do_permutation"):
        _dynamic(vocab, MaskingConfig(do_permutation=True))
