"""JSON results written atomically (temporary name, then rename), NaN written as null."""

from __future__ import annotations

import json
import math
import os


def json_safe(value):
    """`value` with non-finite floats replaced by None (NaN is not valid JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json(path: str, value) -> None:
    """Writes JSON to a temporary name, then renames it into place."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(json_safe(value), f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)
