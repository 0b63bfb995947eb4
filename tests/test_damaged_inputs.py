"""Damaged or foreign model files given to the CLIs: one line naming the file and what is wrong,
exit status 1, nothing written.

TF1 checkpoints with a data shard missing, cut short or corrupt, or an unreadable `.index`;
`.keras` files that are cut short, no zip file, or another library's model; an init checkpoint
that does not exist; a classifier exported as the default head. The library is tested directly;
each CLI runs once, to show the error reaches its user as one line and leaves nothing behind.
"""

import dataclasses
import os
import pathlib
import shutil
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.checkpoints import read_tf1_checkpoint, read_weights
from albert_tf.checkpoints import tf1_index
from albert_tf.checkpoints.keras_files import (
    albert_config_of_keras_file,
    load_keras_model,
    read_keras_config,
)
from albert_tf.checkpoints.tf1 import check_weights_file
from albert_tf.export.heads.loading import load_serving_head
from albert_tf.finetuning.loop import checkpoint_step
from albert_tf.finetuning.settings import resolve_albert_config
from albert_tf.modeling.heads.classifier import AlbertClassifier
from albert_tf.modeling.model import BACKBONE_INPUTS, AlbertModel
from albert_tf.tasks.glue import finetune as finetuning
from tests import hostile
from tests.conftest import FIXTURES, ORIGINAL_CHECKPOINTS
from tests.model_configs import MICRO

RELEASE = ORIGINAL_CHECKPOINTS / "albert_tiny_grouped"  # albert_config.json beside model.ckpt
DATA = "model.ckpt.data-00000-of-00001"
SPM = FIXTURES / "albert_spm" / "30k-clean.model"


def release_copy(directory: pathlib.Path) -> pathlib.Path:
    """A whole copy of the release-layout TF1 checkpoint; returns its prefix."""
    directory.mkdir(parents=True)
    for name in ("albert_config.json", "model.ckpt.index", DATA):
        shutil.copy(RELEASE / name, directory / name)
    return directory / "model.ckpt"


def two_shard_checkpoint(directory: pathlib.Path) -> pathlib.Path:
    """A TF1 checkpoint of two data shards, as a sharded Saver writes it; returns its prefix."""
    directory.mkdir()
    parts = []
    for shard, (name, value) in enumerate((("a", np.arange(40.0)), ("b", np.ones((3, 5))))):
        parts.append(str(directory / f"part-{shard}"))
        tf.raw_ops.SaveV2(
            prefix=parts[-1], tensor_names=[name], shape_and_slices=[""], tensors=[value]
        )
    prefix = directory / "model.ckpt"
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=parts, destination_prefix=str(prefix))
    return prefix


@pytest.fixture(scope="module")
def keras_files(tmp_path_factory) -> dict[str, pathlib.Path]:
    """{kind: path}: a classifier of ours, it cut in half, a text file, another library's model,
    a zip file that is no .keras archive, a model with ours inside."""
    folder = tmp_path_factory.mktemp("keras_files")
    files = {k: folder / f"{k}.keras" for k in ("ours", "cut", "text", "sequential", "zip")}
    config = AlbertConfig(**MICRO)
    AlbertClassifier(config, num_labels=2).save(files["ours"])
    whole = files["ours"].read_bytes()
    files["cut"].write_bytes(whole[: len(whole) // 2])
    files["text"].write_text("label\tsentence\n")
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)], name="other").save(
        files["sequential"]
    )
    with zipfile.ZipFile(files["zip"], "w") as archive:
        archive.writestr("readme.txt", "hello")
    inputs = {k: keras.Input((None,), dtype="int32", name=k) for k in BACKBONE_INPUTS}
    pooled = AlbertModel(config)(inputs)["pooled_output"]
    files["wrapped"] = folder / "wrapped.keras"
    keras.Model(inputs, {"probabilities": keras.layers.Dense(2)(pooled)}, name="wrapped").save(
        files["wrapped"]
    )
    return files


# -- TF1 checkpoints ------------------------------------------------------------------------


def test_the_index_places_the_tensors_exactly_to_the_end_of_the_data_files(tmp_path):
    for folder in sorted(ORIGINAL_CHECKPOINTS.iterdir()):
        (index,) = folder.glob("*.index")
        num_shards, ends = tf1_index._extents(index.read_bytes())
        prefix = str(index)[: -len(".index")]
        assert num_shards == 1
        assert ends == {0: os.path.getsize(tf1_index.data_file(prefix, 0, 1))}
        tf1_index.check_data_files(prefix)
    prefix = two_shard_checkpoint(tmp_path / "sharded")
    assert read_tf1_checkpoint(prefix).keys() == {"a", "b"}
    num_shards, ends = tf1_index._extents(pathlib.Path(f"{prefix}.index").read_bytes())
    sizes = {s: os.path.getsize(tf1_index.data_file(str(prefix), s, 2)) for s in range(2)}
    assert (num_shards, ends) == (2, sizes) == (2, {0: 40 * 8, 1: 15 * 8})


@pytest.mark.parametrize(
    "damage, expected",
    [
        (
            "missing",
            rf"model.ckpt: checkpoint data file {DATA} is missing \(the .index names 1 shard\)",
        ),
        (
            "one byte short",
            rf"{DATA} is truncated: 170359 bytes, where the .index places tensor bytes up to byte 170360",
        ),
        ("empty data", rf"{DATA} is truncated: 0 bytes,"),
        (
            "empty index",
            r"model.ckpt.index: not a readable TF1 checkpoint index \(0 bytes, too short",
        ),
        (
            "text index",
            r"model.ckpt.index: not a readable TF1 checkpoint index \(it does not end in",
        ),
    ],
)
def test_a_damaged_tf1_checkpoint_is_refused_naming_the_file(tmp_path, damage, expected):
    prefix = release_copy(tmp_path / "ckpt")
    data, index = tmp_path / "ckpt" / DATA, tmp_path / "ckpt" / "model.ckpt.index"
    if damage == "missing":
        data.unlink()
    elif damage == "one byte short":
        os.truncate(data, data.stat().st_size - 1)
    elif damage == "empty data":
        os.truncate(data, 0)
    elif damage == "empty index":
        os.truncate(index, 0)
    else:
        index.write_text("model_checkpoint_path: model.ckpt\n" * 3)
    # Every reader of TF1 checkpoints goes through the same check: fine-tuning's init (also
    # found early by `check_weights_file`), export and conversion.
    for read in (read_tf1_checkpoint, read_weights, check_weights_file, checkpoint_step):
        with pytest.raises(ValueError, match=expected):
            read(prefix)
    with pytest.raises(ValueError, match=expected):
        read_tf1_checkpoint(tmp_path / "ckpt")  # by its directory
    with pytest.raises(ValueError, match=expected):
        load_serving_head(
            "pretrainer",
            tf1_checkpoint=str(prefix),
            albert_config_file=str(RELEASE / "albert_config.json"),
        )


def test_the_shard_that_is_cut_or_missing_is_named(tmp_path):
    prefix = two_shard_checkpoint(tmp_path / "sharded")
    second = pathlib.Path(tf1_index.data_file(str(prefix), 1, 2))
    os.truncate(second, 100)
    with pytest.raises(
        ValueError, match="data-00001-of-00002 is truncated: 100 bytes, .* byte 120"
    ):
        read_tf1_checkpoint(prefix)
    second.unlink()
    with pytest.raises(
        ValueError, match=r"data-00001-of-00002 is missing \(the .index names 2 shards\)"
    ):
        read_tf1_checkpoint(prefix)
    pathlib.Path(tf1_index.data_file(str(prefix), 0, 2)).unlink()
    with pytest.raises(
        ValueError, match="00000-of-00002 is missing .*2 shards, and none of them exists"
    ):
        read_tf1_checkpoint(prefix)


def test_corrupt_tensor_bytes_name_the_checkpoint_and_the_tensor(tmp_path):
    prefix = release_copy(tmp_path / "ckpt")
    data = tmp_path / "ckpt" / DATA
    damaged = bytearray(data.read_bytes())
    damaged[1000:1100] = bytes(100)  # same size, other bytes: only the checksums show it
    data.write_bytes(bytes(damaged))
    with pytest.raises(
        ValueError, match=r"model.ckpt: cannot read tensor \S+ from the checkpoint's"
    ):
        read_tf1_checkpoint(prefix)


def test_an_index_with_compressed_blocks_is_left_to_tensorflows_reader(tmp_path):
    # TensorFlow never compresses a bundle's index; one that does is not judged here.
    prefix = release_copy(tmp_path / "ckpt")
    index = tmp_path / "ckpt" / "model.ckpt.index"
    table = bytearray(index.read_bytes())
    footer = bytes(table[-48:])
    _, pos = tf1_index._varint(footer, tf1_index._varint(footer, 0)[1])
    offset, pos = tf1_index._varint(footer, pos)
    size, _ = tf1_index._varint(footer, pos)
    table[offset + size] = 1  # the index block's compression type
    index.write_bytes(bytes(table))
    os.truncate(tmp_path / "ckpt" / DATA, 10)  # would be refused, were the index read
    assert tf1_index.check_data_files(str(prefix)) is None


# -- .keras files --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, expected",
    [
        (
            "cut",
            r"cut.keras: truncated .keras archive \(it starts as a zip file, its end is missing\)",
        ),
        ("text", r"text.keras: not a .keras archive \(not a zip file\)"),
        ("zip", r"zip.keras: not a .keras archive \(a zip file without config.json\)"),
        (
            "sequential",
            "sequential.keras: holds a keras.Sequential model, not an ALBERT model saved by albert_tf",
        ),
    ],
)
def test_a_keras_file_that_is_not_ours_is_refused_naming_the_file(keras_files, kind, expected):
    path = keras_files[kind]
    for read in (load_keras_model, read_weights, albert_config_of_keras_file, check_weights_file):
        with pytest.raises(ValueError, match=expected):
            read(path)
    with pytest.raises(ValueError, match=expected):
        load_serving_head("classifier", keras_model=str(path))


def test_what_a_keras_file_may_hold(keras_files, tmp_path):
    assert isinstance(load_keras_model(keras_files["ours"]), AlbertClassifier)
    assert albert_config_of_keras_file(keras_files["ours"]) == AlbertConfig(**MICRO)
    # A model with ours inside exports (its config comes from within), but has no TF1 names.
    assert load_keras_model(keras_files["wrapped"], accept="albert_inside").name == "wrapped"
    with pytest.raises(ValueError, match="wrapped.keras: holds a keras.Functional model, not"):
        read_weights(keras_files["wrapped"])
    assert load_keras_model(keras_files["sequential"], accept="any").name == "other"
    with pytest.raises(FileNotFoundError, match="Keras model file not found: .*missing.keras"):
        read_keras_config(tmp_path / "missing.keras")
    (tmp_path / "empty.keras").touch()
    with pytest.raises(ValueError, match="empty.keras: an empty file, not a .keras archive"):
        load_keras_model(tmp_path / "empty.keras")


# -- fine-tuning's init checkpoint ---------------------------------------------------------


def glue_settings(tmp_path, init_checkpoint) -> finetuning.FinetuneConfig:
    return finetuning.FinetuneConfig(
        "rte",
        "d",
        str(tmp_path / "out"),
        str(SPM),
        max_seq_length=32,
        init_checkpoint=str(init_checkpoint),
    )


def test_an_init_checkpoint_that_does_not_exist_is_named_as_such(tmp_path):
    settings = glue_settings(tmp_path, tmp_path / "pretrained" / "model.ckpt")
    missing = f"init_checkpoint={tmp_path}/pretrained/model.ckpt: no such file or directory"
    with pytest.raises(FileNotFoundError, match=f"{missing} \\(nor a TF1 checkpoint .*.index\\)"):
        resolve_albert_config(settings)
    settings = dataclasses.replace(settings, init_checkpoint=str(tmp_path / "model.keras"))
    with pytest.raises(FileNotFoundError, match="model.keras: no such file or directory$"):
        resolve_albert_config(settings)
    # With the config given, the checkpoint is still checked before any work.
    settings = dataclasses.replace(
        settings,
        init_checkpoint=str(release_copy(tmp_path / "cut")),
        albert_config_file=str(RELEASE / "albert_config.json"),
    )
    os.truncate(tmp_path / "cut" / DATA, 5)
    with pytest.raises(ValueError, match=f"{DATA} is truncated: 5 bytes"):
        resolve_albert_config(settings)


# -- exporting with the wrong head ---------------------------------------------------------


def test_a_model_exported_as_the_wrong_head_is_told_which_heads_fit(keras_files):
    with pytest.raises(
        ValueError, match="is not an AlbertPretrainer: .*; it fits --head=classifier$"
    ):
        load_serving_head("pretrainer", keras_model=str(keras_files["ours"]))
    # The error names the file; a model no head serves says so.
    with pytest.raises(
        ValueError, match=r"(?s)sequential.keras: .* it fits none of the heads \(pre"
    ):
        load_serving_head(
            "classifier",
            keras_model=str(keras_files["sequential"]),
            albert_config_file=str(RELEASE / "albert_config.json"),
        )


# -- the CLIs ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_fine_tuning_from_a_cut_tf1_checkpoint_stops_in_one_line(tmp_path):
    prefix = release_copy(tmp_path / "pretrained")
    os.truncate(tmp_path / "pretrained" / DATA, 1000)
    out = tmp_path / "out"
    result = hostile.run(
        hostile.python(
            "pipelines/run_classifier.py",
            "--task_name=sst-2",
            f"--data_dir={FIXTURES / 'glue'}",
            f"--spm_model_file={SPM}",
            f"--init_checkpoint={prefix}",
            f"--output_dir={out}",
            "--max_seq_length=32",
            "--do_train",
        )
    )
    assert result.returncode == 1
    hostile.assert_one_line_ending(
        result.stdout + result.stderr,
        f"ValueError: {prefix}: checkpoint data file {DATA} is truncated: 1000 bytes",
    )
    assert not out.exists()


@pytest.mark.e2e
def test_converting_a_tf1_checkpoint_without_its_data_stops_in_one_line(tmp_path):
    prefix = release_copy(tmp_path / "pretrained")
    (tmp_path / "pretrained" / DATA).unlink()
    (tmp_path / "out").mkdir()
    result = hostile.run(
        hostile.python(
            "pipelines/convert_checkpoint.py",
            f"--tf1_checkpoint={prefix}",
            f"--albert_config_file={RELEASE / 'albert_config.json'}",
            f"--output={tmp_path / 'out' / 'albert.keras'}",
        )
    )
    assert result.returncode == 1
    hostile.assert_one_line_ending(
        result.stdout + result.stderr,
        f"ValueError: {prefix}: checkpoint data file {DATA} is missing (the .index names 1 shard)",
    )
    assert os.listdir(tmp_path / "out") == []


@pytest.mark.e2e
def test_exporting_a_classifier_as_the_default_head_says_which_head_fits(keras_files, tmp_path):
    out = tmp_path / "export"
    result = hostile.run(
        hostile.python(
            "pipelines/export.py", f"--keras_model={keras_files['ours']}", f"--output_dir={out}"
        )
    )
    assert result.returncode == 1
    hostile.assert_one_line_ending(
        result.stdout + result.stderr,
        f"export failed: {keras_files['ours']}: albert_classifier (AlbertClassifier) is not an "
        "AlbertPretrainer",
        "; it fits --head=classifier",
    )
    assert not out.exists()
