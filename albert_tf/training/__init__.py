"""Training stage: LAMB/AdamW, strategies, TFRecord input and its checks, pretraining runs."""
