"""Pretraining under tf.distribute on CPU: Mirrored (2 logical devices) and MultiWorker (2 processes)."""

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
        from albert_tf.training.pretraining import PretrainingOptions, run_pretraining
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


@pytest.mark.slow  # two worker processes, each starting TensorFlow and compiling
def test_multi_worker_processes_train_and_only_the_chief_writes(tmp_path):
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps(TINY))
    workers = [f"localhost:{port}" for port in _free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "pipelines/pretrain.py"),
                    "--strategy=multi_worker",
                    f"--input_file={RECORDS}",
                    f"--output_dir={tmp_path / 'run'}",
                    f"--albert_config_file={config}",
                    "--max_seq_length=128",
                    "--train_batch_size=16",
                    "--num_train_steps=4",
                    "--num_warmup_steps=1",
                    "--save_checkpoints_steps=2",
                    "--log_every_steps=1",
                    "--learning_rate=0.01",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, "TF_CONFIG": json.dumps(tf_config)},
            )
        )
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    for p, output in zip(processes, outputs):
        assert p.returncode == 0, output[-3000:]
        assert "strategy multi_worker (CollectiveAllReduceStrategy) with 2 replica(s)" in output
    # Only the chief wrote outputs; the other worker's scratch directory is gone.
    assert (tmp_path / "run" / "albert_pretrainer.keras").exists()
    assert sorted(
        p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if "ckpt-4" in p.name
    )
