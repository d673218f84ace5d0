"""Natural-text token ids for the storage benchmark, built at run time from documentation Debian installs.

Nothing of the corpus is committed: the benchmark reads it from Debian packages (each under a free licence)
and tokenizes it with a real byte-level BPE (`tekken_bpe`). Three groups, one per kind of output the
pipeline's categories produce:
- English prose: the Python documentation (`python3.11-doc`), the PostgreSQL manual (`postgresql-doc-15`),
  the Linux kernel's documentation (`linux-doc-6.1`, without its translations) and the English Debian
  Administrator's Handbook (`debian-handbook`); technical prose with code and formulas inline;
- other languages: the Handbook's 25 translations (Arabic, Chinese, Japanese, Russian, ...);
- code: the Python standard library's source of the interpreter that runs the benchmark.
Text is taken from the HTML pages' content (navigation, sidebars and script left out; whitespace collapsed
outside <pre>, as a model writes it) and split into paragraphs; a paragraph seen before anywhere (menus,
the English text of untranslated Handbook sections) is dropped, so repeated text cannot flatter the
compression. Files are read in sorted order and shuffled with a fixed seed, so the streams are a pure
function of the installed packages.
"""

from __future__ import annotations

import glob
import hashlib
import html.parser
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from tekken_bpe import MissingInput

PACKAGES = "python3.11-doc postgresql-doc-15 linux-doc-6.1 debian-handbook"
INSTALL_HINT = f"install them with `apt-get install {PACKAGES}`"

# (group, glob of HTML pages, Debian package, extra paths to leave out); globs are version-agnostic
HTML_SOURCES = [
    ("prose", "/usr/share/doc/python3*/html/**/*.html", "python3.11-doc", ()),
    ("prose", "/usr/share/doc/postgresql-doc-*/html/*.html", "postgresql-doc-15", ()),
    ("prose", "/usr/share/doc/linux-doc*/html/**/*.html", "linux-doc-6.1", ("/translations/",)),
    ("prose", "/usr/share/doc/debian-handbook/html/en-US/*.html", "debian-handbook", ()),
    ("other languages", "/usr/share/doc/debian-handbook/html/*/*.html", "debian-handbook", ("/en-US/",)),
]
SKIP_PAGES = ("genindex", "modindex", "search.html", "bookindex", "/_")  # indexes, Sphinx's _sources etc.
SKIP_TAGS = frozenset({"script", "style", "head", "nav", "header", "footer", "title"})
SKIP_CLASSES = frozenset(
    {"navheader", "navfooter", "related", "sphinxsidebar", "footer", "headerlink", "docnav", "toc", "breadcrumbs"}
)
BLOCK_TAGS = frozenset(
    "p div pre li ul ol dl dt dd h1 h2 h3 h4 h5 h6 table tr td th br blockquote section article".split()
)


class _PageText(html.parser.HTMLParser):
    """The readable text of one HTML page, one paragraph per block element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._current: list[str] = []
        self._skip: tuple[str, int] | None = None  # (tag, nesting) of the element being left out
        self._pre = 0

    def _close(self) -> None:
        text = "".join(self._current)
        text = text.strip("\n") if self._pre else " ".join(text.split())
        if text.strip():
            self.paragraphs.append(text)
        self._current = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skip is not None:
            if tag == self._skip[0]:
                self._skip = (tag, self._skip[1] + 1)
            return
        classes = set((dict(attrs).get("class") or "").split())
        if tag in SKIP_TAGS or classes & SKIP_CLASSES:
            self._skip = (tag, 1)
            return
        if tag in BLOCK_TAGS:
            self._close()
        if tag == "pre":
            self._pre += 1

    def handle_endtag(self, tag: str) -> None:
        if self._skip is not None:
            if tag == self._skip[0]:
                self._skip = (tag, self._skip[1] - 1) if self._skip[1] > 1 else None
            return
        if tag in BLOCK_TAGS:
            self._close()
        if tag == "pre" and self._pre:
            self._pre -= 1

    def handle_data(self, data: str) -> None:
        if self._skip is None:
            self._current.append(data)

    def text(self) -> list[str]:
        self._close()
        return self.paragraphs


def page_paragraphs(path: str) -> list[str]:
    parser = _PageText()
    parser.feed(Path(path).read_text(encoding="utf-8", errors="replace"))
    parser.close()
    return parser.text()


def _pages(pattern: str, package: str, skip: tuple[str, ...]) -> list[str]:
    pages = sorted(p for p in glob.glob(pattern, recursive=True) if not any(s in p for s in SKIP_PAGES + skip))
    if not pages:
        raise MissingInput(f"natural-text corpus: no pages match {pattern} (Debian package {package}); {INSTALL_HINT}")
    return pages


def _python_sources() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(str(p) for p in stdlib.rglob("*.py") if "site-packages" not in p.parts)
    if not files:
        raise MissingInput(f"natural-text corpus: no Python sources under {stdlib}")
    return files


class _Unique:
    """Drops paragraphs (or files) seen before, across all groups."""

    def __init__(self) -> None:
        self.seen: set[bytes] = set()

    def keep(self, paragraphs: Iterable[str]) -> Iterator[str]:
        for paragraph in paragraphs:
            digest = hashlib.sha256(paragraph.strip().encode()).digest()
            if digest not in self.seen:
                self.seen.add(digest)
                yield paragraph


def documents(seed: int) -> dict[str, list[str]]:
    """Each group's documents (one text per page or source file), deduplicated and shuffled."""
    unique = _Unique()
    groups: dict[str, list[str]] = {}
    for group, pattern, package, skip in HTML_SOURCES:
        texts = ("\n\n".join(unique.keep(page_paragraphs(page))) for page in _pages(pattern, package, skip))
        groups.setdefault(group, []).extend(t for t in texts if t)
    sources = [Path(f).read_text(encoding="utf-8", errors="replace") for f in _python_sources()]
    groups["code"] = [s for s in sources if s.strip() and next(iter(unique.keep([s])), None) is not None]
    rng = np.random.default_rng(seed)
    return {group: [texts[i] for i in rng.permutation(len(texts))] for group, texts in groups.items()}


def token_streams(tokenizer: Tokenizer, seed: int) -> dict[str, np.ndarray]:
    """Each group's documents tokenized and concatenated in their shuffled order (int32 ids)."""
    streams = {}
    for group, texts in documents(seed).items():
        encoded = tokenizer.encode_batch(texts, add_special_tokens=False)
        streams[group] = np.concatenate([np.asarray(e.ids, dtype=np.int32) for e in encoded])
    return streams
