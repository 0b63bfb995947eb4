"""Runs one on-device client on a `.tflite` file, as an app would: the client's own Python package
in its own virtualenv, nothing of this repository imported.

    <venv>/bin/python tests/app_clients/run_client.py < request.json > answers.json

Request: {"client": "mediapipe_text_classifier" | "bert_nl_classifier" | "bert_question_answerer"
| "tflite_support_metadata", "model": path, "texts": [...]} (classifiers) or "questions":
[[context, question], ...] (QA). Answers: {"results": ...}: per text the score and the name of
each category, in index order; per question the answers as the client orders them ({"text",
"start", "end", "logit"}); for the metadata, what tflite-support's own parser reads. The
classifiers also report "seconds": their time classifying the texts, model loading aside.
"""

import json
import sys
import time

# Seconds the classifiers spent classifying (model loading aside), reported as "seconds".
TIMINGS = {}


def mediapipe_text_classifier(model, texts):
    from mediapipe.tasks.python.core.base_options import BaseOptions
    from mediapipe.tasks.python.text import text_classifier

    options = text_classifier.TextClassifierOptions(
        base_options=BaseOptions(model_asset_path=model)
    )
    with text_classifier.TextClassifier.create_from_options(options) as classifier:
        start = time.perf_counter()
        results = [classifier.classify(t).classifications[0].categories for t in texts]
        TIMINGS["seconds"] = time.perf_counter() - start
    return [_categories({c.index: c for c in categories}) for categories in results]


def bert_nl_classifier(model, texts):
    from tflite_support.task import text

    classifier = text.BertNLClassifier.create_from_file(model)
    start = time.perf_counter()
    results = [classifier.classify(t).classifications[0].categories for t in texts]
    TIMINGS["seconds"] = time.perf_counter() - start
    # Its Python binding leaves every index 0; the categories come in index order.
    return [_categories(dict(enumerate(categories))) for categories in results]


def _categories(by_index):
    ordered = [by_index[i] for i in range(len(by_index))]
    return {"scores": [c.score for c in ordered], "names": [c.category_name for c in ordered]}


def bert_question_answerer(model, questions):
    from tflite_support.task import text

    answerer = text.BertQuestionAnswerer.create_from_file(model)
    results = []
    for context, question in questions:
        answers = answerer.answer(context, question).answers
        results.append(
            [
                {"text": a.text, "start": a.pos.start, "end": a.pos.end, "logit": a.pos.logit}
                for a in answers
            ]
        )
    return results


def tflite_support_metadata(model, _):
    from tensorflow_lite_support.metadata.cc.python import _pywrap_metadata_version
    from tflite_support import metadata

    displayer = metadata.MetadataDisplayer.with_model_file(model)
    return {
        "json": json.loads(displayer.get_metadata_json()),
        "files": sorted(displayer.get_packed_associated_file_list()),
        "min_parser_version": _pywrap_metadata_version.GetMinimumMetadataParserVersion(
            displayer.get_metadata_buffer()
        ),
    }


def main():
    request = json.load(sys.stdin)
    run = {
        "mediapipe_text_classifier": mediapipe_text_classifier,
        "bert_nl_classifier": bert_nl_classifier,
        "bert_question_answerer": bert_question_answerer,
        "tflite_support_metadata": tflite_support_metadata,
    }[request["client"]]
    inputs = request.get("texts", request.get("questions"))
    json.dump({"results": run(request["model"], inputs), **TIMINGS}, sys.stdout)


if __name__ == "__main__":
    main()
