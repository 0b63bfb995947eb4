"""A fine-tuning run that ends before its first checkpoint leaves a new output directory as it
found it.

A run writes `albert_config.json`, `logs/`, `train_state/settings.json` and the tasks' feature
caches into `output_dir` before its first `model.ckpt-<step>`. When the directory was new to the
run (absent, or empty) and the run fails or is stopped before that checkpoint (any exception,
`KeyboardInterrupt` and the CLIs' `Interrupted` included, or the job is dropped), nothing there
can be resumed and all of it is the run's: it is removed, and the directory with it when the
run's lock created it (`albert_tf.output_dirs.lock_output_dir`). Once a checkpoint is saved
everything stays (the same command resumes from it); a directory that held anything before the
run is never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

from absl import logging

from albert_tf import stopping
from albert_tf.finetuning.selection import list_checkpoints


def is_new(directory: str) -> bool:
    """Whether `directory` is a local path that is absent or an empty directory: whatever is in
    it after a run is then the run's."""
    if not directory or "://" in directory:
        return False
    try:
        with os.scandir(directory) as entries:
            return next(entries, None) is None
    except FileNotFoundError:
        return True
    except OSError:  # a file, or unreadable: not ours to empty
        return False


@contextlib.contextmanager
def emptied_unless_checkpointed(
    directory: str, writes: bool = True, created: bool = False
) -> Iterator[None]:
    """Runs the block; when `directory` is new at its start (`is_new`) and the block raises
    before a `model.ckpt-<step>` is in `directory`, removes everything in it, notes that on the
    error and raises it again. Enter it holding the job's lock on `directory` (which may have
    created it, and then removes it once emptied), before the job writes there; `writes=False`
    (a worker that is not the chief) does nothing. The same when the job is dropped
    (`stopping.on_drop`), which ends the process without the lock's release: the directory is
    then removed too if `created` (absent before the job).

    Example:
        created = not os.path.lexists(config.output_dir)
        with claim_output_dir(config.output_dir):
            with emptied_unless_checkpointed(config.output_dir, created=created):
                ...  # train
    """
    if not (writes and is_new(directory)):
        yield
        return

    def undo_dropped() -> str | None:
        note = _remove_unless_checkpointed(directory)
        if created:
            # Only if emptied. The process ends next, and its lock with it: no later step of
            # this job can touch a directory another job makes here meanwhile.
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        return note

    forget_on_drop = stopping.on_drop(undo_dropped)
    try:
        yield
    except BaseException as error:
        if note := _remove_unless_checkpointed(directory):
            error.add_note(note)
        raise
    finally:
        forget_on_drop()


def _remove_unless_checkpointed(directory: str) -> str | None:
    """Removes what is in `directory` unless it holds a checkpoint; what it did, or None when it
    removed nothing."""
    if list_checkpoints(directory):
        return None
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    removed = 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
            removed += 1
        except FileNotFoundError:
            continue
        except OSError as error:  # the job's own error is the one to report: say this and go on
            logging.warning("cannot remove %s, written by the stopped run: %s", path, error)
    if not removed:
        return None
    return f"removed what it wrote in the new {directory}: it had saved no checkpoint"
