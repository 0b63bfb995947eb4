"""GLUE: the original processors (TSV splits, label sets), classifier inputs, and metrics."""
