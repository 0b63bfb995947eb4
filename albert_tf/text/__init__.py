"""Text stage: the SentencePiece tokenizer in Python (TensorFlow-free) and its in-graph twin."""
