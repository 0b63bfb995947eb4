"""Model shapes shared by the tests, each defined once (as `AlbertConfig` keyword dicts).

A shape's numbers are part of what its tests assert (losses after N steps, fine-tuned accuracy),
so a test that needs another shape derives it here with `dict(BASE, field=...)` rather than
editing one in place.
"""

from albert_tf.config import preset_shape

# The bundled sample SentencePiece model's 30k vocab under a 2-layer encoder: pretraining runs,
# distribution and bad-record tests on the sample records (seq 128). The `tiny` preset, 4 heads.
SAMPLE_VOCAB_TINY = preset_shape("tiny", num_attention_heads=4)

# The GLUE classifier tests' encoder: same vocab, 2 heads, sequences up to 64.
CLASSIFIER_TINY = dict(SAMPLE_VOCAB_TINY, num_attention_heads=2, max_position_embeddings=64)

# The smallest encoder that exercises every layer kind, for tests of structure and names.
MICRO = dict(
    vocab_size=50,
    embedding_size=8,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,
)

# MICRO with two groups, only attention shared: the unshared FFNs get per-layer (`layer_{l}`)
# names beside the shared (`group_{g}`) ones.
MICRO_PARTLY_SHARED = dict(MICRO, num_hidden_groups=2, sharing="attention")
