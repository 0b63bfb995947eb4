"""Downstream tasks: their data readers, model inputs and metrics."""
