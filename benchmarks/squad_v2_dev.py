"""The whole SQuAD v2.0 path on the complete official dev set, with a small model trained here.

    python benchmarks/squad_v2_dev.py [--dev_file dev-v2.0.json --train_articles 17 --train_step 600]

1. The all-null baseline on the full dev set through the official v2.0 metric: F1 must be exactly
   the share of unanswerable questions, 50.07 (5,945 of 11,873).
2. There is no SQuAD train set here, so a small ALBERT (trained from scratch, the 30k vocabulary)
   is fine-tuned with `pipelines/run_squad_v2.py` on the first `--train_articles` articles of the
   dev file (one answer kept per question, as the original's training reader requires), then
   predicts the FULL dev file: features -> model -> post-processing -> official metrics with the
   null-threshold search, as a user runs it. Reported: the run's `eval_results.json` (whole dev
   file, trained-on articles included) and the official metrics on the held-out articles alone,
   next to the all-null baseline on those.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

from albert_tf.tasks.squad import metrics  # noqa: E402
from benchmarks.machine import describe as describe_machine  # noqa: E402
from pipelines import demo_pipeline  # noqa: E402

# The demo's small model on the 30k vocab, at SQuAD's length.
SMALL_MODEL = dict(demo_pipeline.SMALL_MODEL, vocab_size=30000, max_position_embeddings=384)


def _questions(articles: list) -> list[str]:
    return [q["id"] for a in articles for p in a["paragraphs"] for q in p["qas"]]


def _training_file(articles: list, path: str) -> None:
    """The articles with one answer per answerable question (the first), as training needs."""
    kept = json.loads(json.dumps(articles))
    for article in kept:
        for paragraph in article["paragraphs"]:
            for question in paragraph["qas"]:
                question["answers"] = question["answers"][:1]
    pathlib.Path(path).write_text(json.dumps({"version": "v2.0", "data": kept}))


def _report(label: str, scores: dict) -> None:
    print(
        f"  {label:44s} exact {scores['exact']:6.2f}  f1 {scores['f1']:6.2f}  "
        f"HasAns f1 {scores.get('HasAns_f1', float('nan')):6.2f}  "
        f"NoAns f1 {scores.get('NoAns_f1', float('nan')):6.2f}  "
        f"best f1 {scores.get('best_f1', float('nan')):6.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--dev_file", default=str(REPO.parent / "shared" / "data" / "squad" / "dev-v2.0.json")
    )
    parser.add_argument(
        "--spm_model_file", default=str(REPO / "tests/fixtures/albert_spm/30k-clean.model")
    )
    parser.add_argument("--train_articles", type=int, default=17)
    parser.add_argument("--train_step", type=int, default=600)
    parser.add_argument("--train_batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=384)
    args = parser.parse_args()
    dataset = json.loads(pathlib.Path(args.dev_file).read_text())["data"]
    print(f"machine: {describe_machine()}")

    all_null = metrics.evaluate_v2(dataset, {q: "" for q in _questions(dataset)})
    print(f"{args.dev_file}: {all_null['total']} questions, {all_null['NoAns_total']} unanswerable")
    _report("all-null baseline, whole dev", all_null)
    if all_null["total"] == 11873:  # the official file
        assert round(all_null["f1"], 2) == 50.07 and all_null["NoAns_total"] == 5945

    with tempfile.TemporaryDirectory() as tmp:
        train_file = os.path.join(tmp, "train.json")
        _training_file(dataset[: args.train_articles], train_file)
        config_file = os.path.join(tmp, "albert_config.json")
        pathlib.Path(config_file).write_text(json.dumps(SMALL_MODEL))
        out = os.path.join(tmp, "out")
        cmd = [
            sys.executable,
            str(REPO / "pipelines" / "run_squad_v2.py"),
            f"--spm_model_file={args.spm_model_file}",
            f"--albert_config_file={config_file}",
            f"--train_file={train_file}",
            f"--predict_file={args.dev_file}",
            f"--output_dir={out}",
            "--do_train",
            "--do_predict",
            f"--max_seq_length={args.max_seq_length}",
            f"--train_batch_size={args.train_batch_size}",
            f"--train_step={args.train_step}",
            f"--warmup_step={args.train_step // 10}",
            f"--save_checkpoints_steps={args.train_step}",
            "--learning_rate=1e-3",
            "--predict_batch_size=64",
        ]
        started = time.monotonic()
        subprocess.run(cmd, check=True, cwd=REPO)
        seconds = time.monotonic() - started
        results = json.loads(pathlib.Path(out, "eval_results.json").read_text())
        predictions = json.loads(pathlib.Path(out, "predictions.json").read_text())
        null_odds = json.loads(pathlib.Path(out, "null_odds.json").read_text())

    trained_on = len(_questions(dataset[: args.train_articles]))
    held_out = dataset[args.train_articles :]
    print(
        f"small ALBERT {SMALL_MODEL}, from scratch, {args.train_step} steps of "
        f"{args.train_batch_size} on the first {args.train_articles} articles ({trained_on} "
        f"questions), then the whole dev file; {seconds / 60:.1f} min in all"
    )
    final = results.get("final", results)
    print("  eval_results.json (whole dev file, trained-on articles included):")
    print("   ", json.dumps(final, sort_keys=True)[:600])
    held_predictions = {q: predictions[q] for q in _questions(held_out)}
    held_odds = {q: null_odds[q] for q in _questions(held_out)}
    _report(
        f"held-out articles ({len(held_predictions)} questions)",
        metrics.evaluate_v2(held_out, held_predictions, held_odds),
    )
    _report(
        "all-null baseline, held-out articles",
        metrics.evaluate_v2(held_out, dict.fromkeys(held_predictions, "")),
    )


if __name__ == "__main__":
    main()
