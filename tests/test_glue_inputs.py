"""GLUE inputs: packing as the original `convert_single_example`, padding, training batches."""

import pathlib

import numpy as np
import pytest

from albert_tf import AlbertConfig
from albert_tf.tasks.glue.metrics import predict_logits
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.tasks.glue import processors as glue
from albert_tf.tasks.glue.finetune import encode_split, make_dataset
from albert_tf.text.tokenization import AlbertTokenizer
from tests.tolerances import SAME_MODEL, assert_close_to_scale
from tests.model_configs import CLASSIFIER_TINY

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
GLUE = FIXTURES / "glue"
TINY = CLASSIFIER_TINY


@pytest.fixture(scope="module")
def tokenizer():
    return AlbertTokenizer(FIXTURES / "albert_spm" / "30k-clean.model")


def unpadded(packed):
    length = sum(packed.input_mask)
    return packed.input_ids[:length], packed.segment_ids[:length]


@pytest.mark.parametrize("max_seq_length", [128, 24])
def test_encode_split_packs_like_the_original(tokenizer, max_seq_length):
    split = glue.read_split("mrpc", GLUE, "dev")
    encoded = encode_split(split, glue.TASKS["mrpc"], tokenizer, max_seq_length)
    offsets = np.concatenate([[0], np.cumsum(encoded.lengths)])
    for i, example in enumerate(split.examples):
        ids, segments = unpadded(
            tokenizer.encode_pair(example.text_a, example.text_b, max_seq_length)
        )
        assert list(encoded.token_ids[offsets[i] : offsets[i + 1]]) == ids
        assert encoded.segment_a_lengths[i] == segments.count(0)
    assert encoded.lengths.max() <= max_seq_length
    if max_seq_length == 24:  # every MRPC pair is longer: truncated to exactly 24
        assert (encoded.lengths == 24).all()
    assert list(encoded.label_ids) == [int(e.label) for e in split.examples]
    assert encoded.guids[0] == "dev-1"


def test_labels_map_to_the_label_list_order(tokenizer):
    encoded = encode_split(glue.read_split("rte", GLUE, "dev"), glue.TASKS["rte"], tokenizer, 64)
    assert encoded.label_ids.dtype == np.int32
    assert list(encoded.label_ids[:2]) == [1, 0]  # not_entailment, entailment
    test = encode_split(glue.read_split("sst-2", GLUE, "test"), glue.TASKS["sst-2"], tokenizer, 64)
    assert not test.label_ids.any()  # unlabelled


def test_empty_text_b_packs_as_a_single_sentence(tokenizer):
    examples = [glue.GlueExample("0", "a b", "", "1", 2), glue.GlueExample("1", "a b", " ", "0", 3)]
    encoded = encode_split(glue.GlueSplit("x", examples), glue.TASKS["mrpc"], tokenizer, 16)
    single = unpadded(tokenizer.encode_pair("a b", None, 16))[0]
    # `if text_b:` then `if tokens_b:` in the original: no second [SEP], all segment 0.
    assert list(encoded.token_ids[: encoded.lengths[0]]) == single
    assert list(encoded.lengths) == [len(single)] * 2
    assert list(encoded.segment_a_lengths) == [len(single)] * 2


def test_dynamic_padding_gives_the_fixed_padding_outputs(tokenizer):
    encoded = encode_split(
        glue.read_split("sst-2", GLUE, "dev"), glue.TASKS["sst-2"], tokenizer, 64
    )
    dynamic = make_dataset(encoded, 5, 64, training=False)
    fixed = make_dataset(encoded, 5, 64, training=False, dynamic_padding=False)
    widths = [features["input_ids"].shape[1] for features, _ in dynamic]
    assert max(widths) < 64 and {x["input_ids"].shape[1] for x, _ in fixed} == {64}
    first, _ = next(iter(fixed))
    np.testing.assert_array_equal(first["input_mask"].numpy().sum(1), encoded.lengths[:5])
    np.testing.assert_array_equal(first["segment_ids"].numpy().sum(1), 0)  # single sentences
    model = AlbertClassifier(AlbertConfig(**TINY), num_labels=2)
    assert_close_to_scale(predict_logits(model, dynamic), predict_logits(model, fixed), SAME_MODEL)


def test_pair_segments_and_padding(tokenizer):
    encoded = encode_split(glue.read_split("mrpc", GLUE, "dev"), glue.TASKS["mrpc"], tokenizer, 48)
    batch, _ = next(iter(make_dataset(encoded, 2, 48, training=False, dynamic_padding=False)))
    for row in range(2):
        mask, segments = batch["input_mask"][row].numpy(), batch["segment_ids"][row].numpy()
        a, n = encoded.segment_a_lengths[row], encoded.lengths[row]
        assert list(segments) == [0] * a + [1] * (n - a) + [0] * (48 - n)
        assert list(mask) == [1] * n + [0] * (48 - n)
        assert (batch["input_ids"][row].numpy()[n:] == 0).all()


def test_training_dataset_repeats_shuffles_and_drops_the_remainder(tokenizer):
    encoded = encode_split(
        glue.read_split("sst-2", GLUE, "dev"), glue.TASKS["sst-2"], tokenizer, 32
    )  # 16 examples

    def labels(seed):
        dataset = make_dataset(encoded, 6, 32, training=True, seed=seed)
        return [label_ids.numpy().tolist() for _, label_ids in dataset.take(6)]

    batches = labels(1)
    assert all(len(b) == 6 for b in batches)  # 16 is not a multiple of 6: full batches only
    assert labels(1) == batches and labels(2) != batches  # seeded
    _, epoch_labels = next(iter(make_dataset(encoded, 16, 32, training=True, seed=1)))
    assert sorted(epoch_labels.numpy()) == sorted(encoded.label_ids)  # a full shuffle
