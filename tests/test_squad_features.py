"""SQuAD reader and windowed features: equal, field by field, to what the original code wrote."""

import dataclasses
import json
import logging
import pathlib
import random

import pytest

from albert_tf.tasks.squad.alignment import convert_index, fast_alignment, pieces_text
from albert_tf.tasks.squad.examples import (
    SquadExample,
    SquadFormatError,
    read_squad,
    read_squad_examples,
)
from albert_tf.tasks.squad.features import (
    SquadFeature,
    convert_examples_to_features,
    doc_spans,
    is_max_context,
    iter_features,
)
from albert_tf.text.tokenization import AlbertTokenizer
from benchmarks.squad_alignment_reference import reference_alignment

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SQUAD = FIXTURES / "original_squad"
GOLDEN_FEATURES = [
    "features_eval_seq128_stride32_q24.json",
    "features_eval_seq384_stride128_q64.json",
    "features_train_seq128_stride32_q24.json",
    "features_train_seq384_stride128_q64.json",
    "postprocess_v1.1/features_eval_seq128_stride32_q24.json",
    "postprocess_v2.0/features_eval_seq128_stride32_q24.json",
]
SQUAD_INPUTS = [
    "dev-v2.0-small.json",
    "train-v2.0-small.json",
    "postprocess_v1.1/dev-v1.1-subset.json",
    "postprocess_v2.0/dev-v2.0-subset.json",
]


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(FIXTURES / "albert_spm" / "30k-clean.model", do_lower_case=True)


def _golden(name):
    golden = json.loads((SQUAD / name).read_text(encoding="utf-8"))
    assert golden["do_lower_case"] is True
    return golden


def _convert_like(golden, examples, tokenizer, **kwargs):
    return convert_examples_to_features(
        examples,
        tokenizer,
        golden["max_seq_length"],
        golden["doc_stride"],
        golden["max_query_length"],
        golden["is_training"],
        **kwargs,
    )


@pytest.mark.parametrize("name", GOLDEN_FEATURES)
def test_features_equal_the_original(tokenizer, name):
    golden = _golden(name)
    examples = read_squad_examples(
        (SQUAD / name).parent / golden["input_file"], golden["is_training"]
    )
    assert len(examples) == golden["num_examples"]
    features = _convert_like(golden, examples, tokenizer)
    assert len(features) == len(golden["features"])
    field_names = [f.name for f in dataclasses.fields(SquadFeature)]
    for feature, expected in zip(features, golden["features"]):
        assert sorted(expected) == sorted(field_names)
        expected = dict(expected)
        # JSON object keys are strings; the original (and we) key positions by int.
        expected["token_is_max_context"] = {
            int(k): v for k, v in expected["token_is_max_context"].items()
        }
        got = dataclasses.asdict(feature)
        differing = [k for k in field_names if got[k] != expected[k]]
        assert not differing, f"unique_id {expected['unique_id']}: {differing} differ"


def test_training_windows_without_the_answer_are_impossible(tokenizer):
    golden = _golden("features_train_seq128_stride32_q24.json")
    examples = read_squad_examples(SQUAD / golden["input_file"], is_training=True)
    features = _convert_like(golden, examples, tokenizer)
    impossible = [f for f in features if f.is_impossible]
    assert len(impossible) == 25  # 17 from the 6 unanswerable questions, 8 out of their window
    assert all((f.start_position, f.end_position) == (0, 0) for f in impossible)
    assert all(f.example_index is None for f in features)


def test_without_paragraph_cache_the_features_are_the_same(tokenizer):
    golden = _golden("features_eval_seq128_stride32_q24.json")
    examples = read_squad_examples(SQUAD / golden["input_file"], is_training=False)
    cached = _convert_like(golden, examples, tokenizer)
    assert _convert_like(golden, examples, tokenizer, paragraph_cache_size=0) == cached
    assert list(iter_features(examples, tokenizer, 128, 32, 24, False)) == cached


def _contexts():
    contexts = []
    for name in SQUAD_INPUTS:
        for article in json.loads((SQUAD / name).read_text(encoding="utf-8"))["data"]:
            contexts += [
                p["context"] for p in article["paragraphs"] if p["context"] not in contexts
            ]
    return contexts


def test_fast_alignment_equals_reference_on_fixture_paragraphs(tokenizer):
    contexts = _contexts()
    assert len(contexts) == 9 and any(not c.isascii() for c in contexts)
    for context in contexts:
        tok_cat_text = pieces_text(tokenizer.tokenize(context))
        expected = reference_alignment(context, tok_cat_text, do_lower_case=True)
        assert fast_alignment(context, tok_cat_text, do_lower_case=True) == expected
        assert not expected.is_mismatch()


def test_fast_alignment_equals_reference_on_random_text():
    # Near-copies (edits, case, accents, a ligature that never matches one character, newlines)
    # and unrelated strings: band edges, row 0, the retry, mismatches, bands wider than 62.
    rng = random.Random(1234)
    mismatches = 0
    for _ in range(400):
        context = "".join(rng.choice("aAb ,é\nﬁ") for _ in range(rng.randint(1, 50)))
        if rng.random() < 0.7:
            pieces = list(context.lower())
            for _ in range(rng.randint(0, 12)):
                at = rng.randrange(len(pieces) + 1)
                op = rng.random()
                if op < 0.4:
                    pieces.insert(at, rng.choice("ab e"))
                elif pieces and op < 0.8:
                    del pieces[min(at, len(pieces) - 1)]
                elif pieces:
                    pieces[min(at, len(pieces) - 1)] = rng.choice("ab e")
            tok_cat_text = "".join(pieces) or "a"
        else:
            tok_cat_text = "".join(rng.choice("ab e") for _ in range(rng.randint(1, 90)))
        for lower in (True, False):
            expected = reference_alignment(context, tok_cat_text, lower)
            assert fast_alignment(context, tok_cat_text, lower) == expected, (context, tok_cat_text)
            mismatches += expected.is_mismatch()
    assert 0 < mismatches < 800


def test_alignment_retries_with_a_wider_band():
    context = "the quick brown fox jumps over the lazy dog"
    shifted = "#######" + context[:-7]  # off the diagonal by 7: outside the first band (5)
    expected = reference_alignment(context, shifted, True)
    assert expected.match_length == 36 and not expected.is_mismatch()
    assert fast_alignment(context, shifted, True) == expected
    too_far = "#" * 12 + context[:-12]  # outside the second band (10) as well
    assert reference_alignment(context, too_far, True).is_mismatch()
    assert fast_alignment(context, too_far, True) == reference_alignment(context, too_far, True)


def test_convert_index_fills_unmatched_positions():
    index = [None, 2, None, None, 7, None]
    assert [convert_index(index, p, is_start=True) for p in range(6)] == [0, 2, 3, 3, 7, 7]
    assert [convert_index(index, p, is_start=False) for p in range(6)] == [1, 2, 6, 6, 7, 7]
    assert convert_index(index, 5, m=10, is_start=True) == 8
    assert convert_index(index, 5, m=10, is_start=False) == 9


def test_max_context_matches_the_per_position_rule(tokenizer):
    assert doc_spans(50, 20, 7) == [(0, 20), (7, 20), (14, 20), (21, 20), (28, 20), (35, 15)]
    assert doc_spans(5, 20, 7) == [(0, 5)]
    example = SquadExample("q", "why?", " ".join(["word"] * 50))
    features = convert_examples_to_features([example], tokenizer, 27, 7, 4, False)
    query_length = len(tokenizer.encode("why?"))
    spans = doc_spans(50, 27 - query_length - 3, 7)
    for span_index, feature in enumerate(features):
        start = spans[span_index][0]
        for position, flag in feature.token_is_max_context.items():
            doc_position = start + position - query_length - 2
            assert flag == is_max_context(spans, span_index, doc_position)


def test_unalignable_context_is_skipped_with_a_warning(tokenizer, caplog):
    # "ﬁ" becomes "fi" in the pieces: no single context character matches, as in the original,
    # which logs "MISMATCH DETECTED!" and drops the question.
    examples = [SquadExample("bad", "what?", "ﬁﬁﬁﬁ ﬁﬁﬁ"), SquadExample("ok", "what?", "Fine.")]
    with caplog.at_level(logging.WARNING):
        features = convert_examples_to_features(examples, tokenizer, 32, 8, 8, False)
    assert [f.example_index for f in features] == [1]
    assert features[0].unique_id == 1000000000
    assert "'bad'" in caplog.text


def test_window_arguments_are_checked(tokenizer):
    with pytest.raises(ValueError, match="no room"):
        convert_examples_to_features([], tokenizer, 10, 4, 8, False)
    with pytest.raises(ValueError, match="doc_stride"):
        convert_examples_to_features([], tokenizer, 64, 0, 8, False)


# Reading: what the original reads, and bad input.


def _write(tmp_path, qas, context="Rollo was a Viking leader.", name="squad.json"):
    path = tmp_path / name
    data = {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _qa(qid, answers, question="Who?", **extra):
    return {"id": qid, "question": question, "answers": answers, **extra}


def test_training_reader_positions_and_impossible(tmp_path):
    path = _write(
        tmp_path,
        [
            _qa("a", [{"text": "Viking", "answer_start": 12}]),
            _qa("b", [], is_impossible=True, plausible_answers=[]),
        ],
    )
    answerable, impossible = read_squad_examples(path, is_training=True)
    assert (answerable.orig_answer_text, answerable.start_position, answerable.end_position) == (
        "Viking",
        12,
        17,
    )
    assert not answerable.is_impossible
    assert (impossible.orig_answer_text, impossible.start_position, impossible.is_impossible) == (
        "",
        -1,
        True,
    )


def test_eval_reader_keeps_questions_with_several_answers(tmp_path):
    answers = [{"text": "Rollo", "answer_start": 0}, {"text": "Rollo was", "answer_start": 0}]
    path = _write(tmp_path, [_qa("a", answers), _qa("b", [], is_impossible=True)])
    examples = read_squad_examples(path, is_training=False)
    assert [e.qas_id for e in examples] == ["a", "b"]
    assert all(e.orig_answer_text is None and not e.is_impossible for e in examples)


def test_a_repeated_question_id_is_refused_for_evaluation_and_kept_for_training(tmp_path):
    answer = [{"text": "Rollo", "answer_start": 0}]
    path = _write(tmp_path, [_qa("a", answer), _qa("dup", answer), _qa("dup", answer, "When?")])
    # Predictions are keyed by id: one of the two would be lost.
    with pytest.raises(SquadFormatError) as refused:
        read_squad_examples(path, is_training=False)
    assert str(refused.value).startswith(f"{path}: question id 'dup' appears twice (article 0, ")
    # Training keys nothing by id: both questions are trained on, as the original reads them.
    examples = read_squad_examples(path, is_training=True)
    assert [(e.qas_id, e.question_text) for e in examples] == [
        ("a", "Who?"),
        ("dup", "Who?"),
        ("dup", "When?"),
    ]


def test_training_needs_exactly_one_answer(tmp_path):
    answers = [{"text": "Rollo", "answer_start": 0}, {"text": "Rollo", "answer_start": 0}]
    path = _write(tmp_path, [_qa("two", answers)])
    with pytest.raises(SquadFormatError, match=r"squad\.json: question 'two': .*exactly 1 answer"):
        read_squad_examples(path, is_training=True)


def test_training_answer_not_at_its_offset(tmp_path):
    path = _write(
        tmp_path,
        [
            _qa("bad", [{"text": "Viking", "answer_start": 3}]),
            _qa("ok", [{"text": "Rollo", "answer_start": 0}]),
        ],
    )
    with pytest.raises(SquadFormatError, match=r"squad\.json: question 'bad': answer 'Viking'"):
        read_squad_examples(path, is_training=True)
    result = read_squad(path, is_training=True, skip_bad_answers=True)
    assert result.skipped == ["bad"] and [e.qas_id for e in result.examples] == ["ok"]
    assert len(read_squad_examples(path, is_training=False)) == 2  # eval does not read answers


def test_malformed_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"data": [', encoding="utf-8")
    with pytest.raises(SquadFormatError, match=r"broken\.json: not valid JSON"):
        read_squad_examples(path, is_training=False)
    path.write_text('{"version": "v2.0"}', encoding="utf-8")
    with pytest.raises(SquadFormatError, match=r"broken\.json: missing 'data'"):
        read_squad_examples(path, is_training=False)


@pytest.mark.parametrize("is_training", [True, False])
def test_empty_context_or_question(tmp_path, is_training):
    answer = [{"text": "x", "answer_start": 0}]
    path = _write(tmp_path, [_qa("q1", answer)], context="  \n")
    with pytest.raises(SquadFormatError, match=r"squad\.json: question 'q1': empty context"):
        read_squad_examples(path, is_training)
    path = _write(tmp_path, [_qa("q2", answer, question=" ")], context="x")
    with pytest.raises(SquadFormatError, match=r"squad\.json: question 'q2': empty question"):
        read_squad_examples(path, is_training)
