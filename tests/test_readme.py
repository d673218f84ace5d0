"""The README and the docs tell the truth about the command line: every `eagle-datagen <cmd> --flag` they show
exists in `eagle-datagen <cmd> --help`, and every `make <target>` is a target of the Makefile."""

from __future__ import annotations

import functools
import re
import subprocess
import sys

import pytest

from conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("**/*.md"))  # the user pages and docs/internals/
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"eagle-datagen\s+([a-z][a-z-]*)(.*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
MAKE = re.compile(r"(?<![\w-])make\s+([a-z][a-z0-9-]*)")


def code_blocks(text: str) -> list[str]:
    """Fenced blocks with continuation lines joined: a trailing backslash, or an indented line after an
    `eagle-datagen` line (the synopsis style), continues the command."""
    blocks = []
    for block in FENCE.findall(text):
        lines: list[str] = []
        for line in block.splitlines():
            continues = lines and (lines[-1].endswith("\\") or (line.startswith(" ") and "eagle-datagen" in lines[-1]))
            if continues:
                lines[-1] = lines[-1].rstrip("\\") + " " + line.strip()
            else:
                lines.append(line)
        blocks.extend(lines)
    return blocks


def snippets(text: str, inline: bool) -> list[str]:
    found = code_blocks(text)
    if inline:
        found += INLINE.findall(FENCE.sub("", text))
    return found


def commands_in(snippet: str) -> list[tuple[str, set[str]]]:
    """(command, flags) for each `eagle-datagen` invocation in a snippet; a comment or `&`, `&&`, `;` ends it."""
    found = []
    for part in re.split(r"\s&&?\s|;|\s&$|\s#\s", snippet):
        for match in COMMAND.finditer(part):
            found.append((match.group(1), set(FLAG.findall(match.group(2)))))
    return found


def shown(path, inline: bool) -> list[tuple[str, set[str]]]:
    return [c for s in snippets(path.read_text(), inline) for c in commands_in(s)]


@functools.cache
def help_of(command: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "eagle_datagen.cli", command, "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, f"eagle-datagen {command} --help failed: {result.stderr}"
    return result.stdout


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z0-9-]*):", (REPO / "Makefile").read_text(), re.M))


# The README everywhere (code blocks and inline code); the docs in their code blocks and inline code, since
# their prose quotes flags of other programs (SGLang, Airflow) that start with `--` too.
PAGES = [(README, True), *((page, True) for page in DOCS)]


@pytest.mark.parametrize(("page", "inline"), PAGES, ids=[p.relative_to(REPO).as_posix() for p, _ in PAGES])
def test_every_eagle_datagen_flag_shown_exists(page, inline):
    problems = []
    for command, flags in shown(page, inline):
        text = help_of(command)
        problems += [
            f"eagle-datagen {command} {flag}"
            for flag in sorted(flags)
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)
        ]
    assert not problems, f"{page.name} shows flags that --help does not know: {problems}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=[p.relative_to(REPO).as_posix() for p in [README, *DOCS]])
def test_every_make_target_shown_exists(page):
    targets = makefile_targets()
    text = page.read_text()
    shown_targets = {t for s in snippets(text, inline=True) for t in MAKE.findall(s)}
    assert not shown_targets - targets, f"{page.name} names make targets the Makefile lacks"


def test_the_readme_shows_the_two_commands_and_stays_short():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
    assert len(text.splitlines()) <= 160, "keep the README short: put the details in a docs/ page"
    assert {"run", "export", "serve-sim"} <= {command for command, _ in shown(README, True)}


def test_every_docs_page_is_reached_from_the_readme():
    """Following links from the README (through the runbooks and the internals index) reaches every page."""
    seen, todo = set(), [README.resolve()]
    while todo:
        page = todo.pop()
        if page in seen or not page.exists():
            continue
        seen.add(page)
        todo += [(page.parent / t).resolve() for t in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text())]
    assert not [p.relative_to(REPO).as_posix() for p in DOCS if p.resolve() not in seen]


def test_links_between_docs_pages_resolve():
    broken = []
    for page in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text()):
            if not target.startswith("http") and not (page.parent / target).exists():
                broken.append(f"{page.name} -> {target}")
    assert not broken


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lowercase, punctuation but `-` and `_` dropped, spaces as `-`."""
    text = re.sub(r"[`*\[\]()]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_anchors_of_links_between_pages_exist():
    broken = []
    for page in [README, *DOCS]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*\.md)?#([^)\s]+)\)", page.read_text()):
            path = page if not target else page.parent / target
            if not path.exists():
                continue  # test_links_between_docs_pages_resolve names it
            anchors = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", FENCE.sub("", path.read_text()), re.M)}
            if anchor not in anchors:
                broken.append(f"{page.name} -> {target or page.name}#{anchor}")
    assert not broken
