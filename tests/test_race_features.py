"""RACE reader and 4-choice inputs: equal to what the original `race_utils.py` wrote."""

import dataclasses
import json
import pathlib

import pytest

from albert_tf.tasks.race.examples import RaceExample, RaceFormatError, read_race_examples
from albert_tf.tasks.race.features import convert_race_example, convert_race_examples
from albert_tf.text.tokenization import AlbertTokenizer

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
RACE = FIXTURES / "original_race"


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(FIXTURES / "albert_spm" / "30k-clean.model", do_lower_case=True)


@pytest.mark.parametrize("split", ["train", "dev"])
def test_features_equal_the_original(tokenizer, split):
    golden = json.loads((RACE / f"features_{split}_seq128_qa32.json").read_text(encoding="utf-8"))
    assert (golden["max_seq_length"], golden["max_qa_length"], golden["do_lower_case"]) == (
        128,
        32,
        True,
    )
    examples = read_race_examples(RACE / "data", split)
    features = convert_race_examples(examples, tokenizer, 128, 32)
    assert len(features) == len(golden["features"])
    for feature, expected in zip(features, golden["features"]):
        got = dataclasses.asdict(feature)
        assert sorted(got) == sorted(expected)
        differing = [k for k in expected if got[k] != expected[k]]
        assert not differing, f"{expected['example_id']}: {differing} differ"
        assert all(len(row) == 128 for row in feature.input_ids)


def test_middle_before_high_and_level_flags():
    both = read_race_examples(RACE / "data", "dev")
    levels = [e.example_id.split("_")[0] for e in both]
    assert levels == sorted(levels, key=["middle", "high"].index) and set(levels) == {
        "middle",
        "high",
    }
    middle = read_race_examples(RACE / "data", "dev", middle_only=True)
    high = read_race_examples(RACE / "data", "dev", high_only=True)
    assert middle + high == both and middle and high
    with pytest.raises(ValueError, match="exclude each other"):
        read_race_examples(RACE / "data", "dev", middle_only=True, high_only=True)


def test_cloze_questions_take_each_option():
    dev = read_race_examples(RACE / "data", "dev")
    lucy = [e for e in dev if e.endings[0].startswith("lucy gave the ribbon")]
    assert lucy[0].endings == (
        "lucy gave the ribbon to her teacher .",
        "lucy gave the ribbon to her sister .",
        "lucy gave the ribbon to her grandmother .",
        "lucy gave the ribbon to the judges .",
    )
    assert lucy[0].label == 2
    plain = next(e for e in dev if e.endings[0].startswith("which bean grew best?"))
    assert plain.endings[1] == "which bean grew best? the one in the cupboard"


def test_long_candidate_keeps_its_last_pieces_and_cuts_the_article(tokenizer):
    example = RaceExample("x", "one two three " * 40, ("a b c d e f g h",) * 4, 0)
    feature = convert_race_example(example, tokenizer, 32, 4)
    ending = tokenizer.encode("a b c d e f g h")[-4:]
    row = feature.input_ids[0]
    assert row[-5:] == [*ending, tokenizer.sep_id] and len(row) == 32
    assert feature.segment_ids[0] == [0] * 27 + [1] * 5
    with pytest.raises(ValueError, match="'x'.*does not fit"):
        convert_race_example(example, tokenizer, 8, 6)


def _race_dir(tmp_path, lines, level="middle"):
    folder = tmp_path / "RACE" / "train" / level
    folder.mkdir(parents=True)
    (folder / "all.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    other = "high" if level == "middle" else "middle"
    (tmp_path / "RACE" / "train" / other).mkdir()
    (tmp_path / "RACE" / "train" / other / "all.txt").write_text("", encoding="utf-8")
    return tmp_path


def _article(article_id="m1.txt", options=("a", "b", "c", "d"), answer="B"):
    return json.dumps(
        {
            "id": article_id,
            "article": "A short text.",
            "questions": ["What is it?"],
            "options": [list(options)],
            "answers": [answer],
        }
    )


def test_reads_a_well_formed_file(tmp_path):
    data_dir = _race_dir(tmp_path, [_article(), "", _article("m2.txt", answer="D")])
    examples = read_race_examples(data_dir, "train")
    assert [(e.example_id, e.label) for e in examples] == [("m1.txt", 1), ("m2.txt", 3)]
    assert examples[0].context == "a short text."


@pytest.mark.parametrize(
    "line, message",
    [
        (
            _article(options=("a", "b", "c")),
            r"all\.txt:2: article 'bad\.txt', question 0: 3 options",
        ),
        (_article(answer="E"), r"all\.txt:2: article 'bad\.txt', question 0: answer 'E'"),
        ('{"id": "bad.txt", "article": ', r"all\.txt:2: not valid JSON"),
    ],
)
def test_bad_lines_name_file_line_and_id(tmp_path, line, message):
    line = line.replace("m1.txt", "bad.txt")
    data_dir = _race_dir(tmp_path, [_article(), line], level="high")
    with pytest.raises(RaceFormatError, match=message):
        read_race_examples(data_dir, "train")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="all.txt"):
        read_race_examples(tmp_path, "test")
