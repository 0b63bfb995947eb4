"""The fine-tuning CLIs' one main: a task's settings dataclass, its task class and recipes, run
on the fine-tuning loop, with the original scripts' flags (`run_classifier.py`,
`run_squad_v1.py`, `run_squad_v2.py`, `run_race.py`).

A CLI states what differs (`FinetuneCli`) and calls `main`:

    CLI = FinetuneCli(RaceConfig, RaceFinetuneTask, RECIPES, ...)
    if __name__ == "__main__":
        main(CLI)

Every CLI gets the task's settings as flags (`_config_flags`), `--do_train` / `--do_eval` /
`--do_predict` as the task has them, `--recipe` (explicit flags win), the original TPU flags,
`--strategy` and `--mixed_precision`, the original `--vocab_file` (unused: SentencePiece) and
`--albert_hub_module_handle` (refused: TF1 hub.Module), and `_cli.run_task`'s one-line errors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from absl import app, flags, logging

from pipelines import _cli

# Every fine-tuning CLI runs TensorFlow, and imports its task (which loads it) after this module:
# loaded here first, without its start-up noise.
_cli.import_tensorflow_quietly()

from albert_tf.finetuning import loop  # noqa: E402
from albert_tf.finetuning.settings import model_config  # noqa: E402
from albert_tf.finetuning.task import Task  # noqa: E402
from pipelines import _config_flags, _distribution_flags  # noqa: E402

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class FinetuneCli:
    """What one fine-tuning CLI is made of.

    Args:
      config_class: the task's settings dataclass; each setting is a flag.
      task: the task's class, `task(config, **task_options)` (a `finetuning.task.Task`).
      recipes: {recipe name: {flag: value}} for `--recipe`.
      phases: {flag: (default, help)} of the job's phases, in `run`'s argument order.
      required: flags without which the job cannot start.
      given: fields of `config_class` this CLI sets itself (SQuAD's `version`).
      skip: settings this CLI has no flag for (those of another version).
      ignored: original flags accepted without effect (logged when given).
      after_recipe: adjusts the flags once the recipe is applied, before the config is built.
      recipe_help: the help of `--recipe`.
      recipe_case_sensitive: whether `--recipe` names are matched case-sensitively.
      phase_inputs: {input flag: the phase flag without which nothing reads it}: such an input
        given while its phase is off is refused, rather than left unused unseen.
      task_options: keyword arguments of `task` besides the config (SQuAD's `write_text_model`).
      run: runs the job, `run(task, *phases, strategy=...)`: the fine-tuning loop, unless the
        task has more to do around it (SQuAD's feature caches).

    Example:
      FinetuneCli(RaceConfig, RaceFinetuneTask, RECIPES,
                  {"do_train": (True, "Fine-tune.")}, required=("data_dir",))
    """

    config_class: type
    task: Callable[..., Task]
    recipes: Mapping[str, Mapping[str, object]]
    phases: Mapping[str, tuple[bool, str]]
    required: tuple[str, ...] = ()
    given: Mapping[str, object] = dataclasses.field(default_factory=dict)
    skip: tuple[str, ...] = ()
    ignored: tuple[str, ...] = _distribution_flags.IGNORED_ORIGINAL_FLAGS
    after_recipe: Callable[[flags.FlagValues], None] | None = None
    recipe_help: str = "Apply the original release's recipe; flags given explicitly win."
    recipe_case_sensitive: bool = True
    phase_inputs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    task_options: Mapping[str, object] = dataclasses.field(default_factory=dict)
    run: Callable[..., dict] = loop.run


def define_flags(cli: FinetuneCli) -> None:
    """Defines every flag of `cli` (before absl parses the command line)."""
    _config_flags.define_flags(cli.config_class, skip=cli.skip)
    for name, (default, help_text) in cli.phases.items():
        flags.DEFINE_bool(name, default, help_text)
    flags.DEFINE_string("vocab_file", None, "Accepted for compatibility; unused (SentencePiece).")
    flags.DEFINE_string(
        "albert_hub_module_handle",
        None,
        "Not supported (TF1 hub.Module); accepted empty, as run_glue.sh passes it. Use "
        "--init_checkpoint, or --hf_model for a Hugging Face Hub model.",
    )
    flags.DEFINE_enum(
        "recipe",
        None,
        sorted(cli.recipes),
        cli.recipe_help,
        case_sensitive=cli.recipe_case_sensitive,
    )
    _distribution_flags.define_tpu_and_distribution_flags()
    flags.mark_flags_as_required(list(cli.required))


def _check_flags(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.albert_hub_module_handle:
        raise app.UsageError(
            "--albert_hub_module_handle (TF1 hub.Module) is not supported; pass the "
            "checkpoint as --init_checkpoint"
        )


def fitted_max_seq_length(config, recipe: str | None, given: bool) -> int | None:
    """The --max_seq_length to use in place of `config.max_seq_length`, or None to keep it.

    A recipe's length (`recipe` set and the flag not `given`) is a default for the release's
    512-position models: on a model with fewer positions it is lowered to them, with one info
    line. A length `given` on the command line is kept, so one the model cannot take is a
    ValueError naming it (and the recipe). Without either, the job's own check names the
    default. The model's config is read here only where there is such a length to check.
    """
    if recipe is None and not given:
        return None
    positions = model_config(config).max_position_embeddings
    if config.max_seq_length <= positions:
        return None
    if not given:
        logging.info(
            "--recipe=%s sets --max_seq_length=%d, more than the model's "
            "max_position_embeddings=%d: using --max_seq_length=%d",
            recipe,
            config.max_seq_length,
            positions,
            positions,
        )
        return positions
    with_recipe = f" (given with --recipe={recipe}, whose own length is fitted)" if recipe else ""
    raise ValueError(
        f"--max_seq_length={config.max_seq_length} exceeds the model's max_position_embeddings="
        f"{positions}{with_recipe}: give --max_seq_length={positions} or less"
    )


def main_for(cli: FinetuneCli) -> Callable[[list[str]], None]:
    """The CLI's main(argv)."""

    def main(argv: list[str]) -> None:
        if FLAGS.recipe is not None:
            _config_flags.apply_recipe(cli.recipes[FLAGS.recipe])
        if cli.after_recipe is not None:
            cli.after_recipe(FLAGS)
        _check_flags(argv)
        _check_phase_inputs(cli.phase_inputs)
        _distribution_flags.note_ignored_flags(cli.ignored)
        config = _config_flags.config_from_flags(cli.config_class, **cli.given)
        given = FLAGS["max_seq_length"].present
        if fitted := fitted_max_seq_length(config, FLAGS.recipe, given):
            FLAGS.max_seq_length = fitted
            config = _config_flags.config_from_flags(cli.config_class, **cli.given)
        _config_flags.check_output_paths(config)
        logging.info("Fine-tuning config: %s", config)
        summary = cli.run(
            cli.task(config, **cli.task_options),
            *(FLAGS[phase].value for phase in cli.phases),
            strategy=_distribution_flags.strategy_from_flags(),
        )
        if "eval" in summary:
            for which in ("final", "best"):
                entry = summary["eval"][which]
                logging.info("%s checkpoint (step %d): %s", which, entry["step"], entry["metrics"])
            if summary["eval"].get("baseline"):
                logging.info(
                    "a model that learnt nothing: %s (compare before trusting the scores above)",
                    summary["eval"]["baseline"],
                )

    return main


def _check_phase_inputs(phase_inputs: Mapping[str, str]) -> None:
    """UsageError for an input flag given on the command line while the phase that reads it is
    off (a recipe's values do not count: a recipe serves every phase)."""
    for name, phase in phase_inputs.items():
        if FLAGS[name].present and FLAGS[name].value and not FLAGS[phase].value:
            raise app.UsageError(
                f"--{name} is set but --{phase} is not: add --{phase} to use it, or drop --{name}"
            )


def main(cli: FinetuneCli) -> None:
    """Defines the CLI's flags and runs it (`_cli.run_task`)."""
    define_flags(cli)
    _cli.run_task(main_for(cli), tensorflow=True)
