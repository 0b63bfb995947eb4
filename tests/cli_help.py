"""The flags a CLI of pipelines/ defines, read from its --helpxml (which loads no TensorFlow)."""

import pathlib
import subprocess
import sys
from xml.etree import ElementTree

ROOT = pathlib.Path(__file__).resolve().parents[1]


def helpxml(script: str) -> dict[str, tuple[str, bool, str]]:
    """{flag: (default as absl writes it, listed by --help, defining module)} of a CLI."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "pipelines" / script), "--helpxml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    return {
        flag.findtext("name"): (
            flag.findtext("default"),
            flag.findtext("key") == "yes",
            flag.findtext("file"),
        )
        for flag in ElementTree.fromstring(result.stdout).findall("flag")
    }


def flag_defaults(script: str) -> dict[str, str]:
    """{flag name: default as absl writes it} of a CLI."""
    return {name: default for name, (default, _, _) in helpxml(script).items()}
