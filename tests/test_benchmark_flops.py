"""The training benchmark's yardsticks: its FLOP formula and its matmul-only step, held to real graphs."""

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer
from benchmarks.matmul_reference import MatmulSkeleton, graph_matmul_flops, training_flops
from tests.test_model import gradient_step, pretraining_batch

BATCH, SEQ, PREDICTIONS = 2, 12, 3
CONFIGS = {
    "grouped, E != H": dict(
        vocab_size=120,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=4,
        num_hidden_groups=2,
        inner_group_num=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    ),
    "E == H, unshared": dict(
        vocab_size=90,
        embedding_size=24,
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=40,
        sharing="none",
        max_position_embeddings=64,
    ),
}


def train_step_graph(model, features) -> tf.Graph:
    specs = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in features.items()}
    return gradient_step(model).get_concrete_function(specs).graph


@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS.keys())
def test_training_flops_count_every_matmul_of_the_train_step(overrides):
    config = AlbertConfig(**overrides)
    features = pretraining_batch(config, BATCH, SEQ, PREDICTIONS)
    counted = graph_matmul_flops(train_step_graph(AlbertPretrainer(config), features))
    assert counted == training_flops(config, BATCH, SEQ, PREDICTIONS)


@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS.keys())
def test_matmul_skeleton_runs_the_train_steps_matmuls_and_stays_finite(overrides):
    config = AlbertConfig(**overrides)
    skeleton = MatmulSkeleton(config, BATCH, SEQ, PREDICTIONS, jit_compile=False)
    graph = skeleton.step.get_concrete_function().graph
    assert graph_matmul_flops(graph) == training_flops(config, BATCH, SEQ, PREDICTIONS)
    elementwise = {op.type for op in graph.get_operations()} & {"AddN", "AddV2", "Mul", "Tanh"}
    assert not elementwise  # matmuls, reshapes and identities only
    gradients = skeleton()
    assert all(g is not None and np.isfinite(g.numpy()).all() for g in gradients)
    # Unit-variance activations: no gradient vanishes or blows up through the layers.
    spreads = [float(tf.math.reduce_std(g)) for g in gradients]
    assert 0.01 < min(spreads) and max(spreads) < 1000.0


def test_graph_matmul_flops_reads_transposes_and_broadcast_batches():
    @tf.function
    def products(a, b, c):
        return tf.matmul(a, b, transpose_b=True), tf.matmul(c, a, transpose_a=True)

    graph = products.get_concrete_function(
        tf.TensorSpec((3, 5, 7)), tf.TensorSpec((11, 7)), tf.TensorSpec((3, 5, 2))
    ).graph
    # [3,5,7]x[7,11] (b broadcast over the batch) and [3,2,5]x[3,5,7]
    assert graph_matmul_flops(graph) == 2.0 * (3 * 5 * 7 * 11 + 3 * 2 * 5 * 7)
