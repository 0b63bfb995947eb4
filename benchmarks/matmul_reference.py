"""The matmul side of the training benchmark: FLOP count, machine peak, and a matmul-only step.

`training_flops` is the analytic count the benchmark divides by step time; `graph_matmul_flops`
counts the same thing from a traced graph, so a test can hold the formula to the real train step.
`MatmulRate` is the machine's fp32 matmul rate. `MatmulSkeleton` runs every matmul of one ALBERT
training step, at the model's shapes, and nothing else: the rate no implementation built on the
same matmul kernels can beat, because GELU, layer norm, softmax, the optimizer and the summing of
shared weights' gradients all come on top of it.
"""

import time

import numpy as np
import tensorflow as tf

from albert_tf import AlbertConfig

MATMUL_OPS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")


def training_flops(c: AlbertConfig, batch: int, seq: int, predictions: int) -> float:
    """Matmul FLOPs of one training step (forward x 3), counting 2 per multiply-add."""
    tokens, h = batch * seq, c.hidden_size
    per_layer = 2 * tokens * (4 * h * h + 2 * h * c.intermediate_size)
    per_layer += 2 * 2 * batch * seq * seq * h  # scores and context
    forward = c.num_hidden_layers * c.inner_group_num * per_layer
    if c.embedding_size != h:
        forward += 2 * tokens * c.embedding_size * h  # E -> H mapping
    forward += 2 * batch * predictions * (h * c.embedding_size + c.embedding_size * c.vocab_size)
    forward += 2 * batch * (h * h + 2 * h)  # pooler and sentence-order head
    return 3.0 * forward


def graph_matmul_flops(graph: tf.Graph) -> float:
    """FLOPs of every MatMul / BatchMatMul op in `graph` (static shapes), 2 per multiply-add."""
    total = 0.0
    for op in graph.get_operations():
        if op.type == "Einsum":
            raise ValueError(f"{op.name}: Einsum is not counted; express it as a matmul")
        if op.type not in MATMUL_OPS:
            continue
        a, b = (t.shape for t in op.inputs)
        if not (a.is_fully_defined() and b.is_fully_defined()):
            raise ValueError(f"{op.name}: shapes {a} x {b} are not static")
        transpose_a = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
        transpose_b = op.get_attr("transpose_b" if op.type == "MatMul" else "adj_y")
        m, k = (a[-1], a[-2]) if transpose_a else (a[-2], a[-1])
        n = b[-2] if transpose_b else b[-1]
        batch = np.prod(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])), dtype=np.int64)
        total += 2.0 * batch * m * k * n
    return total


class MatmulRate:
    """Sustained fp32 matmul rate on one [m, k] x [k, n] product, measured over a time window."""

    def __init__(self, m: int, k: int, n: int):
        self.flops = 2.0 * m * k * n
        self.a, self.b = tf.random.normal((m, k)), tf.random.normal((k, n))
        self.product = tf.function(tf.matmul)
        self.product(self.a, self.b).numpy()

    def gflops(self, seconds: float) -> float:
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            self.product(self.a, self.b).numpy()
            count += 1
        return self.flops * count / (time.perf_counter() - start) / 1e9


class MatmulSkeleton:
    """Forward and backward matmuls of one ALBERT training step, nothing else.

    Same shapes, transposes and op count as the model's train step (`graph_matmul_flops` of
    its graph equals `training_flops`, tested). Heads are plain reshapes (no transposes), each
    layer gets its own weight gradients (no sum over shared layers), and there is no
    activation, softmax or norm. Without a softmax, attention of x with itself would be cubic in
    x, and 12 layers of that overflow; so keys and values are projected from inputs of their own
    and the step stays linear in x. Their gradients then branch off the chain instead of joining
    it, which leaves the skeleton more freedom than the model: it can only run faster.
    """

    def __init__(self, c: AlbertConfig, batch: int, seq: int, predictions: int, jit_compile: bool):
        self.config, self.batch, self.seq = c, batch, seq
        rng = tf.random.Generator.from_seed(0)
        h, e, tokens = c.hidden_size, c.embedding_size, batch * seq

        def weight(k, n, gain=1.0):
            return rng.normal((k, n)) * (gain / np.sqrt(k))

        # Gains that keep scores, context and every gradient at unit variance.
        self.layer_weights = {
            "query": weight(h, h),
            "key": weight(h, h, c.head_size**-0.5),
            "value": weight(h, h, seq**-0.5),
            "output": weight(h, h),
            "intermediate": weight(h, c.intermediate_size),
            "ffn_output": weight(c.intermediate_size, h),
        }
        self.head_weights = {
            "pooler": weight(h, h),
            "sentence_order": weight(h, 2),
            "mlm_dense": weight(h, e),
            "word_embeddings": weight(c.vocab_size, e, np.sqrt(c.vocab_size / e)),
        }
        if e != h:
            self.head_weights["projection"] = weight(e, h)
        self.inputs = {
            "embedded": rng.normal((tokens, e)),
            "keys_from": rng.normal((tokens, h)),
            "values_from": rng.normal((tokens, h)),
            "first_tokens": rng.normal((batch, h)),
            "masked_tokens": rng.normal((batch * predictions, h)),
        }
        self.output_gradients = [
            rng.normal((tokens, h)),
            rng.normal((batch, 2)),
            rng.normal((batch * predictions, c.vocab_size)),
        ]
        self.step = tf.function(self._step, jit_compile=jit_compile)

    def _heads(self, x):
        c = self.config
        return tf.reshape(x, (self.batch * c.num_attention_heads, self.seq, c.head_size))

    def _step(self):
        c = self.config
        layers = c.num_hidden_layers * c.inner_group_num
        with tf.GradientTape() as tape:
            # Handles per layer: each layer's gradients stay its own (no AddN).
            per_layer = (
                {
                    **self.layer_weights,
                    "keys_from": self.inputs["keys_from"],
                    "values_from": self.inputs["values_from"],
                }
                for _ in range(layers)
            )
            handles = [{k: tf.identity(w) for k, w in layer.items()} for layer in per_layer]
            heads, inputs = self.head_weights, self.inputs
            sources = [
                *heads.values(),
                inputs["embedded"],
                inputs["first_tokens"],
                inputs["masked_tokens"],
                *(w for layer in handles for w in layer.values()),
            ]
            tape.watch(sources)
            x = inputs["embedded"]
            if "projection" in heads:
                x = x @ heads["projection"]
            for w in handles:
                q = self._heads(x @ w["query"])
                k = self._heads(w["keys_from"] @ w["key"])
                v = self._heads(w["values_from"] @ w["value"])
                context = tf.matmul(tf.matmul(q, k, transpose_b=True), v)
                context = tf.reshape(context, (self.batch * self.seq, c.hidden_size))
                x = ((context @ w["output"]) @ w["intermediate"]) @ w["ffn_output"]
            sop_logits = (inputs["first_tokens"] @ heads["pooler"]) @ heads["sentence_order"]
            mlm = inputs["masked_tokens"] @ heads["mlm_dense"]
            mlm_logits = tf.matmul(mlm, heads["word_embeddings"], transpose_b=True)
        return tape.gradient(
            [x, sop_logits, mlm_logits], sources, output_gradients=self.output_gradients
        )

    def __call__(self) -> list:
        """One step; returns every gradient (so that no matmul is pruned)."""
        return self.step()
