"""The original ALBERT optimizers (LAMB, AdamW) and learning-rate schedule on Keras 3.

Reimplements google-research/albert `optimization.py` + `lamb_optimizer.py` exactly:
beta_1 0.9, beta_2 0.999, epsilon 1e-6, **no bias correction**, weight decay 0.01 *added to the
update* (before the LAMB trust ratio), variables whose path matches `LayerNorm`, `layer_norm` or
`bias` get neither decay nor trust ratio, gradients clipped to global norm 1.0, and a linear warmup
followed by polynomial decay evaluated at the absolute step (so the LR jumps after warmup).

`keras.optimizers.Lamb` / `keras.optimizers.AdamW` are deliberately not used: they bias-correct the
moments, default to epsilon 1e-7, apply decoupled weight decay outside the trust ratio and know
no exclusions, so they cannot reproduce the original trajectories.

TensorFlow backend only (the project's backend): the global-norm clipping hooks into the TF
optimizer's cross-replica gradient sum.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import keras
import tensorflow as tf
from keras import ops

EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
_SERIALIZATION_PACKAGE = "albert_tf"


def variable_path(variable) -> str:
    """Returns the name used for exclusion matching: Keras `path`, else the TF name minus `:0`."""
    path = getattr(variable, "path", None)
    if path:
        return path
    return re.sub(r":\d+$", "", variable.name)


def uses_weight_decay(
    name: str, exclude_patterns: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY
) -> bool:
    """True if a variable with this name/path is decayed (and, for LAMB, trust-ratio scaled).

    Same rule as the original `_do_use_weight_decay`: any `re.search` hit excludes the variable.
    """
    return not any(re.search(pattern, name) for pattern in exclude_patterns)


def excluded_from_weight_decay(
    variables: Iterable, exclude_patterns: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY
) -> list[str]:
    """Paths of the variables that get no weight decay and no LAMB trust ratio."""
    return [
        variable_path(v)
        for v in variables
        if not uses_weight_decay(variable_path(v), exclude_patterns)
    ]


@keras.saving.register_keras_serializable(package=_SERIALIZATION_PACKAGE)
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """The original schedule: linear warmup, then `polynomial_decay` to 0 at the absolute step.

    lr(step) = init_lr * (step - start_warmup_step) / num_warmup_steps  while step - start < warmup,
    else     = init_lr * (1 - min(step, num_train_steps) / num_train_steps) ** poly_power.
    Because the decay ignores the warmup, the LR jumps from ~init_lr to
    init_lr * (1 - warmup/num_train_steps) right after warmup, as in the original.
    Deliberate difference: for step < start_warmup_step the original yields a *negative* LR
    (gradient ascent); here it is 0. Those steps never run in the original's use (resuming at
    `start_warmup_step`), so trajectories are unchanged.
    """

    def __init__(
        self,
        init_lr: float,
        num_train_steps: int,
        num_warmup_steps: int = 0,
        poly_power: float = 1.0,
        start_warmup_step: int = 0,
        name: str = "WarmupPolynomialDecay",
    ):
        super().__init__()
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be > 0, got {num_train_steps}")
        if num_warmup_steps < 0 or start_warmup_step < 0:
            raise ValueError(
                f"num_warmup_steps and start_warmup_step must be >= 0, got "
                f"{num_warmup_steps} and {start_warmup_step}"
            )
        self.init_lr = float(init_lr)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.poly_power = float(poly_power)
        self.start_warmup_step = int(start_warmup_step)
        self.name = name

    def __call__(self, step):
        # float32 throughout, in the original's operation order, so values agree to the last bit
        # of tf.compat.v1.train.polynomial_decay.
        step = ops.cast(step, "float32")
        decay_steps = ops.cast(self.num_train_steps, "float32")
        progress = ops.minimum(step, decay_steps) / decay_steps
        lr = self.init_lr * ops.power(1.0 - progress, self.poly_power)
        if self.num_warmup_steps:
            done = step - float(self.start_warmup_step)
            warmup_lr = self.init_lr * (ops.maximum(done, 0.0) / float(self.num_warmup_steps))
            lr = ops.where(done < float(self.num_warmup_steps), warmup_lr, lr)
        return lr

    def get_config(self):
        return {
            "init_lr": self.init_lr,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "poly_power": self.poly_power,
            "start_warmup_step": self.start_warmup_step,
            "name": self.name,
        }


@keras.saving.register_keras_serializable(package=_SERIALIZATION_PACKAGE)
class AdamWeightDecayOptimizer(keras.optimizers.Optimizer):
    """The original `AdamWeightDecayOptimizer` (Adam without bias correction, L2 term in the update).

    Per variable: m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2;  u = m / (sqrt(v) + eps)
    (+ weight_decay_rate * w unless excluded);  w <- w - lr * u.
    Gradients are first clipped to `clip_global_norm` over all variables *after* the
    cross-replica sum, i.e. exactly the single-device `tf.clip_by_global_norm` of the original.
    Slots are named `m` and `v`. Variables are matched against `exclude_from_weight_decay` by
    their Keras `path`, so layers must carry the original names (`LayerNorm`, `bias`, ...).
    """

    _layer_adaptation = False

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay_rate: float = 0.01,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY,
        clip_global_norm: float | None = 1.0,
        name: str | None = None,
        **kwargs,
    ):
        # The base class's decay/clipping act at the wrong place (decoupled decay; clipping each
        # replica's gradient before the all-reduce), so they must stay off.
        for key in ("weight_decay", "clipnorm", "clipvalue", "global_clipnorm"):
            if kwargs.get(key) is not None:
                raise ValueError(
                    f"{type(self).__name__} does not take `{key}`; use weight_decay_rate / "
                    f"clip_global_norm, which follow the original code."
                )
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.exclude_from_weight_decay_patterns = tuple(exclude_from_weight_decay)
        self.clip_global_norm = None if clip_global_norm is None else float(clip_global_norm)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])
        # Global norm of the last gradient before clipping, for training summaries.
        self.gradient_norm = self.add_variable(
            shape=(), initializer="zeros", name="gradient_norm", aggregation="only_first_replica"
        )
        # Decided once from the Keras path: inside distributed updates `update_step` only sees
        # the per-device tf.Variable, which has no path.
        self._decayed = [
            uses_weight_decay(variable_path(v), self.exclude_from_weight_decay_patterns)
            for v in var_list
        ]

    def _get_current_learning_rate(self):
        # Keras evaluates schedules at the micro-step counter; with gradient accumulation the
        # schedule must see the number of applied updates (`iterations`), as the original does.
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # Hook of the TF backend between the cross-replica sum and the per-variable updates:
        # clipping here sees the global gradient, as the original's single-device clip did.
        grads_and_vars = list(super()._all_reduce_sum_gradients(grads_and_vars))
        present = [i for i, (g, _) in enumerate(grads_and_vars) if g is not None]
        gradients = [grads_and_vars[i][0] for i in present]
        norm = tf.linalg.global_norm(gradients)
        self.gradient_norm.assign(tf.cast(norm, self.gradient_norm.dtype))
        if not self.clip_global_norm:
            return grads_and_vars
        clipped, _ = tf.clip_by_global_norm(gradients, self.clip_global_norm, use_norm=norm)
        for i, g in zip(present, clipped):
            grads_and_vars[i] = (g, grads_and_vars[i][1])
        return grads_and_vars

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        m, v = self._m[index], self._v[index]
        dtype = variable.dtype
        if isinstance(gradient, tf.IndexedSlices):
            # The original's dense moment updates also densify sparse (embedding) gradients.
            gradient = tf.convert_to_tensor(gradient)
        gradient = ops.cast(gradient, dtype)
        learning_rate = ops.cast(learning_rate, dtype)

        next_m = self.beta_1 * m + (1.0 - self.beta_1) * gradient
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient)
        update = next_m / (ops.sqrt(next_v) + self.epsilon)
        if self._decayed[index]:
            update = update + self.weight_decay_rate * variable
        ratio = 1.0
        if self._layer_adaptation and self._decayed[index]:
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            u_norm = ops.sqrt(ops.sum(ops.square(update)))
            safe_u_norm = ops.where(u_norm > 0.0, u_norm, 1.0)
            ratio = ops.where((w_norm > 0.0) & (u_norm > 0.0), w_norm / safe_u_norm, 1.0)
        self.assign(m, next_m)
        self.assign(v, next_v)
        self.assign_sub(variable, ratio * learning_rate * update)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "weight_decay_rate": self.weight_decay_rate,
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "exclude_from_weight_decay": list(self.exclude_from_weight_decay_patterns),
                "clip_global_norm": self.clip_global_norm,
            }
        )
        return config


@keras.saving.register_keras_serializable(package=_SERIALIZATION_PACKAGE)
class LAMBOptimizer(AdamWeightDecayOptimizer):
    """The original `LAMBOptimizer`: `AdamWeightDecayOptimizer` plus the layer-wise trust ratio.

    The update u (including the decay term) is scaled by r = ||w|| / ||u|| (whole-tensor L2
    norms) when both are > 0, else 1. Excluded variables (LayerNorm, biases) take the plain
    un-bias-corrected Adam step, as the original's default `exclude_from_layer_adaptation`.
    """

    _layer_adaptation = True


_OPTIMIZERS = {"lamb": LAMBOptimizer, "adamw": AdamWeightDecayOptimizer}


def create_optimizer(
    init_lr: float,
    num_train_steps: int,
    num_warmup_steps: int,
    optimizer: str = "lamb",
    poly_power: float = 1.0,
    start_warmup_step: int = 0,
    weight_decay_rate: float = 0.01,
    clip_global_norm: float | None = 1.0,
    gradient_accumulation_steps: int | None = None,
    name: str | None = None,
) -> AdamWeightDecayOptimizer:
    """Builds the optimizer + schedule that the original `optimization.create_optimizer` wires.

    `num_train_steps` and the warmup count optimizer updates; with `gradient_accumulation_steps`
    each update consumes that many micro-batches. For mixed precision wrap the result in
    `keras.optimizers.LossScaleOptimizer` (Keras does this itself for `mixed_float16` models).
    """
    if optimizer not in _OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(_OPTIMIZERS)}, got {optimizer!r}")
    schedule = WarmupPolynomialDecay(
        init_lr,
        num_train_steps,
        num_warmup_steps,
        poly_power=poly_power,
        start_warmup_step=start_warmup_step,
    )
    return _OPTIMIZERS[optimizer](
        learning_rate=schedule,
        weight_decay_rate=weight_decay_rate,
        clip_global_norm=clip_global_norm,
        gradient_accumulation_steps=gradient_accumulation_steps,
        name=name,
    )
