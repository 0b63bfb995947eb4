"""Exported TFLite files in the on-device clients against our Python path, side by side.

    python benchmarks/app_clients.py [--squad_file ../shared/data/squad/dev-v1.1.json]

Classifier: a tiny classifier (random weights, seeded) exported with metadata in every variant
without calibration; MediaPipe Tasks' `TextClassifier` and the Task Library's `BertNLClassifier`
(their virtualenvs in `.venv-clients/`) classify the probe texts; printed: the largest difference
from our probabilities (our tokenizer, the same file in LiteRT; fp32 also the Keras model) and the
label flips.

Question answering: no pretrained ALBERT is at hand, so a tiny SQuAD v1.1 model is fine-tuned from scratch for
`--train_steps` on the first half of the file's articles (seeded), then exported at 384 with its
metadata (fp32). On every question of the file:
- the client's answers (`tests/app_clients/run_client.py` in `.venv-clients/tflite-support`);
- the client's algorithm re-implemented (`benchmarks/bert_qa_client.py`, our tokenizer) on the
  same file: its answers must be the client's (counted);
- our Python path on the same file: windows of 384 every 128 pieces, 64-piece question, n-best
  20, answers of at most 30 pieces cut from the context's characters (`postprocess_v1`).
Prints how often the client's top answer is ours (exactly, and after SQuAD's answer
normalisation) and both EM/F1, over all questions and over the held-out half.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

import keras  # noqa: E402
import numpy as np  # noqa: E402
from ai_edge_litert.interpreter import Interpreter  # noqa: E402

from albert_tf import AlbertConfig  # noqa: E402
from albert_tf.config import preset_shape  # noqa: E402
from albert_tf.export import PROBE_TEXTS, ExportConfig, export_model, serving_head  # noqa: E402
from albert_tf.export.tflite.app_metadata import AppMetadataSettings  # noqa: E402
from benchmarks.bert_qa_client import client_answers, client_inputs  # noqa: E402
from albert_tf.modeling.heads.classifier import AlbertClassifier  # noqa: E402
from albert_tf.modeling.heads.squad_v1 import AlbertSquadV1  # noqa: E402
from albert_tf.tasks.squad.examples import read_squad_examples  # noqa: E402
from albert_tf.tasks.squad.features import convert_examples_to_features  # noqa: E402
from albert_tf.tasks.squad.metrics import evaluate_v1, normalize_answer  # noqa: E402
from albert_tf.tasks.squad.postprocess_v1 import postprocess_v1, raw_results_v1  # noqa: E402
from albert_tf.text.client_sentencepiece import CLIENT_PROBE_TEXTS  # noqa: E402
from albert_tf.text.tokenization import AlbertTokenizer  # noqa: E402
from benchmarks.machine import describe as describe_machine  # noqa: E402

SEQ, STRIDE, QUERY = 384, 128, 64
INPUTS = ("input_ids", "input_mask", "segment_ids")
# The smoke preset with a narrower embedding and the QA windows' positions.
TINY = preset_shape("smoke", embedding_size=32, max_position_embeddings=SEQ)


VARIANTS = ("tflite_fp32", "tflite_fp16", "tflite_int8_dynamic")


def run_client(python, client, model, **request):
    request = {"client": client, "model": model, **request}
    done = subprocess.run(
        [python, str(REPO / "tests/app_clients/run_client.py")],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)["results"]


def classifier_probes(tokenizer, spm_model_file, venvs, seed) -> None:
    """The classifier clients' probabilities on the probe texts against ours."""
    keras.utils.set_random_seed(seed)
    model = AlbertClassifier(AlbertConfig(**dict(TINY, max_position_embeddings=128)), 2)
    out = tempfile.mkdtemp(prefix="app_clients_classifier_")
    report = export_model(
        serving_head("classifier", model),
        ExportConfig(
            output_dir=out,
            model_name="classifier",
            max_seq_length=128,
            formats=VARIANTS,
            spm_model_file=spm_model_file,
            num_verification_examples=16,
            latency_runs=2,
            app_metadata=AppMetadataSettings(
                labels=("negative", "positive"), single_text_client=True
            ),
        ),
    )
    texts = [*CLIENT_PROBE_TEXTS, *[t for pair in PROBE_TEXTS for t in pair if t is not None]]
    packed = [tokenizer.encode_pair(t, None, 128) for t in texts]
    inputs = {k: np.array([getattr(p, k) for p in packed], np.int32) for k in INPUTS}
    keras_probabilities = model(inputs)["probabilities"].numpy()
    print(f"classifier: {len(texts)} probe texts")
    for variant in VARIANTS:
        path = report["artifacts"][variant]["path"]
        runner = Interpreter(model_path=path).get_signature_runner()
        rows = [runner(**{k: v[i : i + 1] for k, v in inputs.items()}) for i in range(len(texts))]
        ours = np.concatenate([r["probabilities"] for r in rows])
        for venv, client in venvs:
            got = np.array([r["scores"] for r in run_client(venv, client, path, texts=texts)])
            line = (
                f"  {variant} {client}: max |client - ours (same file)| "
                f"{np.abs(got - ours).max():.2g}, label flips {(got.argmax(1) != ours.argmax(1)).sum()}"
            )
            if variant == "tflite_fp32":
                line += f"; vs the Keras model {np.abs(got - keras_probabilities).max():.2g}"
            print(line)


def _stack(features, names):
    return {k: np.array([getattr(f, k) for f in features], np.int32) for k in names}


def train(articles, tokenizer, steps, seed):
    """A tiny SQuAD v1.1 model fine-tuned from scratch on `articles` (first gold answers)."""
    keras.utils.set_random_seed(seed)
    for article in articles:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"] = qa["answers"][:1]
    path = pathlib.Path(tempfile.mkdtemp(prefix="app_clients_train_")) / "train.json"
    path.write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
    examples = read_squad_examples(str(path), True)
    features = convert_examples_to_features(examples, tokenizer, SEQ, STRIDE, QUERY, True)
    inputs = _stack(features, (*INPUTS, "start_position", "end_position"))
    inputs["start_positions"] = inputs.pop("start_position")
    inputs["end_positions"] = inputs.pop("end_position")
    model = AlbertSquadV1(AlbertConfig(**TINY), seed=seed)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    batch = 32
    epochs = max(1, round(steps * batch / len(features)))
    model.fit(inputs, batch_size=batch, epochs=epochs, verbose=2)
    return model, epochs


def python_path(path, tokenizer, model_file):
    """Our answers with the exported file: `convert_examples_to_features` -> the file ->
    `postprocess_v1`."""
    examples = read_squad_examples(path, False)
    features = convert_examples_to_features(examples, tokenizer, SEQ, STRIDE, QUERY, False)
    runner = Interpreter(model_path=model_file, num_threads=2).get_signature_runner()
    inputs = _stack(features, INPUTS)
    outputs = [runner(**{k: v[i : i + 1] for k, v in inputs.items()}) for i in range(len(features))]
    starts = np.concatenate([o["start_logits"] for o in outputs])
    ends = np.concatenate([o["end_logits"] for o in outputs])
    results = raw_results_v1([f.unique_id for f in features], starts, ends)
    return postprocess_v1(examples, features, results, 20, 30).predictions, len(features)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--squad_file", default=str(REPO.parent / "shared" / "data" / "squad" / "dev-v1.1.json")
    )
    parser.add_argument(
        "--spm_model_file", default=str(REPO / "tests/fixtures/albert_spm/30k-clean.model")
    )
    parser.add_argument("--train_steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--clients_dir", default=str(REPO / ".venv-clients"))
    args = parser.parse_args()
    print(describe_machine())
    tokenizer = AlbertTokenizer(args.spm_model_file)
    mediapipe = f"{args.clients_dir}/mediapipe/bin/python"
    task_library = f"{args.clients_dir}/tflite-support/bin/python"
    venvs = [(mediapipe, "mediapipe_text_classifier"), (task_library, "bert_nl_classifier")]
    classifier_probes(tokenizer, args.spm_model_file, venvs, args.seed)
    dataset = json.loads(pathlib.Path(args.squad_file).read_text(encoding="utf-8"))["data"]
    half = len(dataset) // 2
    ids = [[q["id"] for p in a["paragraphs"] for q in p["qas"]] for a in dataset]
    train_ids = {i for article in ids[:half] for i in article}
    questions = [
        (q["id"], p["context"], q["question"])
        for a in dataset
        for p in a["paragraphs"]
        for q in p["qas"]
    ]
    start = time.perf_counter()
    model, epochs = train(
        json.loads(json.dumps(dataset[:half])), tokenizer, args.train_steps, args.seed
    )
    print(
        f"trained {epochs} epochs on {len(train_ids)} questions in {time.perf_counter() - start:.0f} s"
    )
    out = tempfile.mkdtemp(prefix="app_clients_squad_")
    report = export_model(
        serving_head("squad_v1", model),
        ExportConfig(
            output_dir=out,
            model_name="squad",
            max_seq_length=SEQ,
            formats=("tflite_fp32",),
            spm_model_file=args.spm_model_file,
            num_verification_examples=16,
            latency_runs=2,
        ),
    )
    model_file = report["artifacts"]["tflite_fp32"]["path"]
    start = time.perf_counter()
    pairs = [(c, q) for _, c, q in questions]
    client = run_client(task_library, "bert_question_answerer", model_file, questions=pairs)
    print(f"client: {len(client)} questions in {time.perf_counter() - start:.0f} s")
    runner = Interpreter(model_path=model_file, num_threads=2).get_signature_runner()
    same_lists = 0
    for (_, context, question), theirs in zip(questions, client):
        inputs = client_inputs(
            context, question, tokenizer.encode, tokenizer.cls_id, tokenizer.sep_id
        )
        outputs = runner(**inputs.features())
        ours = client_answers(inputs, outputs["start_logits"], outputs["end_logits"])
        same_lists += [(a.text, a.start, a.end) for a in ours] == [
            (a["text"], a["start"], a["end"]) for a in theirs
        ]
    print(
        f"client == re-implementation (all answers, text and positions): {same_lists} / {len(questions)}"
    )
    ours, num_features = python_path(args.squad_file, tokenizer, model_file)
    theirs = {
        i: (answers[0]["text"] if answers else "") for (i, _, _), answers in zip(questions, client)
    }
    for name, keep in (("all", lambda i: True), ("held-out half", lambda i: i not in train_ids)):
        kept = [i for i, _, _ in questions if keep(i)]
        exact = sum(theirs[i] == ours[i] for i in kept)
        normal = sum(normalize_answer(theirs[i]) == normalize_answer(ours[i]) for i in kept)
        articles = [a for a, a_ids in zip(dataset, ids) if any(keep(i) for i in a_ids)]
        scores = {
            who: evaluate_v1(articles, {i: p[i] for i in kept})
            for who, p in (("client", theirs), ("python", ours))
        }
        print(
            f"{name}: {len(kept)} questions; client's answer == ours {exact} "
            f"({100 * exact / len(kept):.1f}%), after normalisation {normal} "
            f"({100 * normal / len(kept):.1f}%); EM/F1 client "
            f"{scores['client']['exact_match']:.2f}/{scores['client']['f1']:.2f}, ours "
            f"{scores['python']['exact_match']:.2f}/{scores['python']['f1']:.2f}"
        )
    print(f"our path read {num_features} windows for {len(questions)} questions")


if __name__ == "__main__":
    main()
