"""Fine-tuning stage: the `run_classifier.py` loop, and scoring and choosing its checkpoints."""
