"""Reads an `--output_hf` folder with transformers, as its users do: `AutoTokenizer` and
`pipeline`, in transformers' own virtualenv (with torch), nothing of this repository imported.

    <venv>/bin/python tests/app_clients/run_transformers.py < request.json > answers.json

Request: {"folder": path, "texts": [[text_a, text_b or null], ...], "use_fast": [true, false],
"max_length": int or null (no truncation), "pipeline": bool}. Answers: {"version": transformers' version, "ids":
{"fast"|"slow": [[input_ids, token_type_ids], ...]}, "tokenizer_class": {...}, and with
"pipeline" "predictions": [{"label", "score"}, ...] of `pipeline("text-classification")`}.
"""

import json
import sys


def main():
    request = json.load(sys.stdin)
    import transformers
    from transformers import AutoTokenizer, pipeline

    transformers.logging.set_verbosity_error()
    folder, texts, max_length = request["folder"], request["texts"], request["max_length"]
    answers = {"version": transformers.__version__, "ids": {}, "tokenizer_class": {}}
    for use_fast in request.get("use_fast", [True]):
        name = "fast" if use_fast else "slow"
        tokenizer = AutoTokenizer.from_pretrained(folder, use_fast=use_fast)
        answers["tokenizer_class"][name] = type(tokenizer).__name__
        limits = {"truncation": True, "max_length": max_length} if max_length else {}
        encoded = [tokenizer(a, b, **limits) for a, b in texts]
        answers["ids"][name] = [[e["input_ids"], e["token_type_ids"]] for e in encoded]
    if request.get("pipeline"):
        classify = pipeline("text-classification", model=folder, device="cpu")
        inputs = [a if b is None else {"text": a, "text_pair": b} for a, b in texts]
        answers["predictions"] = [
            {"label": r["label"], "score": r["score"]}
            for r in classify(inputs, truncation=True, max_length=max_length, batch_size=16)
        ]
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()
