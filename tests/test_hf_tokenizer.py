"""The `tokenizer.json` of `--output_hf` folders, and Hub folders whose tokenizer differs from ours:
one warning line naming the difference and the choice, and `--hf_tokenizer=folder` keeping the
folder's own files. transformers itself reads the written files in test_transformers_client.py."""

import json
import shutil

import pytest
from absl import logging as absl_logging
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from albert_tf.checkpoints import hf_format
from albert_tf.checkpoints.hf import load_hf_model, save_hf_model
from albert_tf.checkpoints.hf_format import HfFormatError, tokenizer_difference
from albert_tf.checkpoints.hf_tokenizer import UNREACHABLE_SCORE, tokenizer_json
from albert_tf.text.tokenization import AlbertTokenizer
from tests.conftest import FIXTURES
from tests.test_convert_checkpoint_cli import run_cli as run_convert

SPM = FIXTURES / "albert_spm" / "30k-clean.model"
HF = FIXTURES / "hf_transformers"
# What transformers 5.x writes as an ALBERT folder's normaliser (abridged).
THEIR_TOKENIZER = {
    "normalizer": {
        "type": "Sequence",
        "normalizers": [
            {"type": "Replace", "pattern": {"String": "``"}, "content": '"'},
            {"type": "NFKD"},
        ],
    },
    "model": {"type": "Unigram", "vocab": []},
}


def test_tokenizer_json_keeps_ids_and_makes_what_albert_never_emits_unreachable():
    tokenizer = AlbertTokenizer(SPM)
    model = model_pb2.ModelProto()
    model.ParseFromString(tokenizer.model_proto)
    written = tokenizer_json(tokenizer)
    vocab = written["model"]["vocab"]
    assert [piece for piece, _ in vocab] == [p.piece for p in model.pieces]
    unreachable = {i for i, (_, score) in enumerate(vocab) if score == UNREACHABLE_SCORE}
    digit_comma = set(tokenizer.digit_comma_rewrites())
    assert digit_comma and digit_comma <= unreachable
    assert {0, 1, 2, 3, 4} <= unreachable  # <pad> <unk> [CLS] [SEP] [MASK]
    assert all(model.pieces[i].type != model.pieces[i].NORMAL for i in unreachable - digit_comma)
    others = [i for i in range(len(vocab)) if i not in unreachable]
    assert all(vocab[i][1] == pytest.approx(model.pieces[i].score) for i in others)
    assert {t["content"]: t["id"] for t in written["added_tokens"]} == {
        "<pad>": 0,
        "<unk>": 1,
        "[CLS]": 2,
        "[SEP]": 3,
        "[MASK]": 4,
    }
    assert written["model"]["unk_id"] == 1
    pair = written["post_processor"]["pair"]
    assert [next(iter(p.values()))["type_id"] for p in pair] == [0, 0, 0, 1, 1]
    assert written["normalizer"]["type"] == "Precompiled"
    # Casing lives in the character map: a cased tokenizer gets another one.
    cased = tokenizer_json(AlbertTokenizer(SPM, do_lower_case=False))
    assert cased["normalizer"] != written["normalizer"]


def test_a_folder_tokenizes_like_albert_only_with_our_tokenizer_json(tmp_path):
    model = load_hf_model(HF / "albert_tiny_classifier")
    ours = save_hf_model(model, tmp_path / "ours", spm_model_file=str(SPM))
    assert tokenizer_difference(ours) is None
    assert tokenizer_difference(HF / "albert_tiny_classifier") is None  # no tokenizer at all
    bare = tmp_path / "bare"
    shutil.copytree(ours, bare)
    (bare / "tokenizer.json").unlink()
    assert "transformers builds one from spiece.model" in tokenizer_difference(bare)
    (bare / "tokenizer.json").write_text(json.dumps(THEIR_TOKENIZER))
    assert "its own way (`` and '' become \")" in tokenizer_difference(bare)
    (bare / "tokenizer.json").write_text("{not json")
    with pytest.raises(HfFormatError, match=r"bare/tokenizer.json: not a tokenizer.json"):
        tokenizer_difference(bare)


def test_the_warning_is_one_line_once_per_folder(tmp_path, monkeypatch):
    folder = tmp_path / "hub"
    shutil.copytree(HF / "albert_tiny_classifier", folder)
    shutil.copyfile(SPM, folder / "spiece.model")
    warnings = []
    monkeypatch.setattr(absl_logging, "warning", lambda *args: warnings.append(args[0] % args[1:]))
    monkeypatch.setattr(hf_format, "_WARNED_FOLDERS", set())
    hf_format.warn_if_tokenizer_differs(str(folder))
    hf_format.warn_if_tokenizer_differs(str(folder))
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "transformers tokenizes this folder unlike ALBERT" in warnings[0]
    assert "--hf_tokenizer=folder" in warnings[0]


@pytest.mark.e2e
def test_convert_keeps_the_folders_tokenizer_or_writes_ours(tmp_path):
    hub = tmp_path / "hub"
    shutil.copytree(HF / "albert_tiny_classifier", hub)
    shutil.copyfile(SPM, hub / "spiece.model")
    (hub / "tokenizer.json").write_text(json.dumps(THEIR_TOKENIZER))
    (hub / "special_tokens_map.json").write_text('{"mask_token": "[MASK]"}')
    kept = tmp_path / "kept"
    result = run_convert(f"--hf_model={hub}", f"--output_hf={kept}", "--hf_tokenizer=folder")
    assert result.returncode == 0, result.stderr[-2000:]
    for name in ("spiece.model", "tokenizer.json", "special_tokens_map.json"):
        assert (kept / name).read_bytes() == (hub / name).read_bytes()
    assert "unlike ALBERT" not in result.stderr
    rewritten = tmp_path / "ours"
    result = run_convert(f"--hf_model={hub}", f"--output_hf={rewritten}")
    assert result.returncode == 0, result.stderr[-2000:]
    (line,) = [x for x in result.stderr.splitlines() if "unlike ALBERT" in x]
    assert str(hub) in line and "`` and '' become" in line
    assert tokenizer_difference(rewritten) is None
    result = run_convert(f"--keras_model={tmp_path}/x.keras", f"--output_hf={tmp_path / 'y'}",
                         "--hf_tokenizer=folder")  # fmt: skip
    assert result.returncode != 0
    assert "--hf_tokenizer=folder goes with --hf_model and --output_hf" in result.stderr
