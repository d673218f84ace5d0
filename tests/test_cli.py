"""`eagle-datagen` from the outside: a real subprocess, its files, its exit status and its stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_datagen.cli import build_parser

from conftest import DEMO_RECIPE, REPO, user_record, write_jsonl


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eagle_datagen.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=300,
    )


def assert_one_line_error(result, *fragments):
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if "eagle-datagen: error:" in line]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_tokenize_recipe_end_to_end(tmp_path, tokenizer):
    result = cli(
        "tokenize",
        "--recipe",
        str(DEMO_RECIPE),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(tmp_path),
        "--processes",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert "tokenized" in result.stdout and "tool_use" in result.stdout
    summary = json.loads((tmp_path / "tokenized" / "_summary.json").read_text())
    assert summary["prompts"] > 100 and summary["rejected"] == 0
    assert len(summary["tokenizer"]["chat_template_sha256"]) == 64
    table = pq.read_table(tmp_path / "tokenized" / "category=tool_use" / "part-00000.parquet")
    assert table.schema.names == ["record_id", "prompt_id", "category", "prompt_ids", "mode"]
    ids_type = table.schema.field("prompt_ids").type
    assert pa.types.is_list(ids_type) and ids_type.value_type == pa.int32()
    rows = table.to_pylist()
    assert rows and all(r["category"] == "tool_use" and r["prompt_ids"][-1] == 163606 for r in rows)
    assert {r["mode"] for r in rows} == {"thinking"}  # the demo recipe's mode
    assert sum(c["prompts"] for c in summary["categories"].values()) == summary["prompts"]


def test_tokenize_prompts_writes_rejects_and_goes_on(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [user_record(f"q{i}", id=f"r{i}") for i in range(19)] + [b"{broken"])
    result = cli(
        "tokenize",
        "--prompts",
        str(src),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(tmp_path / "out"),
        "--max-reject-rate",
        "0.1",
    )
    assert result.returncode == 0, result.stderr
    [reject] = [json.loads(line) for line in (tmp_path / "out" / "rejects" / "rejects.jsonl").read_text().splitlines()]
    assert reject["reason"] == "invalid_json" and reject["origin"].endswith(":20")
    table = pq.read_table(tmp_path / "out" / "tokenized" / "category=chat" / "part-00000.parquet")
    assert table.num_rows == 19


def test_reject_rate_over_the_threshold_fails_after_writing_rejects(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [user_record("fine"), b"{x", b"{y"])
    result = cli(
        "tokenize",
        "--prompts",
        str(src),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(tmp_path / "out"),
    )
    assert_one_line_error(result, "2 of 3 prompt records were rejected", "--max-reject-rate")
    assert len((tmp_path / "out" / "rejects" / "rejects.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / "out" / "tokenized").exists()


def test_missing_file(tmp_path):
    result = cli(
        "tokenize",
        "--prompts",
        str(tmp_path / "nope.jsonl"),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(tmp_path / "out"),
    )
    assert_one_line_error(result, "prompt source not found", "nope.jsonl")


def test_unreadable_source(tmp_path):
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    result = cli(
        "tokenize",
        "--prompts",
        str(tmp_path / "broken.parquet"),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(tmp_path / "out"),
    )
    assert_one_line_error(result, "cannot read Parquet prompt source")


def test_unreachable_s3_source(tmp_path):
    result = cli(
        "tokenize",
        "--prompts",
        "s3://bucket/prompts/",
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(tmp_path / "out"),
        env={
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_ACCESS_KEY_ID": "x",
            "AWS_SECRET_ACCESS_KEY": "y",
            "AWS_MAX_ATTEMPTS": "1",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
    )
    assert_one_line_error(result, "cannot list prompt source s3://bucket/prompts/", "AWS_ENDPOINT_URL")


def test_tokenizer_without_chat_template(tmp_path, standin_dir):
    import shutil

    shutil.copytree(standin_dir, tmp_path / "tok")
    (tmp_path / "tok" / "chat_template.jinja").unlink()
    src = write_jsonl(tmp_path / "in.jsonl", [user_record("x")])
    result = cli(
        "tokenize",
        "--prompts",
        str(src),
        "--tokenizer",
        str(tmp_path / "tok"),
        "--trust-remote-code",
        "--output",
        str(tmp_path / "out"),
    )
    assert_one_line_error(result, "has no chat template")


def test_template_not_ending_in_the_profile_token(tmp_path, standin_dir):
    import shutil

    shutil.copytree(standin_dir, tmp_path / "tok")
    template = (tmp_path / "tok" / "chat_template.jinja").read_text()
    (tmp_path / "tok" / "chat_template.jinja").write_text(template.replace("<|im_middle|><think>", "<|im_middle|>"))
    src = write_jsonl(tmp_path / "in.jsonl", [user_record("x")])
    result = cli(
        "tokenize",
        "--prompts",
        str(src),
        "--tokenizer",
        str(tmp_path / "tok"),
        "--trust-remote-code",
        "--output",
        str(tmp_path / "out"),
    )
    assert_one_line_error(result, "does not end the prompt in '<think>' (163606)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit", "0"], "must be a positive integer"),
        (["--max-reject-rate", "5"], "must be between 0 and 1"),
        (["--categories", "Math,../x"], "bad category list"),
        (["--processes", "many"], "is not an integer"),
    ],
)
def test_bad_flags_are_usage_errors(tmp_path, args, message):
    result = cli("tokenize", "--prompts", "x.jsonl", "--tokenizer", "t", "--output", str(tmp_path), *args)
    assert result.returncode == 2 and message in result.stderr


def test_the_log_level_is_case_blind_on_the_command_line_and_in_the_environment(monkeypatch):
    args = ["build-standin-tokenizer", "x"]
    assert build_parser().parse_args(["--log-level", "debug", *args]).log_level == "DEBUG"
    monkeypatch.setenv("EAGLE_DATAGEN_LOG_LEVEL", "warning")
    assert build_parser().parse_args(args).log_level == "WARNING"


def test_recipe_and_prompts_together_are_refused(tmp_path):
    result = cli(
        "tokenize",
        "--prompts",
        "a.jsonl",
        "--recipe",
        str(DEMO_RECIPE),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(tmp_path),
    )
    assert_one_line_error(result, "either --recipe FILE or one or more --prompts SRC")


def test_help_explains_every_flag():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, command in sub.choices.items():
        for action in command._actions:
            if action.dest != "help":
                assert action.help and len(action.help) > 15, (name, action.dest)
    result = cli("tokenize", "--help")
    assert result.returncode == 0
    for flag in (
        "--prompts",
        "--recipe",
        "--tokenizer",
        "--output",
        "--profile",
        "--max-prompt-tokens",
        "--max-reject-rate",
        "--processes",
        "--trust-remote-code",
        "standin:kimi-k2.5",
        "AWS_ENDPOINT_URL",
    ):
        assert flag in result.stdout


def test_build_standin_tokenizer_command(tmp_path):
    result = cli("build-standin-tokenizer", str(tmp_path / "tok"))
    assert result.returncode == 0, result.stderr
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tmp_path / "tok"), trust_remote_code=True)
    assert tok.convert_tokens_to_ids("<think>") == 163606 and type(tok).__name__ == "TikTokenTokenizer"


@pytest.mark.parametrize(
    ("rate", "message"),
    [
        ("prompt_echo", "is not REASON=RATE"),
        ("prompt_ecco=0.1", "unknown reason 'prompt_ecco'"),
        ("prompt_echo=2", "must be between 0 and 1"),
    ],
)
def test_bad_max_rates_are_usage_errors(tmp_path, rate, message):
    args = ["run", "--prompts", "x", "--tokenizer", "t", "--sglang-url", "http://a", "--output", str(tmp_path)]
    result = cli(*args, "--max-rate", rate)
    assert result.returncode == 2 and message in result.stderr


def test_max_rates_repeat():
    args = ["run", "--prompts", "x", "--tokenizer", "t", "--sglang-url", "http://a", "--output", "o"]
    parsed = build_parser().parse_args([*args, "--max-rate", "prompt_echo=0.05", "--max-rate", "no_eos=0"])
    assert dict(parsed.max_rate) == {"prompt_echo": 0.05, "no_eos": 0.0}


def test_tokenize_of_sources_without_a_record_is_no_success(tmp_path):
    """Nothing read is nothing tokenized: exit 1 in one line (`run` refuses the same sources)."""
    (tmp_path / "empty.jsonl").write_text("")
    args = ["--tokenizer", "standin:kimi-k2.5", "--trust-remote-code", "--output", str(tmp_path / "out")]
    result = cli("tokenize", "--prompts", str(tmp_path / "empty.jsonl"), *args)
    assert_one_line_error(result, "the sources hold no prompt record: nothing tokenized")
