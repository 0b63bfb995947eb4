"""tf.distribute on CPU: pretraining on Mirrored (2 logical devices) and MultiWorker (2 processes),
SQuAD fine-tuning on MultiWorker against one device, and resuming on every worker."""

import json
import os
import pathlib
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from albert_tf.checkpoints import read_tf1_checkpoint
from tests.tolerances import TRAINING_STEPS, assert_close_to_scale
from tests.model_configs import SAMPLE_VOCAB_TINY

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECORDS = ROOT / "tests/fixtures/original_data/orig_small_seq128.tfrecord"
TINY = SAMPLE_VOCAB_TINY


def test_mirrored_over_two_devices_matches_one_device(tmp_path):
    # Logical devices must be configured before TF initialises them: a fresh process.
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from albert_tf import AlbertConfig
        from albert_tf.training.pretraining import run_pretraining
        from albert_tf.training.pretraining_options import PretrainingOptions
        strategies = {{"one_device": tf.distribute.OneDeviceStrategy("/cpu:0"),
                       "mirrored": tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])}}
        losses = {{}}
        for name, strategy in strategies.items():
            options = PretrainingOptions(
                input_file={str(RECORDS)!r}, output_dir={str(tmp_path)!r} + "/" + name,
                max_seq_length=128, train_batch_size=16, learning_rate=0.01, num_train_steps=6,
                num_warmup_steps=1, save_checkpoints_steps=6, log_every_steps=1, seed=7,
                jit_compile=False)
            tf.keras.utils.set_random_seed(1)
            results = run_pretraining(options, AlbertConfig(**{TINY!r}), strategy)
            losses[name] = [h["loss"] for h in results["train_history"]]
            assert strategy.num_replicas_in_sync == (2 if name == "mirrored" else 1)
        print("LOSSES", json.dumps(losses))
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    losses = json.loads(result.stdout.split("LOSSES", 1)[1])
    assert len(losses["one_device"]) == len(losses["mirrored"]) == 6
    # Same global batch and data, MLM normalised by the global weight sum: equal up to round-off.
    np.testing.assert_allclose(losses["mirrored"], losses["one_device"], rtol=1e-5)
    one = read_tf1_checkpoint(tmp_path / "one_device" / "tf1")
    mirrored = read_tf1_checkpoint(tmp_path / "mirrored" / "tf1")
    for name in one:
        assert_close_to_scale(mirrored[name], one[name], TRAINING_STEPS, err_msg=name)


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _run_two_workers(args, scratch, succeed=True):
    """Runs `args` (or one list of arguments per worker) as a two-worker cluster; returns the
    workers' outputs, asserting that both succeeded (or, with `succeed=False`, both failed)."""
    per_worker = args if isinstance(args, tuple) else (args, args)
    workers = [f"localhost:{port}" for port in _free_ports(2)]
    scratch.mkdir(exist_ok=True)
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = {
            **os.environ,
            "TF_CONFIG": json.dumps(tf_config),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TMPDIR": str(scratch),
        }
        processes.append(
            subprocess.Popen(
                per_worker[index],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
        )
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    for p, output in zip(processes, outputs):
        assert (p.returncode == 0) == succeed, output[-3000:]
        assert "strategy multi_worker (CollectiveAllReduceStrategy) with 2 replica(s)" in output
    return outputs


def _pretrain_on_two_workers(tmp_path, num_train_steps):
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps(TINY))
    args = [
        sys.executable,
        str(ROOT / "pipelines/pretrain.py"),
        "--strategy=multi_worker",
        f"--input_file={RECORDS}",
        f"--output_dir={tmp_path / 'run'}",
        f"--albert_config_file={config}",
        "--max_seq_length=128",
        "--train_batch_size=16",
        f"--num_train_steps={num_train_steps}",
        "--num_warmup_steps=1",
        "--save_checkpoints_steps=2",
        "--log_every_steps=1",
        "--learning_rate=0.01",
    ]
    return _run_two_workers(args, tmp_path / "scratch")


@pytest.mark.slow  # two worker processes, twice, each starting TensorFlow and compiling
def test_multi_worker_processes_train_only_the_chief_writes_and_all_resume(tmp_path):
    _pretrain_on_two_workers(tmp_path, num_train_steps=4)
    # Only the chief wrote outputs; the other worker's scratch directory is gone.
    assert (tmp_path / "run" / "albert_pretrainer.keras").exists()
    assert not any((tmp_path / "scratch").glob("albert_worker_*"))
    assert sorted(
        p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if "ckpt-4" in p.name
    )
    # Both workers resume from the chief's last checkpoint: neither starts again from scratch.
    for output in _pretrain_on_two_workers(tmp_path, num_train_steps=6):
        assert f"Resuming from {tmp_path / 'run' / 'checkpoints' / 'ckpt-4'} at step 4" in output


SQUAD = ROOT / "tests" / "fixtures" / "original_squad"


def _squad_v1_args(output_dir, *extra):
    return [
        sys.executable,
        str(ROOT / "pipelines" / "run_squad_v1.py"),
        f"--spm_model_file={ROOT / 'tests' / 'fixtures' / 'albert_spm' / '30k-clean.model'}",
        f"--albert_config_file={SQUAD / 'squad_v1_tiny' / 'albert_config.json'}",
        f"--init_checkpoint={SQUAD / 'squad_v1_tiny' / 'model.ckpt'}",
        f"--output_dir={output_dir}",
        f"--train_file={SQUAD / 'train-v2.0-small.json'}",
        # Only where it is read: an input of a phase that is off is refused.
        *(
            [f"--predict_file={SQUAD / 'postprocess_v1.1' / 'dev-v1.1-subset.json'}"]
            * ("--do_predict" in extra)
        ),
        "--max_seq_length=128",
        "--doc_stride=32",
        "--max_query_length=24",
        "--train_batch_size=4",
        "--train_step=4",
        "--save_checkpoints_steps=2",
        "--learning_rate=1e-3",
        "--keep_all_checkpoints",
        "--do_train",
        *extra,
    ]


@pytest.mark.slow  # five processes start TensorFlow: two workers twice, one device once
def test_squad_fine_tuning_on_two_workers_matches_one_device_and_resumes(tmp_path):
    scratch = tmp_path / "scratch"
    chief_log, other_log = _run_two_workers(
        _squad_v1_args(tmp_path / "workers", "--strategy=multi_worker", "--do_predict"), scratch
    )
    workers = tmp_path / "workers"
    # The chief scored both checkpoints and predicted; the other worker wrote nothing.
    history = json.loads((workers / "eval_results.json").read_text())["history"]
    assert [h["step"] for h in history] == [2, 4]
    assert len(json.loads((workers / "predictions.json").read_text())) == 55
    assert "Not the chief" in other_log and "Not the chief" not in chief_log
    assert not any(scratch.glob("albert_worker_*"))  # its scratch checkpoints removed

    one = tmp_path / "one_device"
    result = subprocess.run(
        _squad_v1_args(one, "--strategy=one_device"), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected = read_tf1_checkpoint(one / "model.ckpt-4")
    trained = read_tf1_checkpoint(workers / "model.ckpt-4")
    initial = read_tf1_checkpoint(SQUAD / "squad_v1_tiny" / "model.ckpt")
    # Same global batches, the loss averaged over the global batch: equal up to round-off.
    for name in expected:
        if "pooler" not in name:  # frozen in SQuAD fine-tuning, as the original
            assert not np.array_equal(trained[name], initial[name]), name
        assert_close_to_scale(trained[name], expected[name], TRAINING_STEPS, err_msg=name)

    # Killed after step 2: both workers resume from the chief's step-2 checkpoint and state.
    for stale in workers.glob("model.ckpt-4.*"):
        stale.unlink()
    chief_log, other_log = _run_two_workers(
        _squad_v1_args(workers, "--strategy=multi_worker"), scratch
    )
    for log in (chief_log, other_log):
        assert f"from {workers / 'model.ckpt-2'} (step 2)" in log
    resumed = read_tf1_checkpoint(workers / "model.ckpt-4")
    for name in expected:
        assert_close_to_scale(resumed[name], expected[name], TRAINING_STEPS, err_msg=name)

    # A worker that does not see the chief's output_dir would start again from step 0: both stop
    # with one line saying so, instead of training apart or waiting on each other forever.
    split = (
        _squad_v1_args(workers, "--strategy=multi_worker"),
        _squad_v1_args(tmp_path / "elsewhere", "--strategy=multi_worker"),
    )
    for log in _run_two_workers(split, scratch, succeed=False):
        assert "the workers disagree on the step to resume from" in log
