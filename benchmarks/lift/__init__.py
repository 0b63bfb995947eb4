"""The pretraining-lift study: `benchmarks/pretraining_lift.py`."""
