"""The text-in models' request limit, stated without TensorFlow (the export CLI's `--help` shows
it before TensorFlow loads)."""

# A request's memory grows with its text, above the loaded model: about 250 bytes per byte of
# context for the QA model, and 75-110 per byte for the other text models, which tokenize the whole
# text before cutting it to max_seq_length (benchmarks/qa_serving_memory.py,
# benchmarks/text_serving_memory.py). Measured at this limit: 1.4 GB (QA), 0.4 GB (a classifier's
# one text; 0.6 GB for a pair). 5 MiB is more text than any Wikipedia article and most books hold.
DEFAULT_MAX_TEXT_BYTES = 5 * 2**20
DEFAULT_MAX_CONTEXT_BYTES = DEFAULT_MAX_TEXT_BYTES  # the QA model's name for the same limit
