"""The installable package: its metadata, its console scripts, and a wheel that works outside the
checkout."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
from xml.etree import ElementTree

import pytest

from tests.cli_help import helpxml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
SCRIPTS = PYPROJECT["project"]["scripts"]
# pipelines/ modules that are no CLI of their own: shared flag and failure code, and the demo that
# `albert-pretrain` runs with no flags.
NOT_CLIS = {"__init__", "demo_pipeline"}


def test_every_cli_of_pipelines_is_a_console_script_named_after_it():
    clis = {
        path.stem
        for path in (REPO_ROOT / "pipelines").glob("*.py")
        if not path.stem.startswith("_") and path.stem not in NOT_CLIS
    }
    assert SCRIPTS == {
        f"albert-{name.replace('_', '-')}": f"pipelines.{name}:cli" for name in sorted(clis)
    }


def requirement_lines(name: str) -> list[str]:
    lines = (REPO_ROOT / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize(
    "name",
    ["requirements.txt", "requirements-beam.txt", "requirements-docs.txt", "requirements-dev.txt"],
)
def test_the_requirements_files_that_pyproject_reads_pin_every_line(name):
    # setuptools reads them as the package's (extras') dependencies: no pip options there, and
    # every requirement pinned to one version.
    for line in requirement_lines(name):
        assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][0-9A-Za-z.+]*", line), f"{name}: {line}"


def test_the_extras_read_the_requirements_files():
    dynamic = PYPROJECT["tool"]["setuptools"]["dynamic"]
    assert dynamic["dependencies"] == {"file": ["requirements.txt"]}
    extras = {name: spec["file"] for name, spec in dynamic["optional-dependencies"].items()}
    assert extras == {
        "beam": ["requirements-beam.txt"],
        "docs": ["requirements-docs.txt"],
        "dev": ["requirements-beam.txt", "requirements-docs.txt", "requirements-dev.txt"],
    }


def build_wheel(tmp_path: pathlib.Path) -> pathlib.Path:
    """The wheel of a copy of the checkout's packaged files (the build writes into its source)."""
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("albert_tf", "data_prep", "pipelines"):
        shutil.copytree(REPO_ROOT / folder, source / folder, ignore=ignore)
    for path in [REPO_ROOT / "pyproject.toml", REPO_ROOT / "README.md"]:
        shutil.copy(path, source)
    for path in REPO_ROOT.glob("requirements*.txt"):
        shutil.copy(path, source)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--wheel-dir", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("albert_tf-*.whl")
    return wheel


def run_in(folder: pathlib.Path, *command) -> subprocess.CompletedProcess:
    """`command` run in `folder`, without the PYTHONPATH that would reach the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, capture_output=True, text=True, cwd=folder, env=env, timeout=300)


@pytest.mark.e2e  # builds and installs a wheel, then starts its scripts
def test_the_wheel_installs_and_its_scripts_run_outside_the_checkout(tmp_path):
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    installed = run_in(
        tmp_path, python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheel
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    # The dependencies come from this run's environment, appended after the new venv's own
    # site-packages (a .pth line adds a path, nothing more), so the wheel's copy is what loads.
    (site_packages,) = (venv / "lib").glob("python3*/site-packages")
    dependencies = [p for p in sys.path if p.endswith("site-packages")]
    (site_packages / "dependencies.pth").write_text("\n".join(dependencies) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    imported = run_in(
        elsewhere,
        python,
        "-c",
        "import albert_tf, data_prep; print(albert_tf.__file__); "
        "print(sorted(p.name for p in data_prep.SAMPLE_CORPUS.glob('*/*.txt.gz')))",
    )
    assert imported.returncode == 0, imported.stderr[-3000:]
    where, books = imported.stdout.splitlines()
    assert pathlib.Path(where).is_relative_to(site_packages)
    checkout_books = sorted(
        p.name for p in (REPO_ROOT / "data_prep/sample_corpus").glob("*/*.txt.gz")
    )
    assert books == str(checkout_books)
    for script in SCRIPTS:
        assert (bin_dir / script).is_file(), script
    # The console script is the same CLI as the checkout's script: the same flags, defaults and
    # --help listing.
    helped = run_in(elsewhere, bin_dir / "albert-run-classifier", "--helpxml")
    installed_flags = {
        flag.findtext("name"): (flag.findtext("default"), flag.findtext("key") == "yes")
        for flag in ElementTree.fromstring(helped.stdout).findall("flag")
    }
    checkout_flags = {
        name: (default, listed)
        for name, (default, listed, _) in helpxml("run_classifier.py").items()
    }
    assert "max_seq_length" in installed_flags and installed_flags == checkout_flags
