"""A SentencePiece model that gives ALBERT's ids through on-device clients' own preprocessing.

MediaPipe Tasks' `TextClassifier` and the TFLite Task Library's `BertNLClassifier` and
`BertQuestionAnswerer` tokenize on the device: they lowercase ASCII letters and hand the text to
the SentencePiece library with the model packed in the `.tflite` file. ALBERT's `preprocess_text`
(whitespace collapse, NFKD, combining marks dropped, full Unicode lowercasing) and the original's
digit-comma rule happen nowhere in that path, so with the training `.model` `café` becomes
`▁ca f <unk>` and `1990,` one piece where ALBERT has two.

`client_sentencepiece_model` moves both into the model itself, keeping every piece, id and score:
- its normaliser (a SentencePiece character map) does `preprocess_text` and then the model's own
  normaliser (`nmt_nfkc` for the released models) in one pass: each code point maps to what the two
  make of it, and each multi-character rule of the model's own map that composes across code
  points (Hangul jamo, a few Indic vowel signs) maps to what the two make of the sequence;
- pieces ending in "<digit>," are marked unused, so SentencePiece segments "1990," as "▁1990" ","
  as the digit-comma rule does, instead of emitting the piece.

Measured with the released `30k-clean.model`: through `client_ids` the same ids as
`AlbertTokenizer` on the 420 golden cases, every context and question of SQuAD dev-v1.1 and
dev-v2.0 and every GLUE dev text, but one v2.0 question ("11,003": the original keeps "▁11," and
splits it, SentencePiece without that piece prefers "▁1" "1,0" "03"). Context-dependent rules
cannot live in a character map: Python lowercases a final capital sigma to "ς" (both unknown
pieces in the released vocabulary), and the digit-comma rule puts a "▁" before a re-encoded piece
that had none (no such piece in the released vocabulary). `tokenization_mismatches` checks texts
before a model is shipped with it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from albert_tf.text.tokenization import AlbertTokenizer, preprocess_text

CLIENT_NORMALIZER_NAME = "albert_preprocess_text"
# Texts every client-bound export is checked on: what the clients' path changes (capitals beyond
# ASCII, accents, fullwidth letters, digit-commas, curly quotes, ligatures, odd whitespace, a
# final sigma, Hangul jamo), besides the export's own probes.
CLIENT_PROBE_TEXTS = (
    "The Quick Brown Fox Jumps Over The Lazy Dog.",
    "CAFÉ AU LAIT, Naïve Résumé — Déjà Vu À Ŝtrasse ÆØÅ İstanbul",
    "ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ ａｎｄ ｄｉｇｉｔｓ １２３，４５６",
    "In 1990, 2001, and 2019, prices rose 3.5% to $1,000,000; 10,000 species, 7,5 km.",
    "\u201cCurly quotes\u201d and \u2018single ones\u2019 \u2014 «guillemets» ‚low‛ „double‟",
    "ﬁne ﬂour, ½ cup, ™ and ℃, Ⅻ o'clock, ㍿, ｶﾀｶﾅ",
    "  tabs\tand\u3000ideographic\u00a0spaces\u2028and\u200bzero\ufeffwidths  ",
    "ΟΔΟΣ ΚΑΙ ΣΟΦΙΑ ὈΔΥΣΣΕΎΣ",
    "한국어 \u1112\u1161\u11ab\u1100\u116e\u11a8 Ελληνικά Русский 東京は日本の首都です。",
    "word " * 600,
)


def ascii_lower(text: str) -> str:
    """ASCII letters lowercased, every other character kept: what the clients do first."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _albert_preprocess_chars(text: str, lower: bool) -> str:
    """`preprocess_text(text, lower)` code point by code point, a whitespace character becoming
    one space (SentencePiece collapses runs of spaces and strips them itself)."""
    return "".join(" " if c.isspace() else preprocess_text(c, lower) for c in text)


def _character_map(model_proto: bytes, lower: bool) -> list[tuple[str, str]]:
    """(source, target) rules doing `preprocess_text` and then the model's own normaliser."""
    own = spm.SentencePieceNormalizer(model_proto=model_proto)  # the character map alone
    chars = [chr(cp) for cp in range(1, 0x110000) if not 0xD800 <= cp <= 0xDFFF]
    targets = own.Normalize([_albert_preprocess_chars(c, lower) for c in chars])
    rules = {c: t for c, t in zip(chars, targets) if t != c}
    sequences = [source for source, _ in own.Decompile() if len(source) > 1]
    composed = own.Normalize([_albert_preprocess_chars(s, lower) for s in sequences])
    for source, target in zip(sequences, composed):
        if target != "".join(rules.get(c, c) for c in source):
            rules[source] = target
    return sorted(rules.items())


@functools.lru_cache(maxsize=8)
def albert_charsmap(model_proto: bytes, lower: bool = True) -> bytes:
    """SentencePiece's compiled character map (`precompiled_charsmap`) doing `preprocess_text`
    (lowercasing per `lower`) and then the model's own normaliser, code point by code point."""
    compiled = model_pb2.NormalizerSpec()
    compiled.ParseFromString(
        spm.SentencePieceNormalizer(
            norm_map=_character_map(model_proto, lower)
        ).serialized_normalizer_spec()
    )
    return compiled.precompiled_charsmap


@functools.lru_cache(maxsize=4)
def client_sentencepiece_model(model_proto: bytes) -> bytes:
    """The serialized client-compatible copy of a SentencePiece model (see the module docstring).

    Example:
        client = client_sentencepiece_model(AlbertTokenizer(path).model_proto)
    """
    model = model_pb2.ModelProto()
    model.ParseFromString(model_proto)
    spec = model.normalizer_spec
    spec.name = CLIENT_NORMALIZER_NAME
    spec.precompiled_charsmap = albert_charsmap(model_proto, lower=True)  # the clients lowercase
    spec.ClearField("normalization_rule_tsv")
    for piece_id in AlbertTokenizer.from_proto(model_proto).digit_comma_rewrites():
        model.pieces[piece_id].type = model_pb2.ModelProto.SentencePiece.UNUSED
    return model.SerializeToString()


class ClientTokenizer:
    """The clients' text -> ids, re-implemented: ASCII lowercase, SentencePiece pieces, each
    piece's id (an unknown piece's surface is looked up, giving the unknown id).

    Args:
        model_proto: the serialized SentencePiece model the clients get.

    Example:
        ids = ClientTokenizer(client_sentencepiece_model(proto)).encode("Café")
    """

    def __init__(self, model_proto: bytes):
        self.model_proto = bytes(model_proto)
        self.processor = spm.SentencePieceProcessor(model_proto=self.model_proto)

    def pieces(self, text: str) -> list[str]:
        """SentencePiece's pieces of the ASCII-lowercased text."""
        return self.processor.encode(ascii_lower(text), out_type=str)

    def encode(self, text: str) -> list[int]:
        """Ids of `pieces(text)`, looked up by piece as the clients do."""
        return [self.processor.piece_to_id(p) for p in self.pieces(text)]

    def encode_words(self, text: str) -> list[int]:
        """`BertQuestionAnswerer`'s context ids: each space-separated word encoded on its own."""
        return [i for word in text.split(" ") if word for i in self.encode(word)]


def tokenization_mismatches(
    tokenizer: AlbertTokenizer, client: ClientTokenizer, texts: Iterable[str], by_word=False
) -> list[str]:
    """One line per text whose client ids differ from `tokenizer.encode` (`by_word`: as the QA
    client encodes contexts), naming the text and the first differing pieces."""
    lines = []
    for text in dict.fromkeys(texts):
        ours = tokenizer.encode(text)
        theirs = client.encode_words(text) if by_word else client.encode(text)
        if ours == theirs:
            continue
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        at = min(len(ours), len(theirs)) if at is None else at
        window = slice(max(0, at - 2), at + 3)
        lines.append(
            f"{text[:60]!r}: ours {tokenizer.convert_ids_to_tokens(ours[window])}, the "
            f"clients' {tokenizer.convert_ids_to_tokens(theirs[window])} (piece {at})"
        )
    return lines


def comma_number_mismatches(tokenizer: AlbertTokenizer, client: ClientTokenizer) -> list[str]:
    """The numbers 1,000 to 999,999 written with commas ("11,045") that the clients tokenize
    otherwise than `tokenizer`: the digit-comma rule re-encodes a piece the SentencePiece pass
    chose with all pieces, which one pass without the "<digit>," pieces cannot always reproduce
    (a tie, or another split of the digits). Lowercasing and `preprocess_text` leave these texts
    as they are, so SentencePiece's own pass is compared first and only the numbers where it
    differs from the clients' go through the rule."""
    numbers = [f"{n:,}" for n in range(1000, 1_000_000)]
    first_pass = tokenizer.sp_model.encode(numbers)
    theirs = client.processor.encode(numbers)
    return [
        text
        for text, ours, got in zip(numbers, first_pass, theirs)
        if ours != got and tokenizer.encode(text) != got
    ]
