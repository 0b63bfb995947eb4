"""The text-in question-answering graph: question and context strings in, the answer out, the
SQuAD features, scoring and answer rules computed inside the model (`text`), checked against the
Python path on every export (`verify`)."""
