"""The paper-ablation study behind `benchmarks/paper_ablations.py`."""
