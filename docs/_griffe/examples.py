"""A griffe extension for the API pages: each docstring's `Example:` block as a code block.

The library's docstrings follow Google style, where `Example:` (singular) is an admonition whose
text is Markdown: a `>>>` line would render as a nested quote and an indented call as one
paragraph. This wraps each such block in a fenced code block (`pycon` when it has `>>>` prompts),
so the API pages show the examples as they are written in the source.
"""

import re
import textwrap

import griffe

HEADER = re.compile(r"^(?P<indent>\s*)Example:\s*$")


def fence_examples(text: str) -> str:
    """`text` with every indented block under an `Example:` line put in a fenced code block."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = HEADER.match(lines[i])
        out.append(lines[i])
        i += 1
        if not match:
            continue
        indent = len(match["indent"])
        block: list[str] = []
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
        ):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():
            lines.insert(i, block.pop())
        code = textwrap.dedent("\n".join(block)).splitlines()
        language = "pycon" if any(line.startswith(">>>") for line in code) else "python"
        pad = " " * (indent + 4)
        out.append(f"{pad}```{language}")
        out.extend(f"{pad}{line}" if line else "" for line in code)
        out.append(f"{pad}```")
    return "\n".join(out)


class FencedExamples(griffe.Extension):
    """Fences the `Example:` blocks of every object's docstring as griffe reads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and "Example:" in obj.docstring.value:
            obj.docstring.value = fence_examples(obj.docstring.value)
