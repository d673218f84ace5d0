"""Copies of the remote-code stand-in tokenizer with one thing changed, for the tests of issue 21."""

from __future__ import annotations

import base64
import json
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


def edit_tokenizer_config(folder: Path, **changes: object) -> None:
    """Set top-level keys of tokenizer_config.json (the class's init arguments)."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(changes)
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def set_added_token_flag(folder: Path, content: str, flag: str, value: bool = True) -> None:
    """Set an AddedToken flag (lstrip, rstrip, single_word, normalized) of one added token in tokenizer_config.json."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    [entry] = [e for e in config["added_tokens_decoder"].values() if e["content"] == content]
    entry[flag] = value
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def add_to_class(folder: Path, source: str) -> None:
    """Add methods (indented source) to the remote code's TikTokenTokenizer."""
    code = folder / "tokenization_kimi.py"
    head = "class TikTokenTokenizer(PreTrainedTokenizer):\n"
    text = code.read_text(encoding="utf-8")
    assert head in text
    code.write_text(text.replace(head, head + source.rstrip("\n") + "\n\n", 1), encoding="utf-8")


def replace_in_remote_code(folder: Path, old: str, new: str) -> None:
    code = folder / "tokenization_kimi.py"
    text = code.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    code.write_text(text.replace(old, new), encoding="utf-8")


def import_a_missing_name(folder: Path) -> None:
    """Make the remote code import a name its module does not have under the installed transformers, as Moonshot's
    K2-era tokenization_kimi.py does (bytes_to_unicode moved out of transformers' gpt2 module in transformers 5)."""
    code = folder / "tokenization_kimi.py"
    text = code.read_text(encoding="utf-8")
    line = "from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode\n"
    code.write_text(text.replace("import tiktoken\n", "import tiktoken\n" + line, 1), encoding="utf-8")


def ignore_instant_switch(folder: Path) -> None:
    """A chat template without the instant switch: with `thinking=False` the generation prompt still ends in
    `<think>` (not `<think></think>`); every thinking-mode rendering is the stand-in's own."""
    instant = "{%- elif add_generation_prompt -%}\n<|im_assistant|>assistant<|im_middle|><think></think>"
    template = folder / "chat_template.jinja"
    text = template.read_text(encoding="utf-8")
    assert text.count(instant) == 1
    template.write_text(text.replace(instant, instant.removesuffix("</think>")), encoding="utf-8")
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    if isinstance(config.get("chat_template"), str) and instant in config["chat_template"]:
        config["chat_template"] = config["chat_template"].replace(instant, instant.removesuffix("</think>"))
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
