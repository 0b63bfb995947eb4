"""Truncating a segment pair to a length budget: the original's two rules, side by side.

Fine-tuning (`run_classifier.py`, SQuAD's question + context aside) drops tokens from the end of
the longer segment, deterministically, in place. Pretraining data (`create_pretraining_data.py`)
drops them from the front or the back of the longer segment at random, so a model never learns
that segment ends are intact; it returns truncated copies, drawing the front/back split in one
step because sentences of thousands of tokens are common in raw corpora.
"""

from __future__ import annotations

import random


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """Fine-tuning's rule, in place: pop from the end of the longer list (B on ties) until the total
    fits, as the original `run_classifier.py`."""
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def truncate_seq_pair_randomly(
    tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random
) -> tuple[list[int], list[int]]:
    """Pretraining data's rule, as the original `create_pretraining_data.py` in distribution:
    while too long, drop the first or (p=0.5) the last token of the longer segment (B on ties).
    Returns truncated copies.

    Which segment loses each token does not depend on the coin flips, only the front/back choices
    do; so a segment that loses k tokens loses Binomial(k, 1/2) of them at the front. That is drawn
    as the popcount of k random bits: two draws instead of one per token (a 5,000-token sentence
    is common).
    """
    len_a, len_b = len(tokens_a), len(tokens_b)
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return list(tokens_a), list(tokens_b)
    cut_a = min(excess, len_a - len_b) if len_a > len_b else 0
    cut_b = min(excess, len_b - len_a) if len_b > len_a else 0
    rest = excess - cut_a - cut_b  # lengths are now equal: B, A, B, ... lose one token each
    cut_b += (rest + 1) // 2
    cut_a += rest // 2
    front_a = rng.getrandbits(cut_a).bit_count() if cut_a else 0
    front_b = rng.getrandbits(cut_b).bit_count() if cut_b else 0
    return (
        tokens_a[front_a : len_a - (cut_a - front_a)],
        tokens_b[front_b : len_b - (cut_b - front_b)],
    )
