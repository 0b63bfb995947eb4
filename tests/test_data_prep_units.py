"""The unit-of-work contract (`data_prep.units`): a pool's records depend only on the seed and the
pool's documents, whichever process, runner or order of pools produced them."""

import dataclasses
import hashlib
import os
import pathlib
import pickle
import subprocess
import sys

import pytest

from data_prep import corpus, instances, local_runner, units
from data_prep.stats import Stats

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
SPM = str(FIXTURES / "albert_spm" / "30k-clean.model")
CORPUS = str(FIXTURES / "original_data" / "corpus_small.txt")
REPO = pathlib.Path(__file__).resolve().parents[1]


def _config(**overrides):
    base = dict(
        input_file=CORPUS,
        output_file="unused.tfrecord",
        spm_model_file=SPM,
        dupe_factor=2,
        pair=instances.PairConfig(max_seq_length=128),
        masking=instances.MaskingConfig(max_predictions_per_seq=20),
        batch_chars=32 * 1024,
    )
    base.update(overrides)
    return units.DataPrepConfig(**base)


@pytest.fixture(scope="module")
def pools():
    config = _config()
    return list(units.read_pools(corpus.expand_inputs(CORPUS), config, corpus.SkipLog()))


@pytest.fixture(scope="module")
def processor():
    return units.PoolProcessor(_config(), encode_threads=1)


def _process(processor, pool):
    stats = Stats()
    return list(processor.instance_records(pool, stats)), stats


def test_pools_are_keyed_consecutive_documents(pools):
    assert len(pools) > 5 and [p.key for p in pools] == [(0, k) for k in range(len(pools))]
    indices = [i for p in pools for i, _ in p.documents]
    assert indices == [(0, k) for k in range(len(indices))]
    assert hash(pools[0]) == hash(dataclasses.replace(pools[0]))  # frozen, hashable: a keyed unit


def test_a_pool_gives_the_same_records_alone_or_after_other_pools(pools, processor):
    target = pools[3]
    alone, alone_stats = _process(units.PoolProcessor(_config(), encode_threads=1), target)
    for pool in pools[:3] + pools[4:6]:
        _process(processor, pool)
    after_others, after_stats = _process(processor, target)
    assert alone and alone == after_others and alone_stats == after_stats
    # The key orders pools; it does not seed anything.
    assert _process(processor, dataclasses.replace(target, key=99))[0] == alone


def test_a_pool_gives_the_same_records_in_another_process(tmp_path, pools, processor):
    target = pools[2]
    (tmp_path / "pool.pkl").write_bytes(pickle.dumps((_config(), target)))
    code = (
        "import hashlib, pickle, sys\n"
        "from data_prep import units\n"
        "from data_prep.stats import Stats\n"
        "config, pool = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "records = units.PoolProcessor(config, encode_threads=2).instance_records(pool, Stats())\n"
        "print(hashlib.sha256(b''.join(records)).hexdigest())\n"
        "print(any(m.startswith(('tensorflow', 'keras')) for m in sys.modules))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="4321", PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "pool.pkl")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    digest, tensorflow_loaded = result.stdout.split()
    assert digest == hashlib.sha256(b"".join(_process(processor, target)[0])).hexdigest()
    assert tensorflow_loaded == "False"


def test_only_the_seed_and_the_pools_own_documents_determine_its_records(pools, processor):
    target, neighbour = pools[3], pools[4]
    reference = _process(processor, target)[0]
    # Another pool changing (fewer documents, other text) leaves this pool's records alone.
    index, sentences = neighbour.documents[0]
    changed = dataclasses.replace(
        neighbour, documents=((index, ("Other text.", "Quite different.")),)
    )
    _process(processor, changed)
    assert _process(processor, target)[0] == reference
    # Its own documents, their global indices, or the seed change them.
    first_dropped = dataclasses.replace(target, documents=target.documents[1:])
    assert _process(processor, first_dropped)[0] != reference
    shifted = dataclasses.replace(
        target, documents=tuple(((f, i + 1000), s) for (f, i), s in target.documents)
    )
    assert _process(processor, shifted)[0] != reference
    other_seed = units.PoolProcessor(_config(random_seed=1), encode_threads=1)
    assert _process(other_seed, target)[0] != reference


def test_the_local_runner_writes_the_pools_records_in_key_order(tmp_path, pools, processor):
    # Without the shuffle buffer and with one shard, the file is the pools' records, pools in key
    # order: what any runner must reproduce before shuffling.
    config = _config(
        output_file=str(tmp_path / "train.tfrecord"), shuffle_buffer_size=0, num_workers=2
    )
    local_runner.run(config)
    expected = b"".join(r for pool in pools for r in _process(processor, pool)[0])
    assert (tmp_path / "train.tfrecord").read_bytes() == expected
