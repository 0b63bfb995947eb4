"""SQuAD v1.1 / v2.0: reading the official JSON, windowed features, post-processing, metrics."""
