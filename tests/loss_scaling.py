"""Forcing float16 gradients to overflow in a training test."""

import keras


def overflowing(create_optimizer, initial_scale: float = 2.0**40):
    """`create_optimizer` wrapped in a loss-scale optimizer starting at `initial_scale`, at which
    float16 gradients overflow: every update is skipped and halves the scale."""

    def create(*args, **kwargs):
        inner = create_optimizer(*args, **kwargs)
        return keras.optimizers.LossScaleOptimizer(inner, initial_scale=initial_scale)

    return create
