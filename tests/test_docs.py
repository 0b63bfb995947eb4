"""The documentation's shape: a short README, links that resolve, and every page in the site's nav.

Read as text, no TensorFlow and no MkDocs build (anchors by Python-Markdown's own rule):
`mkdocs build --strict` in `.ci/run` checks the links between the pages of `docs/` as the site
renders them; this also covers `README.md` and `CONTRIBUTING.md`, which the site does not build,
and runs with the other tests.
"""

import re

from markdown.extensions import toc

from tests.conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"
README_MAX_LINES = 200
# [text](target) and ![alt](target); code is taken out first, so `d["k"](x)` is no link.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^ *(```|~~~).*?^ *\1", re.M | re.S)
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)


def markdown_files() -> list:
    """README.md, CONTRIBUTING.md and every page under docs/."""
    return [REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]


def prose(text: str) -> str:
    """`text` without its fenced code blocks and code spans."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(path) -> list[str]:
    """The targets of the Markdown links of `path`, outside code."""
    return LINK.findall(prose(path.read_text()))


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # not https:, mailto:, ...


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs's `toc` extension makes it, from the heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)  # code spans keep their text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    return toc.slugify(text, "-")


def anchors(path) -> set[str]:
    """The anchors of the headings of `path`, a repeated one numbered as `toc` numbers it."""
    seen: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        seen.add(toc.unique(slug(heading), seen))
    return seen


def nav_pages() -> list[str]:
    """The pages `mkdocs.yml`'s `nav` names, relative to docs/."""
    config = (REPO_ROOT / "mkdocs.yml").read_text()
    nav = re.search(r"^nav:\n(.*?)(?=^\S|\Z)", config, re.M | re.S)
    assert nav, "mkdocs.yml has no nav"
    return re.findall(r"([\w./-]+\.md)\s*$", nav.group(1), re.M)


def test_the_readme_is_a_short_front_door():
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_every_relative_link_reaches_a_file_and_its_anchor():
    broken = []
    for path in markdown_files():
        for target in links(path):
            if not relative(target):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO_ROOT)}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_docs_link_no_file_outside_docs():
    """MkDocs cannot serve a file outside docs/: such a file is named in code, not linked."""
    outside = [
        f"{path.relative_to(REPO_ROOT)}: {target}"
        for path in sorted(DOCS.rglob("*.md"))
        for target in links(path)
        if relative(target)
        and target.partition("#")[0]
        and not (path.parent / target.partition("#")[0]).resolve().is_relative_to(DOCS)
    ]
    assert not outside, "\n".join(outside)


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    nav = nav_pages()
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_the_anchor_rule_matches_the_headings_it_is_used_on():
    assert slug("Model shapes: `--albert_config_file` or `--preset`") == (
        "model-shapes-albert_config_file-or-preset"
    )
    assert slug("Text → TFRecords") == "text-tfrecords"
    assert slug("SQuAD v1.1 / v2.0 and RACE") == "squad-v11-v20-and-race"
