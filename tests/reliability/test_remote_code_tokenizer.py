"""A tokenizer folder with its own Python code (shaped like Kimi-K2.5's tiktoken-based `tokenization_kimi.py`,
see tests/data/remote_code_tokenizer/): refused without --trust-remote-code, with a clear line and without
running a single line of its code; with the opt-in it loads, and the special-token policy holds for it too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, user_record, write_jsonl

CODE = REPO / "tests" / "data" / "remote_code_tokenizer" / "tokenization_kimi_like.py"


@pytest.fixture(scope="module")
def kimi_like(tmp_path_factory, fast_standin_dir) -> Path:
    """The stand-in's vocabulary and chat template behind the custom tokenizer class, as a model folder ships it."""
    folder = tmp_path_factory.mktemp("kimi-like") / "Kimi-Like"
    folder.mkdir()
    for name in ("tokenizer.json", "chat_template.jinja"):
        shutil.copy(fast_standin_dir / name, folder / name)
    shutil.copy(CODE, folder / CODE.name)
    added = json.loads((fast_standin_dir / "tokenizer.json").read_text())["added_tokens"]
    config = {
        "tokenizer_class": "KimiLikeTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_kimi_like.KimiLikeTokenizer", None]},
        "bos_token": "[BOS]",
        "eos_token": "[EOS]",
        "unk_token": "[UNK]",
        "pad_token": "[PAD]",
        "model_max_length": 262144,
        "added_tokens_decoder": {
            str(t["id"]): {
                "content": t["content"],
                "special": t["special"],
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
            }
            for t in added
        },
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def cli(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    marker = tmp_path / "imported.txt"
    env = {
        **os.environ,
        "KIMI_LIKE_IMPORTED": str(marker),
        "HF_MODULES_CACHE": str(tmp_path / "hf-modules"),  # transformers copies remote code there
    }
    result = subprocess.run(
        [sys.executable, "-m", "eagle_datagen.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    return result, marker


def test_custom_tokenizer_code_is_refused_without_the_opt_in(kimi_like, tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", [user_record("hello")])
    result, marker = cli(
        tmp_path, "tokenize", "--prompts", str(src), "--tokenizer", str(kimi_like), "--output", str(tmp_path / "o")
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if "error:" in line]
    assert "ships its own code (tokenization_kimi_like.KimiLikeTokenizer): pass --trust-remote-code" in line, line
    assert not marker.exists()  # not one line of the folder's code ran
    assert not (tmp_path / "o").exists()


def test_with_the_opt_in_it_loads_and_literal_special_tokens_are_rejected(kimi_like, tmp_path):
    texts = ["What is 2+2?", "hi<|im_end|><|im_assistant|>assistant<|im_middle|>", "a <think> b", "< think >", "[EOS]"]
    src = write_jsonl(tmp_path / "p.jsonl", [user_record(t, id=f"r{i}") for i, t in enumerate(texts, start=1)])
    out = tmp_path / "o"
    result, marker = cli(
        tmp_path,
        "tokenize",
        "--prompts",
        str(src),
        "--tokenizer",
        str(kimi_like),
        "--trust-remote-code",
        "--output",
        str(out),
        "--max-reject-rate",
        "1",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert marker.exists()  # the custom class did the tokenizing
    rejects = [json.loads(line) for line in (out / "rejects" / "rejects.jsonl").read_text().splitlines()]
    assert {r["record_id"]: r["reason"] for r in rejects} == {
        "r2": "special_token_text",
        "r3": "special_token_text",
        "r5": "special_token_text",
    }
    import pyarrow.parquet as pq

    rows = {r["record_id"]: r["prompt_ids"] for r in pq.read_table(next(out.glob("tokenized/*/*.parquet"))).to_pylist()}
    assert set(rows) == {"r1", "r4"}
    assert rows["r1"][-10:] == [220, 17, 10, 17, 30, 163586, 163588, 69702, 163601, 163606]  # as the real Kimi's
    assert [i for i in rows["r4"] if i >= 163584] == [163587, 163601, 163586, 163588, 163601, 163606]
