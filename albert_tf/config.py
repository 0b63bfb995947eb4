"""`AlbertConfig`: the one dataclass every model setting flows from.

Field names are those of the original `albert_config.json`, so released configs load unchanged.
Also the one rule for the default `max_predictions_per_seq`, shared by data prep, pretraining,
export and their CLIs (`resolve_max_predictions_per_seq`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from albert_tf.io import refuse_unknown_keys, write_json

SHARING_MODES = ("all", "attention", "ffn", "none")
# "gelu" is the original's: the tanh approximation (transformers calls it "gelu_new"). "gelu_erf"
# is the exact erf form, which transformers configs name plain "gelu"; the original has no such name.
ACTIVATIONS = ("gelu", "gelu_erf", "relu", "tanh", "linear")
# The sizes of the network, each a positive int; with `hidden_act` and `sharing` they decide what
# a model computes from its weights.
SIZE_FIELDS = (
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_hidden_groups",
    "num_attention_heads",
    "intermediate_size",
    "inner_group_num",
    "max_position_embeddings",
    "type_vocab_size",
)

# Keys a config may hold that `AlbertConfig` does not model, kept in `extra` as they are: those
# the original release's configs carry (its model code reads none of them either), the field the
# transformers conversion keeps its other `config.json` values under, and the fields of a
# transformers `config.json` itself, given as an ALBERT config (those its AlbertConfig adds to the
# model fields, and those of its base config that a saved or fine-tuned model's file carries).
ORIGINAL_KEPT_KEYS = (
    "down_scale_factor",
    "net_structure_type",
    "gap_size",
    "num_memory_blocks",
    "layers_to_keep",
)
HF_EXTRA = "huggingface"
TRANSFORMERS_KEPT_KEYS = (
    "architectures",
    "model_type",
    "transformers_version",
    "dtype",
    "torch_dtype",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "classifier_dropout_prob",
    "layer_norm_eps",
    "position_embedding_type",
    "tie_word_embeddings",
    "id2label",
    "label2id",
    "num_labels",
    "problem_type",
    "finetuning_task",
    "_name_or_path",
)
KEPT_KEYS = (*ORIGINAL_KEPT_KEYS, HF_EXTRA, *TRANSFORMERS_KEPT_KEYS)


@dataclasses.dataclass
class AlbertConfig:
    """Hyper-parameters of an ALBERT model.

    Defaults are the original class defaults (the xxlarge shape). `sharing` extends the original:
    `all` (original: every layer of a group shares attention and FFN), `attention` (only attention
    shared), `ffn` (only the FFN shared) or `none` — the ablations of the paper's Table 4. Shared
    parts follow the original routing (layer l uses group int(l * G / L), then its inner groups in
    order); unshared parts get one copy per (layer, inner group).
    """

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 4096
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    num_attention_heads: int = 64
    intermediate_size: int = 16384
    inner_group_num: int = 1
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    sharing: str = "all"
    # Keys of the json that this class does not model (`KEPT_KEYS`, e.g. `down_scale_factor`).
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the first inconsistent field."""
        for name in SIZE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"AlbertConfig.{name} must be a positive int, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads})"
            )
        if self.num_hidden_groups > self.num_hidden_layers:
            raise ValueError(
                f"num_hidden_groups ({self.num_hidden_groups}) exceeds num_hidden_layers "
                f"({self.num_hidden_layers}): some groups would never be used"
            )
        if self.sharing not in SHARING_MODES:
            raise ValueError(f"sharing must be one of {SHARING_MODES}, got {self.sharing!r}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"hidden_act must be one of {ACTIVATIONS} (the original's, and gelu_erf), got "
                f"{self.hidden_act!r}"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")

    @property
    def head_size(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads

    def group_of_layer(self, layer_index: int) -> int:
        """The original routing: `int(layer_idx / num_hidden_layers * num_hidden_groups)`."""
        return int(layer_index / self.num_hidden_layers * self.num_hidden_groups)

    # --- (de)serialisation -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "ALBERT config") -> "AlbertConfig":
        """Build from a dict with the original json's keys; the keys it does not model but the
        original or transformers configs carry (`KEPT_KEYS`) are kept in `extra`, any other key
        is a ValueError naming it and the nearest known key (`where` names the source)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        refuse_unknown_keys(values, known | set(KEPT_KEYS) | {"extra"}, where)
        kwargs = {k: v for k, v in values.items() if k in known}
        extra = dict(values.get("extra", {}))
        extra.update({k: v for k, v in values.items() if k not in known and k != "extra"})
        return cls(**kwargs, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The original json's keys (plus `sharing` when not the original `all`, plus extras)."""
        values = dataclasses.asdict(self)
        extra = values.pop("extra")
        if values["sharing"] == "all":
            del values["sharing"]  # keep the file byte-compatible with the original schema
        values.update(extra)
        return values

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "AlbertConfig":
        """Read an original `albert_config.json`."""
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"ALBERT config file not found: {path}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: not an ALBERT config (a JSON object)")
        try:
            return cls.from_dict(values, where=os.fspath(path))
        except (TypeError, ValueError) as e:
            message = str(e)
            raise ValueError(
                message if message.startswith(os.fspath(path)) else f"{path}: {message}"
            ) from None

    def to_json_file(self, path: str | os.PathLike) -> None:
        """Write an `albert_config.json` the original code can read."""
        write_json(path, self.to_dict())

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "AlbertConfig":
        """A named shape of `PRESETS`, with `overrides`: `tiny` (tests, smoke runs), `small` (the
        paper-ablation study; the bundled `pretrained/albert-small-en` is it at H=256), `smoke`
        (benchmarks' script checks), and the ALBERT v2 shapes `base`, `large`, `xlarge`, `xxlarge`
        (dropout 0, as the v2 release).

        xlarge uses 16 heads, as TF-Hub, Hugging Face and keras-hub do; the json inside the v2
        tarball reportedly says 32. Heads change no weight shape.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


_V2 = dict(
    vocab_size=30000,
    embedding_size=128,
    hidden_act="gelu",
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=512,
    type_vocab_size=2,
    initializer_range=0.02,
    num_hidden_groups=1,
    inner_group_num=1,
)
PRESETS: dict[str, dict[str, Any]] = {
    # The demo's quick run and the tests: 2 layers of width 32, the sample SentencePiece vocab.
    "tiny": dict(
        _V2,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    ),
    # The paper-ablation study's model: 4 layers of width 128 (E = H), an 8,000-piece vocab.
    "small": dict(
        _V2,
        vocab_size=8000,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=512,
        max_position_embeddings=128,
    ),
    # Benchmarks' quick runs that check a script, not a speed: 2 layers of width 64 with the
    # release's vocab, embedding width and positions.
    "smoke": dict(
        _V2, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
    ),
    "base": dict(
        _V2, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
    ),
    "large": dict(
        _V2, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    ),
    "xlarge": dict(
        _V2, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192
    ),
    "xxlarge": dict(
        _V2, hidden_size=4096, num_hidden_layers=12, num_attention_heads=64, intermediate_size=16384
    ),
}

# The help of every CLI's --preset (and of the fine-tuning settings' `preset`).
PRESET_HELP = (
    "A named model shape in place of --albert_config_file (AlbertConfig.from_preset; their sizes "
    "are in docs/model.md): tiny and small (this repository's test and bundled models), smoke "
    "(benchmarks' script checks), or the ALBERT v2 shapes. Not together with --albert_config_file."
)

# The fields a model shape is written out with where a dict of it is kept (settings, tests):
# the rest keep `AlbertConfig`'s defaults, which every preset shares.
PRESET_SHAPE_FIELDS = (
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
)


def preset_shape(name: str, *, vocab: bool = True, **overrides: Any) -> dict[str, Any]:
    """The `PRESET_SHAPE_FIELDS` of preset `name` as `AlbertConfig` keywords, then `overrides`.

    `vocab=False` leaves `vocab_size` out, for settings whose vocabulary is the SentencePiece
    model they train. `AlbertConfig(**preset_shape(name))` equals `from_preset(name)`.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {list(PRESETS)}")
    fields = PRESET_SHAPE_FIELDS if vocab else PRESET_SHAPE_FIELDS[1:]
    return {**{field: PRESETS[name][field] for field in fields}, **overrides}


def config_from_preset_or_file(
    preset: str | None, albert_config_file: str | None
) -> AlbertConfig | None:
    """The model config `preset` or `albert_config_file` names; None when neither is given.

    Both given is a ValueError in one line: a preset stands in for the file, not beside it.
    """
    check_preset_or_file(preset, albert_config_file)
    if preset:
        return AlbertConfig.from_preset(preset)
    return AlbertConfig.from_json_file(albert_config_file) if albert_config_file else None


def check_preset_or_file(preset: str | None, albert_config_file: str | None) -> None:
    """ValueError in one line when both are given, or `preset` is no name of `PRESETS`."""
    if preset and albert_config_file:
        raise ValueError(
            f"--preset={preset} and --albert_config_file={albert_config_file} both give the model "
            "config: give one of them"
        )
    if preset and preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {list(PRESETS)}")


def check_preset_vocab(
    preset: str | None, config: AlbertConfig, spm_model_file: str | None
) -> None:
    """ValueError in one line when `config` came from `preset` and its `vocab_size` is not the
    number of pieces of `spm_model_file` (a preset names one vocabulary size; the ids of another
    SentencePiece model would index embeddings that do not exist, or leave some untrained)."""
    if not preset or not spm_model_file or not os.path.isfile(spm_model_file):
        return  # a missing file is refused, naming it, where it is read
    import sentencepiece  # here: the config stays importable without it

    pieces = sentencepiece.SentencePieceProcessor(model_file=spm_model_file).get_piece_size()
    if pieces != config.vocab_size:
        raise ValueError(
            f"--preset={preset} has vocab_size {config.vocab_size} but --spm_model_file="
            f"{spm_model_file} has {pieces} pieces: give --albert_config_file with its vocab_size"
        )


# The original create_pretraining_data.py / run_pretraining.py default.
DEFAULT_MAX_PREDICTIONS_PER_SEQ = 20


def resolve_max_predictions_per_seq(
    max_predictions_per_seq: int | None, max_seq_length: int
) -> int:
    """`max_predictions_per_seq` as given, or when None: min(20, max_seq_length).

    A sequence has no more positions to mask than tokens, so the default follows a short
    `max_seq_length` down instead of making it an error. An explicit value is returned unchanged:
    whoever uses it checks it against `max_seq_length` (export requires it to fit).
    """
    if max_predictions_per_seq is not None:
        return max_predictions_per_seq
    return min(DEFAULT_MAX_PREDICTIONS_PER_SEQ, max_seq_length)
