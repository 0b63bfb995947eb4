"""Which ops of a SavedModel the stock TF Serving model server can run.

The official `tensorflow/serving` image's model server links core TensorFlow and the op libraries
of tensorflow-text (its `ops_lib`, part of the server's supported ops): the text-in models, whose
tokenizer and pair trimming are tensorflow-text ops, load there as they are. Any other add-on op
would need a custom server build, so an export that used one is refused.
"""

from __future__ import annotations

import functools
import importlib
import os

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

# The image the Dockerfile's serving stage builds on.
TF_SERVING_IMAGE = "tensorflow/serving:2.20.0"
# tensorflow-text's op libraries linked into that image's model server (tensorflow-text 2.20's
# `ops_lib`): an op defined by one of these runs there.
TF_SERVING_TEXT_OP_LIBRARIES = frozenset(
    {
        "boise_offset_converter",
        "byte_splitter",
        "constrained_sequence_op",
        "fast_bert_normalizer",
        "fast_sentencepiece_tokenizer",
        "fast_wordpiece_tokenizer",
        "mst_ops",
        "ngrams_op",
        "normalize_ops",
        "phrase_tokenizer",
        "regex_split_ops",
        "sentence_breaking_ops",
        "sentencepiece_tokenizer",
        "split_merge_from_logits_tokenizer",
        "split_merge_tokenizer",
        "state_based_sentence_breaker_op",
        "text_similarity_metric_ops",
        "trimmer_ops",
        "unicode_script_tokenizer",
        "utf8_binarize_op",
        "whitespace_tokenizer",
        "whitespace_tokenizer_v2",
        "wordpiece_tokenizer",
    }
)


def graph_op_types(path: str) -> set[str]:
    """Every op type in a SavedModel's graphs, functions included."""
    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


def non_stock_ops(path: str) -> list[str]:
    """Op types of a SavedModel that core TensorFlow does not define.

    `tf.raw_ops` lists exactly the ops built into TensorFlow; tensorflow-text's (`TFText>...`) and
    other add-on ops are not in it even after their library is loaded.
    """
    return sorted(op for op in graph_op_types(path) if not hasattr(tf.raw_ops, op))


@functools.cache
def _tf_text_op_libraries() -> dict[str, str]:
    """{op type: the tensorflow-text op library defining it} of the installed tensorflow-text."""
    ops_package = importlib.import_module("tensorflow_text.python.ops")
    directory = os.path.dirname(ops_package.__file__)
    owners = {}
    for filename in sorted(os.listdir(directory)):
        if not (filename.startswith("_") and filename.endswith(".so")):
            continue
        library = filename[1:-3]
        module = tf.load_op_library(os.path.join(directory, filename))
        # Generated wrappers name each op after its type, `>` (a namespace) written `_`.
        for name in dir(module):
            if name[:1].isupper() and not name.startswith("TV_"):
                owners[name] = library
    return owners


def ops_tf_serving_lacks(path: str) -> list[str]:
    """Op types of a SavedModel that the `TF_SERVING_IMAGE` model server cannot run: neither core
    TensorFlow's nor defined by a tensorflow-text library it links."""
    owners = _tf_text_op_libraries()
    return [
        op
        for op in non_stock_ops(path)
        if owners.get(op.replace(">", "_")) not in TF_SERVING_TEXT_OP_LIBRARIES
    ]


def tf_serving_failures(path: str) -> list[str]:
    """A one-line failure when the SavedModel at `path` uses an op `TF_SERVING_IMAGE` lacks."""
    lacking = ops_tf_serving_lacks(path)
    if not lacking:
        return []
    return [
        f"ops that {TF_SERVING_IMAGE} cannot run (neither TensorFlow's nor tensorflow-text's "
        f"it links): {lacking}"
    ]
