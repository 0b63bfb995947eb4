"""The paper-ablation study's settings and its runs: what is trained, on what, for how long.

One `StudySettings` holds every number of the study (they all go into the results JSON); the
runs (`study_runs`) are the paper's Table 5 rows (sentence task none / NSP / SOP), its Table 4
rows (SOP with sharing all / attention / FFN / none) and a random-init baseline, the headline
ones (SOP, NSP, random init) once per seed.
"""

from __future__ import annotations

import dataclasses
import pathlib

from data_prep import SAMPLE_CORPUS
from pipelines.demo_pipeline import SMALL_MODEL, TINY_MODEL

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
GLUE_DIR = REPO_ROOT / "benchmarks" / "data" / "glue"
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
GLUE_TASKS = ("sst-2", "mrpc", "rte", "cola")
# The dev metric each task is reported by (the GLUE paper's; MRPC's accuracy as ALBERT's tables).
TASK_METRIC = {"sst-2": "eval_accuracy", "mrpc": "eval_accuracy", "rte": "eval_accuracy",
               "cola": "matthew_corr"}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class FinetuneRecipe:
    """One GLUE task's fine-tuning: the release recipe's batch size and warmup share, with the
    steps scaled down to the sampled train set (about two epochs of it)."""

    train_step: int
    train_batch_size: int
    warmup_share: float  # of train_step, as the recipe's warmup_step / train_step

    @property
    def warmup_step(self) -> int:
        return max(1, round(self.train_step * self.warmup_share))


# run_glue.sh: SST-2 1256/20935 warmup at batch 32, MRPC and RTE 200/800 at 32, CoLA 320/5336 at
# 16. Steps: about 5 epochs of the sampled SST-2 (2000 rows), 6 of MRPC and RTE (1000), 2.4 of
# CoLA (2000): a model of this size trained from scratch on SST-2 only leaves the majority class
# after ~150 steps of 32 at 1e-4.
FINETUNE_RECIPES = {
    "sst-2": FinetuneRecipe(300, 32, 0.06),
    "mrpc": FinetuneRecipe(200, 32, 0.25),
    "rte": FinetuneRecipe(200, 32, 0.25),
    "cola": FinetuneRecipe(300, 16, 0.06),
}


@dataclasses.dataclass(frozen=True)
class StudySettings:
    """Every setting of the study; `tiny()` is a minutes-long variant that checks the script.

    Args:
      corpus_dirs: text folders; each has `train/` and `heldout/` (its held-out text), or else
        its last file by name is the held-out text.
      glue_dir: GLUE task folders (SST-2, MRPC, RTE, CoLA) with train.tsv and dev.tsv.
      work_dir: where data, runs and their stage markers go (a re-run reuses them).
      results_dir: where the JSON, the Markdown table and the plots are written.

    Example:
      settings = StudySettings(corpus_dirs=("../shared/data/corpus/gutenberg",))
    """

    corpus_dirs: tuple[str, ...] = (str(SAMPLE_CORPUS),)
    glue_dir: str = str(GLUE_DIR)
    work_dir: str = str(REPO_ROOT / "runs" / "paper_ablations")
    results_dir: str = str(RESULTS_DIR)
    max_train_text_mb: float = 24.0  # training text read, taken in turn from each corpus
    vocab_size: int = 8000
    vocab_sentences: int = 1_000_000
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    # All parameters shared (sharing "all"; the Table 4 runs override it), E = 128.
    model: dict = dataclasses.field(default_factory=lambda: dict(SMALL_MODEL, embedding_size=128))
    train_batch_size: int = 32
    num_train_steps: int = 1000
    num_warmup_steps: int = 100
    learning_rate: float = 0.005  # LAMB, as the demo
    log_every_steps: int = 50  # also the checkpoint interval: each curve point is that span's mean
    eval_batch_size: int = 32
    max_eval_steps: int = 50  # per held-out record set
    seeds: tuple[int, ...] = (1, 2)
    finetune: dict = dataclasses.field(default_factory=lambda: dict(FINETUNE_RECIPES))
    finetune_learning_rate: float = 1e-4  # AdamW, warmup then linear decay as the recipes
    finetune_max_seq_length: int = 128
    finetune_seed: int = 12345
    data_seed: int = 12345

    @classmethod
    def tiny(cls, work_dir: str, results_dir: str, **overrides) -> "StudySettings":
        """A tiny model, vocabulary and text, a few steps: the whole study in a few minutes."""
        values = dict(
            work_dir=work_dir,
            results_dir=results_dir,
            max_train_text_mb=0.3,
            vocab_size=400,
            max_seq_length=64,
            max_predictions_per_seq=10,
            model=dict(TINY_MODEL, max_position_embeddings=64),
            train_batch_size=8,
            num_train_steps=4,
            num_warmup_steps=1,
            log_every_steps=2,
            eval_batch_size=8,
            max_eval_steps=2,
            finetune={t: FinetuneRecipe(2, 8, 0.5) for t in GLUE_TASKS},
            finetune_max_seq_length=64,
        )
        return cls(**{**values, **overrides})

    def as_dict(self) -> dict:
        """Every setting, JSON-ready."""
        values = dataclasses.asdict(self)
        values["finetune"] = {
            task: {**dataclasses.asdict(recipe), "warmup_step": recipe.warmup_step}
            for task, recipe in self.finetune.items()
        }
        return values


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of the study: a pretraining (or the random init) and its fine-tunes.

    Args:
      group: the row it belongs to, shared by its seeds (e.g. "sop", "sop_share_ffn").
      sentence_task: "none", "nsp", "sop" or "random_init" (not pretrained).
      sharing: the model's cross-layer sharing (`AlbertConfig.sharing`).
      seed: of the initial weights and the order the records are read in.
    """

    group: str
    sentence_task: str
    sharing: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.group}-seed{self.seed}"

    @property
    def records(self) -> str:
        """The training records it reads: NSP ones for NSP, otherwise SOP ones."""
        return "nsp" if self.sentence_task == "nsp" else "sop"


def study_runs(seeds: tuple[int, ...]) -> list[RunSpec]:
    """Every run, in the order they are done: the headline comparisons first (random init, SOP
    and NSP with every seed), then the one-seed rows (none; SOP with other sharing)."""
    runs = [RunSpec("random_init", "random_init", "all", s) for s in seeds]
    for seed in seeds:
        runs += [RunSpec("sop", "sop", "all", seed), RunSpec("nsp", "nsp", "all", seed)]
    runs.append(RunSpec("none", "none", "all", seeds[0]))
    for sharing in ("attention", "ffn", "none"):
        runs.append(RunSpec(f"sop_share_{sharing}", "sop", sharing, seeds[0]))
    return runs


def select_runs(runs: list[RunSpec], selection: list[str] | None) -> list[RunSpec]:
    """The runs named in `selection` (run names like `sop-seed2` or groups like `sop`); all
    without one. Raises ValueError naming what matches nothing."""
    if not selection:
        return runs
    unknown = [s for s in selection if not any(s in (r.name, r.group) for r in runs)]
    if unknown:
        known = ", ".join(dict.fromkeys([r.group for r in runs] + [r.name for r in runs]))
        raise ValueError(f"--runs: no run or group {', '.join(unknown)} (known: {known})")
    return [r for r in runs if r.name in selection or r.group in selection]
