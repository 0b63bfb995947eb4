"""Running a script in a client's own virtualenv (`.venv-clients/<venv>/`, which `bash .ci/run`
creates from `requirements-client-<venv>.txt`, or the interpreter an environment variable names),
as the client tests do: a missing or failing client fails the test in one line."""

import json
import os
import pathlib
import subprocess

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_in_client(venv: str, variable: str, script: pathlib.Path, request: dict, what: str):
    """`script`'s JSON answer to `request` (on stdin), run by `venv`'s interpreter (or
    `$variable`'s); `what` names the client in a failure."""
    python = os.environ.get(variable) or str(REPO_ROOT / ".venv-clients" / venv / "bin/python")
    if not os.path.isfile(python):
        pytest.fail(
            f"{venv} client not installed: no {python} (bash .ci/run creates it from "
            f"requirements-client-{venv}.txt; or set {variable})",
            pytrace=False,
        )
    done = subprocess.run(
        [python, str(script)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        pytest.fail(f"{what} could not run: {last}", pytrace=False)
    return json.loads(done.stdout)
