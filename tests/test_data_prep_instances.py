"""SOP pairs, truncation and masking: the original algorithm's rules, exactly where they are exact."""

import collections
import random

import pytest

from albert_tf.text.pairs import truncate_seq_pair_randomly
from data_prep import instances
from data_prep.instances import MaskingConfig, PairConfig

CLS, SEP, MASK = 2, 3, 4


def test_start_piece_rule_matches_the_original():
    starts = [
        "\u2581the",
        "\u2581",
        "<unk>",
        ",",
        ".",
        '"',
        "(",
        "1990",
        "'s",
        "\u00e9t\u00e9",
        "\u4e2d",
        "a1",
        "x=",
        "\u2581ing",
        "£",
    ]
    continuations = ["ing", "s", "ed", "ABC", "s,", "a-b", "x.", "q!"]
    assert all(instances.is_start_piece(p) for p in starts), [
        p for p in starts if not instances.is_start_piece(p)
    ]
    assert not any(instances.is_start_piece(p) for p in continuations)
    assert instances.start_piece_table(["ing", "\u2581a"]) == [False, True]


def _original_truncate(tokens_a, tokens_b, max_num_tokens, rng):
    # The original's loop, one token at a time.
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


def test_truncation_keeps_the_originals_lengths_and_windows():
    case_rng = random.Random(0)
    for seed in range(300):
        a = list(range(case_rng.randint(1, 60)))
        b = list(range(100, 100 + case_rng.randint(1, 60)))
        limit = case_rng.randint(2, 80)
        expected_a, expected_b = list(a), list(b)
        _original_truncate(expected_a, expected_b, limit, random.Random(seed))
        got_a, got_b = truncate_seq_pair_randomly(a, b, limit, random.Random(seed))
        assert (len(got_a), len(got_b)) == (
            len(expected_a),
            len(expected_b),
        )  # who loses what is fixed
        assert (
            got_a == a[a.index(got_a[0]) :][: len(got_a)]
            and got_b == b[b.index(got_b[0]) :][: len(got_b)]
        )


def test_truncation_has_the_originals_distribution():
    # Front/back cuts: compare the distribution of the kept windows with the original's, token by token.
    a, b, limit, draws = list(range(30)), list(range(100, 112)), 20, 20000
    ours, original = collections.Counter(), collections.Counter()
    for seed in range(draws):
        got_a, got_b = truncate_seq_pair_randomly(a, b, limit, random.Random(seed))
        ours[(got_a[0], got_b[0])] += 1
        exp_a, exp_b = list(a), list(b)
        _original_truncate(exp_a, exp_b, limit, random.Random(seed + 10**6))
        original[(exp_a[0], exp_b[0])] += 1
    total_variation = sum(abs(ours[k] - original[k]) for k in ours.keys() | original.keys()) / (
        2 * draws
    )
    assert total_variation < 0.05, total_variation  # sampling noise alone is ~0.02 here
    assert len(ours) > 20  # many windows, not a degenerate cut


def _document(rng, num_sentences, lo=3, hi=30, base=1000):
    out, next_id = [], base
    for _ in range(num_sentences):
        n = rng.randint(lo, hi)
        out.append(list(range(next_id, next_id + n)))
        next_id += n
    return out


def _contiguous(tokens):
    return all(b == a + 1 for a, b in zip(tokens, tokens[1:]))


def test_pairs_follow_sop_rules():
    rng_doc = random.Random(1)
    docs = [_document(rng_doc, 40, base=1000 + 10000 * d) for d in range(3)]
    config = PairConfig(max_seq_length=64, short_seq_prob=0.3)
    labels = collections.Counter()
    for seed in range(50):
        pairs, dropped = instances.create_pairs_from_document(docs, 0, config, random.Random(seed))
        assert dropped == 0
        for p in pairs:
            assert p.tokens_a and p.tokens_b
            assert len(p.tokens_a) + len(p.tokens_b) <= 61
            labels[p.label] += 1
            if p.random_document:
                assert p.label == 1 and p.tokens_b[0] >= 11000  # B comes from another document
            elif p.label == 0:  # natural order: B continues A inside the document
                assert p.tokens_a[-1] < p.tokens_b[0]
            else:  # swapped
                assert p.tokens_a[0] > p.tokens_b[-1]
    assert 0.4 < labels[1] / sum(labels.values()) < 0.65


def test_single_sentence_chunk_leaks_a_random_document_by_default():
    docs = [[list(range(1000, 1010))], [list(range(2000, 2030)), list(range(2030, 2040))]]
    for seed in range(20):
        pairs, _ = instances.create_pairs_from_document(
            docs, 0, PairConfig(max_seq_length=64), random.Random(seed)
        )
        assert len(pairs) == 1
        pair = pairs[0]
        assert pair.random_document and pair.label == 1
        assert pair.tokens_a == list(range(1000, 1010)) and pair.tokens_b[0] >= 2000


def test_single_sentence_chunk_split_when_leak_is_off():
    word_start = [i % 3 == 0 for i in range(3000)]
    docs = [[list(range(1000, 1012))], [list(range(2000, 2030))], [[1500]]]
    config = PairConfig(max_seq_length=64, single_sentence_random_doc=False)
    labels = collections.Counter()
    for seed in range(200):
        pairs, dropped = instances.create_pairs_from_document(
            docs, 0, config, random.Random(seed), word_start
        )
        assert dropped == 0 and len(pairs) == 1
        p = pairs[0]
        assert not p.random_document
        first, second = (p.tokens_b, p.tokens_a) if p.label else (p.tokens_a, p.tokens_b)
        assert first + second == list(range(1000, 1012))
        assert word_start[second[0]]  # cut at a word start
        labels[p.label] += 1
    assert 70 < labels[1] < 130
    pairs, dropped = instances.create_pairs_from_document(
        docs, 2, config, random.Random(0), word_start
    )
    assert pairs == [] and dropped == 1


def test_nsp_mode_puts_unused_sentences_back():
    # Sentences of 5 tokens and a target of 125: chunks fit exactly, so nothing is truncated away.
    docs = [
        _document(random.Random(2), 60, 5, 5),
        _document(random.Random(3), 60, 5, 5, base=50000),
    ]
    config = PairConfig(max_seq_length=128, short_seq_prob=0.0, random_next_sentence=True)
    kinds = collections.Counter()
    for seed in range(20):
        pairs, _ = instances.create_pairs_from_document(docs, 0, config, random.Random(seed))
        covered = set()
        for p in pairs:
            assert p.label == int(p.random_document)
            kinds[p.random_document] += 1
            covered.update(t for t in p.tokens_a + p.tokens_b if t < 50000)
        # Sentences not used after a random-document A go back into the document: each one shows up.
        assert all(set(sentence) & covered for sentence in docs[0]), seed
    assert kinds[True] > 10 and kinds[False] > 10


def _masker(config=MaskingConfig(), vocab=30000, word_start=None):
    word_start = word_start if word_start is not None else [True] * vocab
    return instances.Masker(config, word_start, vocab, CLS, SEP, MASK)


def _sequence(num_a, num_b, first_id=100):
    return [
        CLS,
        *range(first_id, first_id + num_a),
        SEP,
        *range(first_id + num_a, first_id + num_a + num_b),
        SEP,
    ]


def test_budget_boundary_and_specials():
    masker = _masker()
    for length, expected in [
        (5, 1),
        (20, 3),
        (30, 4),
        (128, 19),
        (512, 20),
    ]:  # round() is banker's: 4.5 -> 4
        tokens = _sequence(length // 2 - 1, length - length // 2 - 2)
        assert len(tokens) == length
        inst = masker.mask(tokens, length // 2 + 1, 0, random.Random(length))
        assert len(inst.masked_positions) == expected
        assert inst.masked_positions == sorted(set(inst.masked_positions))
        assert all(tokens[p] not in (CLS, SEP) for p in inst.masked_positions)
        assert [tokens[p] for p in inst.masked_positions] == inst.masked_label_ids
        assert inst.token_boundary == [1] * length


def test_whole_words_are_masked_together_and_after_sep_joins_previous_word():
    # Even ids open a word, odd ids continue it.
    word_start = [i % 2 == 0 for i in range(1000)]
    masker = _masker(MaskingConfig(max_predictions_per_seq=40), vocab=1000, word_start=word_start)
    tokens = [CLS, 100, 101, 101, 102, SEP, 103, 104, 105, SEP]
    inst = masker.mask(tokens, 6, 0, random.Random(0))
    assert inst.token_boundary == [1, 1, 0, 0, 1, 1, 0, 1, 0, 1]
    words = [[1, 2, 3], [4, 6], [7, 8]]  # 103 after [SEP] continues the word of 102
    for seed in range(200):
        masked = set(masker.mask(tokens, 6, 0, random.Random(seed)).masked_positions)
        assert masked  # budget is round(10 * 0.15) = 2 positions
        assert all(set(w) <= masked or not set(w) & masked for w in words)


def test_ngram_lengths_follow_one_over_n():
    masker = _masker(MaskingConfig(max_predictions_per_seq=1000, masked_lm_prob=0.1))
    spans = collections.Counter()
    for seed in range(60):
        spans.update(masker.mask(_sequence(1000, 1000), 1002, 0, random.Random(seed)).span_lengths)
    total = sum(spans.values())
    for n, p in [(1, 6 / 11), (2, 3 / 11), (3, 2 / 11)]:
        assert abs(spans[n] / total - p) < 0.02, (n, spans)
    assert MaskingConfig(favor_shorter_ngram=False).ngram_cumulative() == pytest.approx(
        [2 / 11, 5 / 11, 1.0]
    )


def test_replacements_are_80_10_10_uniform_over_the_whole_vocabulary():
    masker = _masker(MaskingConfig(max_predictions_per_seq=200, masked_lm_prob=0.5), vocab=10)
    tokens = [CLS] + [7] * 300 + [SEP] + [8] * 96 + [SEP]
    kinds, random_ids = collections.Counter(), collections.Counter()
    for seed in range(100):
        inst = masker.mask(tokens, 302, 0, random.Random(seed))
        kinds.update(dict(zip(("mask", "kept", "random"), inst.replacements)))
        random_ids.update(
            inst.input_ids[p]
            for p in inst.masked_positions
            if inst.input_ids[p] not in (MASK, tokens[p])
        )
        assert sum(inst.replacements) == len(inst.masked_positions) == 200
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.01
    assert abs(kinds["kept"] / total - 0.1) < 0.01
    assert set(random_ids) == set(range(10)) - {MASK}  # pad, CLS, SEP included, like the original
    assert kinds["random"] / total == pytest.approx(0.1, abs=0.01)


def test_masking_is_a_pure_function_of_tokens_and_rng():
    masker = _masker()
    tokens = _sequence(60, 60)
    a = masker.mask(tokens, 62, 1, random.Random(5))
    b = masker.mask(tokens, 62, 1, random.Random(5))
    assert a == b and a.input_ids != tokens
    assert masker.mask(tokens, 62, 1, random.Random(6)).masked_positions != a.masked_positions


def test_permutation_adds_a_permuted_disjoint_set():
    masker = _masker(MaskingConfig(do_permutation=True))
    tokens = _sequence(60, 60)
    inst = masker.mask(tokens, 62, 0, random.Random(3))
    assert 0 < inst.permuted <= 18 and len(inst.masked_positions) == 18 + inst.permuted
    assert len(set(inst.masked_positions)) == len(inst.masked_positions)
    assert [tokens[p] for p in inst.masked_positions] == inst.masked_label_ids


def test_zero_masking_probability_gives_no_predictions():
    inst = _masker(MaskingConfig(masked_lm_prob=0.0)).mask(_sequence(5, 5), 7, 0, random.Random(0))
    assert inst.masked_positions == [] and inst.input_ids == _sequence(5, 5)


def test_build_instance_packs_cls_a_sep_b_sep():
    pair = instances.SentencePair([10, 11], [12, 13, 14], 1)
    inst = instances.build_instance(
        pair, _masker(MaskingConfig(masked_lm_prob=0.0)), random.Random(0)
    )
    assert inst.input_ids == [CLS, 10, 11, SEP, 12, 13, 14, SEP]
    assert inst.num_segment_a == 4 and inst.sop_label == 1
