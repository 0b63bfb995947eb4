"""transformers' ALBERT checkpoint format: its key names, and its files in and out (no torch).

`hf_keys` maps each key that transformers writes for an ALBERT class to the original TF1 name of
the same tensor, which is what `albert_tf.checkpoints.tf1` calls our variables: a transformers
checkpoint goes through the one TF1 name table. transformers' Linear weights are [out, in] where
TF1 kernels are [in, out], so every `…/kernel` is transposed; embeddings, biases, LayerNorm
parameters and the heads' `output_weights` ([out, in] in both) are not.

`HfFolder` reads a folder as `save_pretrained` writes it: `config.json` and `model.safetensors`, or
shards listed by `model.safetensors.index.json`. Every bad input raises `HfFormatError`, one line
naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
from absl import logging
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from albert_tf.config import AlbertConfig
from albert_tf.io import atomic_path

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PYTORCH_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
SPM_FILE = "spiece.model"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TOKENIZER_JSON_FILE = "tokenizer.json"
# What transformers reads as a folder's tokenizer besides spiece.model.
TOKENIZER_FILES = (TOKENIZER_JSON_FILE, TOKENIZER_CONFIG_FILE, "special_tokens_map.json")
# The class transformers (4.x and 5.x) loads our `tokenizer.json` with as written; its
# `AlbertTokenizer` would put its own normaliser in place of ours.
TOKENIZER_CLASS = "PreTrainedTokenizerFast"
# What `save_pretrained` writes as the safetensors metadata.
METADATA = {"format": "pt"}
# Stored dtypes read (as float32); anything else is refused.
FLOAT_DTYPES = ("F32", "F16", "BF16")
# The MLM decoder is tied to these: transformers does not write it, and accepts it when present.
TIED_KEYS = {
    "predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
    "predictions.decoder.bias": "predictions.bias",
}


class HfFormatError(ValueError):
    """A transformers checkpoint folder that cannot be read or written: names file and key."""


@dataclasses.dataclass(frozen=True)
class HfKey:
    """One tensor of a transformers checkpoint.

    `tf1_name` is the original name of the same tensor, or None for the E->H projection that
    transformers always has and the original (and our model) lacks when E = H (the identity).
    `optional`: read when present, not written (the pooler and SOP head of a masked LM).
    """

    key: str
    tf1_name: str | None
    transpose: bool = False
    optional: bool = False


def _linear(key: str, tf1: str | None, optional: bool = False) -> list[HfKey]:
    return [
        HfKey(f"{key}.weight", tf1 and f"{tf1}/kernel", True, optional),
        HfKey(f"{key}.bias", tf1 and f"{tf1}/bias", False, optional),
    ]


def _norm(key: str, tf1: str) -> list[HfKey]:
    return [HfKey(f"{key}.weight", f"{tf1}/gamma"), HfKey(f"{key}.bias", f"{tf1}/beta")]


def _matrix(key: str, scope: str, optional: bool = False) -> list[HfKey]:
    # Heads whose original variable is already [out, in] (`output_weights`); scope "" is the
    # checkpoint's top level.
    tf1 = f"{scope}/" if scope else ""
    return [
        HfKey(f"{key}.weight", f"{tf1}output_weights", False, optional),
        HfKey(f"{key}.bias", f"{tf1}output_bias", False, optional),
    ]


def backbone_keys(config: AlbertConfig, prefix: str, pooler: str) -> list[HfKey]:
    """The encoder's keys under `prefix` ("albert." in every head model, "" in `AlbertModel`);
    `pooler` is "yes", "no" or "optional"."""
    keys = [
        HfKey(f"{prefix}embeddings.{table}.weight", f"bert/embeddings/{table}")
        for table in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    ]
    keys += _norm(f"{prefix}embeddings.LayerNorm", "bert/embeddings/LayerNorm")
    mapping = "bert/encoder/embedding_hidden_mapping_in"
    same_width = config.embedding_size == config.hidden_size
    keys += _linear(f"{prefix}encoder.embedding_hidden_mapping_in", None if same_width else mapping)
    for g in range(config.num_hidden_groups):
        for i in range(config.inner_group_num):
            key = f"{prefix}encoder.albert_layer_groups.{g}.albert_layers.{i}"
            tf1 = f"bert/encoder/transformer/group_{g}/inner_group_{i}"
            for part in ("query", "key", "value"):
                keys += _linear(f"{key}.attention.{part}", f"{tf1}/attention_1/self/{part}")
            keys += _linear(f"{key}.attention.dense", f"{tf1}/attention_1/output/dense")
            keys += _norm(f"{key}.attention.LayerNorm", f"{tf1}/LayerNorm")
            keys += _linear(f"{key}.ffn", f"{tf1}/ffn_1/intermediate/dense")
            keys += _linear(f"{key}.ffn_output", f"{tf1}/ffn_1/intermediate/output/dense")
            keys += _norm(f"{key}.full_layer_layer_norm", f"{tf1}/LayerNorm_1")
    if pooler != "no":
        keys += _linear(f"{prefix}pooler", "bert/pooler/dense", optional=pooler == "optional")
    return keys


def _mlm_keys() -> list[HfKey]:
    return [
        *_linear("predictions.dense", "cls/predictions/transform/dense"),
        *_norm("predictions.LayerNorm", "cls/predictions/transform/LayerNorm"),
        HfKey("predictions.bias", "cls/predictions/output_bias"),
    ]


# transformers class -> (key prefix of the encoder, its pooler, the head's keys).
ARCHITECTURES = {
    "AlbertModel": ("", "yes", lambda: []),
    "AlbertForPreTraining": (
        "albert.",
        "yes",
        lambda: [*_mlm_keys(), *_matrix("sop_classifier.classifier", "cls/seq_relationship")],
    ),
    # No pooler and no SOP head in transformers' masked LM; read when a file holds them.
    "AlbertForMaskedLM": (
        "albert.",
        "optional",
        lambda: [*_mlm_keys(), *_matrix("sop_classifier.classifier", "cls/seq_relationship", True)],
    ),
    "AlbertForSequenceClassification": ("albert.", "yes", lambda: _matrix("classifier", "")),
    # transformers builds its QA model without a pooler.
    "AlbertForQuestionAnswering": ("albert.", "no", lambda: _matrix("qa_outputs", "cls/squad")),
    "AlbertForMultipleChoice": ("albert.", "yes", lambda: _matrix("classifier", "")),
}


def hf_keys(
    config: AlbertConfig, architecture: str, stored: frozenset[str] = frozenset()
) -> list[HfKey]:
    """Every key transformers' `architecture` has for `config`, tied decoder keys left out.

    `stored`: the keys of a file being read. transformers reads a bare `AlbertModel` from a file
    whose keys carry the head models' "albert." prefix, and so does this.
    """
    prefix, pooler, head = ARCHITECTURES[architecture]
    if not prefix and "albert.embeddings.word_embeddings.weight" in stored:
        prefix = "albert."
    return backbone_keys(config, prefix, pooler) + head()


class HfFolder:
    """A transformers model folder: its `config.json` values and the table of its tensors.

    Args:
        directory: the folder `save_pretrained` wrote.

    Example:
        >>> folder = HfFolder("albert-base-v2")
        >>> folder.values["hidden_size"], folder.tensor("predictions.bias").shape
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)
        self.config_path = os.path.join(self.directory, CONFIG_FILE)
        if not os.path.isdir(self.directory):
            raise HfFormatError(f"{self.directory}: not a directory (a transformers model folder)")
        if not os.path.isfile(self.config_path):
            raise HfFormatError(
                f"{self.config_path}: not found; a transformers model folder holds {CONFIG_FILE} "
                f"and {WEIGHTS_FILE}"
            )
        try:
            with open(self.config_path, encoding="utf-8") as f:
                self.values = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise HfFormatError(f"{self.config_path}: not valid JSON ({e})") from None
        if not isinstance(self.values, dict):
            raise HfFormatError(f"{self.config_path}: not a JSON object")
        self.weights_path = os.path.join(self.directory, WEIGHTS_FILE)
        self.entries = self._table()  # key -> (file, dtype, shape)

    def _table(self) -> dict[str, tuple[str, str, tuple[int, ...]]]:
        index = os.path.join(self.directory, INDEX_FILE)
        if os.path.isfile(self.weights_path):
            return _header(self.weights_path)
        if os.path.isfile(index):
            self.weights_path = index
            return _sharded_table(index)
        for name in PYTORCH_FILES:
            if os.path.isfile(os.path.join(self.directory, name)):
                raise HfFormatError(
                    f"{os.path.join(self.directory, name)}: a PyTorch pickle, which needs torch "
                    f"to read; convert it to {WEIGHTS_FILE} first (transformers' "
                    "`save_pretrained` writes safetensors)"
                )
        raise HfFormatError(f"{self.weights_path}: not found (nor {INDEX_FILE})")

    def tensor(self, key: str) -> np.ndarray:
        """The stored tensor `key` as float32 (float16 and bfloat16 widen exactly)."""
        path, dtype, _ = self.entries[key]
        if dtype not in FLOAT_DTYPES:
            raise HfFormatError(f"{path}: {key}: dtype {dtype}, not one of {FLOAT_DTYPES}")
        try:
            with safe_open(path, framework="np") as f:
                return np.asarray(f.get_tensor(key)).astype(np.float32)
        except SafetensorError as e:
            raise HfFormatError(f"{path}: {key}: cannot be read ({e})") from None


def _header(path: str) -> dict[str, tuple[str, str, tuple[int, ...]]]:
    try:
        with safe_open(path, framework="np") as f:
            return {
                key: (path, f.get_slice(key).get_dtype(), tuple(f.get_slice(key).get_shape()))
                for key in f.keys()
            }
    except (SafetensorError, OSError) as e:
        raise HfFormatError(f"{path}: not a readable safetensors file ({e})") from None


def _sharded_table(index: str) -> dict[str, tuple[str, str, tuple[int, ...]]]:
    try:
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError(f"weight_map is a {type(weight_map).__name__}, not an object")
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise HfFormatError(f"{index}: not a safetensors index with a weight_map ({e})") from None
    directory, headers, table = os.path.dirname(index), {}, {}
    for key, shard in weight_map.items():
        path = os.path.join(directory, os.path.basename(str(shard)))
        if path not in headers:
            if not os.path.isfile(path):
                raise HfFormatError(f"{index}: {key}: its shard {shard} is not in the folder")
            headers[path] = _header(path)
        if key not in headers[path]:
            raise HfFormatError(f"{path}: {key}: not in the shard that {INDEX_FILE} names")
        table[key] = headers[path][key]
    return table


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    """`tensors` as one safetensors file with transformers' metadata, written atomically."""
    with atomic_path(path, suffix=".safetensors") as staging:
        save_file(
            {k: np.ascontiguousarray(v) for k, v in tensors.items()}, staging, metadata=METADATA
        )
        # safetensors creates the file owner-only; a model folder is for sharing, as umask says.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o666 & ~umask)


def is_hf_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder as transformers writes one (config.json and weights)."""
    weights = (CONFIG_FILE, WEIGHTS_FILE, INDEX_FILE, *PYTORCH_FILES)
    return (
        os.path.isdir(path)
        and os.path.isfile(os.path.join(path, CONFIG_FILE))
        and any(os.path.isfile(os.path.join(path, name)) for name in weights[1:])
    )


def tokenizer_config_values(do_lower_case: bool, model_max_length: int) -> dict:
    """`tokenizer_config.json` for the folder's `tokenizer.json` (`hf_tokenizer`), stating
    what our tokenizer (`albert_tf.text.tokenization`) does in `AlbertTokenizer`'s terms too:
    whitespace collapsed, accents stripped (NFKD, combining marks dropped), lowercased per
    `do_lower_case`; ALBERT's special pieces, and the input names our models take."""
    return {
        "tokenizer_class": TOKENIZER_CLASS,
        "do_lower_case": bool(do_lower_case),
        "remove_space": True,
        "keep_accents": False,
        "bos_token": "[CLS]",
        "eos_token": "[SEP]",
        "unk_token": "<unk>",
        "sep_token": "[SEP]",
        "pad_token": "<pad>",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        "model_max_length": int(model_max_length),
        # "[MASK]" in a text is text, as for the original's SentencePiece.
        "split_special_tokens": True,
    }


def tokenizer_difference(directory: str | os.PathLike) -> str | None:
    """How transformers would tokenize a folder's text other than ALBERT does (None: as ALBERT
    does, or no tokenizer there): its `tokenizer.json` is read, else it builds one from
    `spiece.model` with its own normaliser."""
    directory = os.fspath(directory)
    path = os.path.join(directory, TOKENIZER_JSON_FILE)
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                normalizer = json.load(f).get("normalizer") or {}
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
            raise HfFormatError(f"{path}: not a tokenizer.json ({e})") from None
        if normalizer.get("type") == "Precompiled":  # ours: preprocess_text in the map
            return None
        replaces_quotes = "``" in json.dumps(normalizer)
        return f"its {TOKENIZER_JSON_FILE} normalises text its own way" + (
            " (`` and '' become \")" if replaces_quotes else ""
        )
    if os.path.isfile(os.path.join(directory, SPM_FILE)):
        return (
            f"it has no {TOKENIZER_JSON_FILE}: transformers builds one from {SPM_FILE} that "
            "drops a lone \u2581 before punctuation and makes `` and '' into \""
        )
    return None


_WARNED_FOLDERS: set[str] = set()


def warn_if_tokenizer_differs(directory: str | os.PathLike | None) -> None:
    """One warning line (once per folder) when transformers would tokenize `directory`'s text
    other than ALBERT does, naming the choice: albert-tf always tokenizes as the original;
    `convert_checkpoint --output_hf` writes a tokenizer that does too, or with
    `--hf_tokenizer=folder` keeps the folder's own."""
    if not directory or os.fspath(directory) in _WARNED_FOLDERS:
        return
    difference = tokenizer_difference(directory)
    _WARNED_FOLDERS.add(os.fspath(directory))
    if difference:
        logging.warning(
            "%s: transformers tokenizes this folder unlike ALBERT: %s. albert-tf tokenizes as "
            "the original does; convert_checkpoint --output_hf writes a tokenizer.json that "
            "does the same, or keeps this folder's own with --hf_tokenizer=folder",
            directory,
            difference,
        )


def resolve_spm_model_file(spm_model_file: str | None, hf_directory: str | None) -> str | None:
    """`spm_model_file` if given, else the `spiece.model` of the transformers folder, if any."""
    if spm_model_file or not hf_directory:
        return spm_model_file
    path = os.path.join(os.fspath(hf_directory), SPM_FILE)
    return path if os.path.isfile(path) else None


def resolve_do_lower_case(do_lower_case: bool, hf_directory: str | None) -> bool:
    """The casing of a transformers folder's tokenizer (`do_lower_case` of its
    `tokenizer_config.json`) when it states one, else `do_lower_case`: the model's own casing
    wins, as the original's did for a TF-Hub module (its `tokenization_info`). A warning says
    when it overrides `do_lower_case`."""
    path = os.path.join(os.fspath(hf_directory), TOKENIZER_CONFIG_FILE) if hf_directory else ""
    if not path or not os.path.isfile(path):
        return do_lower_case
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HfFormatError(f"{path}: not valid JSON ({e})") from None
    stated = values.get("do_lower_case") if isinstance(values, dict) else None
    if stated is None:
        return do_lower_case
    if not isinstance(stated, bool):
        raise HfFormatError(f"{path}: do_lower_case: {stated!r} is not true or false")
    if stated != do_lower_case:
        logging.warning(
            "%s: do_lower_case=%s, the tokenizer's casing, is used (not do_lower_case=%s)",
            path,
            stated,
            do_lower_case,
        )
    return stated
