"""Copies of the remote-code stand-in tokenizer with one thing changed, for the tests of issue 21."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path


def copy_standin(standin_dir: Path, target: Path) -> Path:
    shutil.copytree(standin_dir, target)
    return target


def swap_byte_ranks(folder: Path, a: bytes = b"?", b: bytes = b"@") -> tuple[int, int]:
    """Swap the ranks of two byte tokens in tiktoken.model: text holding `a` alone gets `b`'s id and back, so a
    prompt ending in "?" differs from the original tokenizer's in exactly that one token. Returns the two ranks."""
    path = folder / "tiktoken.model"
    lines = path.read_text(encoding="utf-8").splitlines()
    keys = {base64.b64encode(a).decode(): None, base64.b64encode(b).decode(): None}
    for i, line in enumerate(lines):
        token, rank = line.split()
        if token in keys:
            keys[token] = i
    ia, ib = keys.values()
    ra, rb = lines[ia].split()[1], lines[ib].split()[1]
    lines[ia] = f"{lines[ia].split()[0]} {rb}"
    lines[ib] = f"{lines[ib].split()[0]} {ra}"
    path.write_text("\n".join(sorted(lines, key=lambda line: int(line.split()[1]))) + "\n", encoding="utf-8")
    return int(ra), int(rb)


def break_import(folder: Path, package: str = "eagle_missing_tokenizer_dep") -> None:
    """Make the remote code import a package that is not installed."""
    code = folder / "tokenization_kimi.py"
    text = code.read_text(encoding="utf-8")
    code.write_text(text.replace("import tiktoken\n", f"import tiktoken\nimport {package}\n", 1), encoding="utf-8")
