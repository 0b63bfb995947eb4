"""A `tokenizer.json` (the tokenizers library's format) that tokenizes as ALBERT does.

transformers builds an ALBERT tokenizer from `spiece.model` with its own normaliser (`` and ''
made into ", no whitespace collapse beyond spaces) and with every piece usable, so its ids differ
from the original's on ordinary text. The file written here carries instead:
- as normaliser, SentencePiece's compiled character map doing `preprocess_text` and the model's
  own normaliser in one pass (`albert_charsmap`, the map the phone clients' model carries);
- the Unigram pieces and scores of `spiece.model`, ids unchanged, with the pieces ending in
  "<digit>," made unreachable, so "1990," gives "▁1990" "," as the original's digit-comma rule does;
- `[CLS] A [SEP] B [SEP]` with B's segment 1, and ALBERT's special pieces, which are not looked
  for in the text (`split_special_tokens` in `tokenizer_config.json`), as SentencePiece never
  matches a control piece there.
It is written as JSON here rather than built with the tokenizers library, which the library does
not depend on; the transformers client tests load it with transformers itself.
"""

from __future__ import annotations

import base64

from sentencepiece import sentencepiece_model_pb2 as model_pb2

from albert_tf.text.client_sentencepiece import albert_charsmap
from albert_tf.text.tokenization import SPIECE_UNDERLINE, AlbertTokenizer

SPECIAL_PIECES = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")
# Far below any piece's score: a piece with it is chosen only where nothing else covers the text.
UNREACHABLE_SCORE = -1e9


def _piece(id_: int, content: str) -> dict:
    return {
        "id": id_,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def _metaspace() -> dict:
    return {"type": "Metaspace", "replacement": SPIECE_UNDERLINE, "prepend_scheme": "always",
            "split": True}  # fmt: skip


def tokenizer_json(tokenizer: AlbertTokenizer) -> dict:
    """The `tokenizer.json` content for `tokenizer` (its SentencePiece model and casing).

    Example:
        write_json("hub/tokenizer.json", tokenizer_json(AlbertTokenizer("spiece.model")))
    """
    model = model_pb2.ModelProto()
    model.ParseFromString(tokenizer.model_proto)
    # SentencePiece never matches control pieces ([CLS], <pad>), <unk> or unused pieces in text.
    never_in_text = (
        model_pb2.ModelProto.SentencePiece.CONTROL,
        model_pb2.ModelProto.SentencePiece.UNKNOWN,
        model_pb2.ModelProto.SentencePiece.UNUSED,
    )
    unreachable = set(tokenizer.digit_comma_rewrites())
    unreachable.update(i for i, p in enumerate(model.pieces) if p.type in never_in_text)
    vocab = [
        [p.piece, UNREACHABLE_SCORE if i in unreachable else float(p.score)]
        for i, p in enumerate(model.pieces)
    ]
    ids = {p.piece: i for i, p in enumerate(model.pieces)}
    missing = [name for name in SPECIAL_PIECES if name not in ids]
    if missing:
        raise ValueError(f"the SentencePiece model has no {', '.join(missing)} piece")
    charsmap = albert_charsmap(tokenizer.model_proto, lower=tokenizer.do_lower_case)
    cls, sep = ({"SpecialToken": {"id": name, "type_id": 0}} for name in ("[CLS]", "[SEP]"))
    sep_b = {"SpecialToken": {"id": "[SEP]", "type_id": 1}}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_piece(ids[name], name) for name in SPECIAL_PIECES],
        "normalizer": {
            "type": "Precompiled",
            "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii"),
        },
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [{"type": "WhitespaceSplit"}, _metaspace()],
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [cls, {"Sequence": {"id": "A", "type_id": 0}}, sep],
            "pair": [
                cls,
                {"Sequence": {"id": "A", "type_id": 0}},
                sep,
                {"Sequence": {"id": "B", "type_id": 1}},
                sep_b,
            ],
            "special_tokens": {
                name: {"id": name, "ids": [ids[name]], "tokens": [name]}
                for name in ("[CLS]", "[SEP]")
            },
        },
        "decoder": _metaspace(),
        "model": {
            "type": "Unigram",
            "unk_id": ids["<unk>"],
            "vocab": vocab,
            "byte_fallback": False,
        },
    }
