"""The text-in QA SavedModel against the Python path on the complete official SQuAD dev sets.

    python benchmarks/qa_text_dev.py [--dev_dir /work/shared/data/squad --pairs v1:dev-v1.1.json,...]

For each (head, dev file) pair, the original code's tiny fine-tuned checkpoint of that head
(tests/fixtures/original_squad) is exported as the text-in model (the tests' windows: sequence
128, stride 32, query 24), reloaded, and asked every question of the file, 32 per request; its
answers, n-best lists, scores, probabilities and null odds are compared with the Python path's
(`read_squad_examples` -> features -> the Keras model -> `postprocess_v1/v2`) by
`qa.verify.answer_differences`, which lets only float32 near-ties go either way. Printed: the
number of questions, of differences (each listed), and the time of each path.
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from albert_tf.export.qa.text import QaSettings, QaTextModel, save_qa_text_model  # noqa: E402
from albert_tf.export.qa.verify import verify_qa_text_model  # noqa: E402
from albert_tf.export.heads.loading import load_serving_head  # noqa: E402
from albert_tf.text.tf_tokenization import AlbertPreprocessingLayer  # noqa: E402
from albert_tf.text.tokenization import AlbertTokenizer  # noqa: E402
from benchmarks.machine import describe as describe_machine  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
HEADS = {"v1": "squad_v1", "v2": "squad_v2"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dev_dir", default=str(REPO.parent / "shared" / "data" / "squad"))
    parser.add_argument("--pairs", default="v1:dev-v1.1.json,v2:dev-v2.0.json")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--doc_stride", type=int, default=32)
    parser.add_argument("--max_query_length", type=int, default=24)
    args = parser.parse_args()
    spm = FIXTURES / "albert_spm" / "30k-clean.model"
    tokenizer = AlbertTokenizer(spm)
    preprocessing = AlbertPreprocessingLayer(
        tokenizer.model_proto, max_seq_length=args.max_seq_length
    )
    print(f"machine: {describe_machine()}")
    total = 0
    for pair in args.pairs.split(","):
        version, name = pair.split(":")
        kind = HEADS[version]
        folder = FIXTURES / "original_squad" / f"{kind}_tiny"
        head = load_serving_head(
            kind, tf1_checkpoint=str(folder), albert_config_file=str(folder / "albert_config.json")
        )
        settings = QaSettings(
            args.doc_stride,
            args.max_query_length,
            verification_file=os.path.join(args.dev_dir, name),
        )
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "text")
            save_qa_text_model(
                QaTextModel(head, preprocessing, settings), path, {"spm_model_file": str(spm)}
            )
            started = time.monotonic()
            result = verify_qa_text_model(path, head, tokenizer, args.max_seq_length, settings)
            seconds = time.monotonic() - started
        failures = result["failures"]
        total += len(failures)
        print(
            f"{kind} on {name}: {result['figures']['num_questions']} questions (with the "
            f"built-in probes), {len(failures)} differences from the Python path; both paths "
            f"{seconds / 60:.1f} min"
        )
        for failure in failures:
            print(f"  {failure}")
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
