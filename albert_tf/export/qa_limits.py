"""The text-in QA model's request limit, stated without TensorFlow (the export CLI's `--help`
shows it before TensorFlow loads)."""

# A request's memory grows with its text: about 250 bytes per byte of context above the loaded
# model (benchmarks/qa_serving_memory.py), so a request at this limit stays near 1.3 GB. 5 MiB is
# more text than any Wikipedia article and most books hold.
DEFAULT_MAX_CONTEXT_BYTES = 5 * 2**20
