"""`eagle-datagen check` against stand-in deployments: a healthy one exits 0 with every item ok (and the warnings a
run would log); a misconfigured one exits 1 with one refused line per fault and still checks everything else."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from eagle_datagen.generation.checklist import PROBE_KEY
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen_stack.processes import free_port
from standin_variants import copy_standin, swap_byte_ranks

from conftest import REPO, user_record, write_jsonl

pytestmark = pytest.mark.slow


def check(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "eagle_datagen.cli", "check", "--trust-remote-code", "--wait-ready", "1", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240)


def sim(**changes) -> SimServerThread:
    config = SimConfig(tokenizer_path="standin:kimi-k2.5").with_profile("instant")
    return SimServerThread(dataclasses.replace(config, **changes))


def recipe(folder: Path, *sources: str) -> Path:
    write_jsonl(folder / "math.jsonl", [user_record(f"add {i} and {i * 3}") for i in range(3)])
    listed = ", ".join(sources)
    text = f"version: 1\nname: checktest\ncategories:\n  math:\n    sources: [{listed}]\n"
    (folder / "recipe.yaml").write_text(text, encoding="utf-8")
    return folder / "recipe.yaml"


def lines_of(result: subprocess.CompletedProcess) -> list[str]:
    return result.stdout.splitlines()


def test_a_healthy_deployment_passes_with_one_line_per_item(tmp_path):
    unreachable = f"http://127.0.0.1:{free_port()}"  # in the JSON run only: a run would leave it out and go on
    with sim(server_args={"reasoning_parser": "kimi_k2"}) as server:
        result = check(
            "--recipe", str(recipe(tmp_path, "math.jsonl")), "--tokenizer", "standin:kimi-k2.5",
            "--sglang-url", server.url, "--output", str(tmp_path / "out"),
        )  # fmt: skip
        as_json = check(
            "--recipe", str(tmp_path / "recipe.yaml"), "--tokenizer", "standin:kimi-k2.5",
            "--sglang-url", server.url, "--sglang-url", unreachable, "--output", str(tmp_path / "out"), "--json",
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    lines = lines_of(result)
    assert lines[0].startswith("ok      recipe: ") and lines[1].startswith("ok      tokenizer: standin:kimi-k2.5 loads")
    assert "remote code allowed and used" in lines[1]
    assert f"ok      endpoint {server.url}: serves moonshotai/Kimi-K2.5" in result.stdout
    assert "tokenizer agrees (compared by messages)" in result.stdout
    # the reasoning parser is a warning about the server's other users, not a refusal
    [parser] = [x for x in lines if "--reasoning-parser kimi_k2" in x]
    assert parser.startswith(f"warn    endpoint {server.url}: ") and "OpenAI endpoints only" in parser
    assert any(x.startswith("warn") and "no --enable-deterministic-inference" in x for x in lines)
    assert "ok      endpoints: 1 of 1 pass preflight, 1 required" in lines
    assert f"ok      output root {tmp_path / 'out'}: wrote, read back and listed" in result.stdout
    assert "ok      source math: math.jsonl: 1 file(s), 3 records" in lines
    assert lines[-1] == f"{len(lines) - 1} checks: 0 refused, 2 warning(s)"
    assert json.loads((tmp_path / "out" / PROBE_KEY).read_text())["written_by"] == "eagle-datagen check"
    assert as_json.returncode == 0
    answer = json.loads(as_json.stdout)
    assert answer["ok"] is True and {x["verdict"] for x in answer["lines"]} == {"ok", "warn"}
    [left_out] = [x for x in answer["lines"] if x["item"] == f"endpoint {unreachable}"]
    assert left_out["verdict"] == "warn" and "is not ready" in left_out["detail"]
    assert left_out["detail"].endswith(
        "(a run leaves this endpoint out and goes on: 1 of 2 pass preflight, 1 required)"
    )
    assert len(answer["lines"]) == len(lines)  # the text's lines, its summary line less, and the one left out


def test_a_misconfigured_deployment_is_refused_line_by_line(tmp_path, standin_dir):
    odd = copy_standin(standin_dir, tmp_path / "odd")
    swap_byte_ranks(odd)  # a tokenizer one token off the client's
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("an output root cannot be a file")
    unreachable = f"http://127.0.0.1:{free_port()}"
    with (
        sim(enable_watermark=True) as marked,
        sim(tokenizer_path=str(odd)) as disagreeing,
        sim(server_args={"allow_auto_truncate": True}) as truncating,
        sim() as good,
    ):
        result = check(
            "--recipe", str(recipe(tmp_path, "math.jsonl", "missing.jsonl")), "--tokenizer", "standin:kimi-k2.5",
            "--sglang-url", unreachable, "--sglang-url", marked.url, "--sglang-url", disagreeing.url,
            "--sglang-url", truncating.url, "--sglang-url", good.url, "--output", str(not_a_folder),
            "--min-endpoints", "100%",
        )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr[-2000:]
    lines = lines_of(result)
    refused = [x for x in lines if x.startswith("refused")]

    def line(item: str) -> str:
        [found] = [x for x in refused if x.startswith(f"refused {item}: ")]
        return found

    assert "is not ready: cannot connect" in line(f"endpoint {unreachable}")
    assert "runs with --enable-watermark: SGLang biases the sampled tokens" in line(f"endpoint {marked.url}")
    assert "restart SGLang without --enable-watermark" in line(f"endpoint {marked.url}")
    assert "tokenizer" in line(f"endpoint {disagreeing.url}")
    assert "--allow-auto-truncate: a prompt longer than the context length is cut" in line(f"endpoint {truncating.url}")
    assert f"cannot write, read and list {PROBE_KEY}" in line(f"output root {not_a_folder}")
    assert "prompt source not found" in line("source math: missing.jsonl")
    assert f"ok      endpoint {good.url}: serves moonshotai/Kimi-K2.5" in result.stdout  # the others are still judged
    assert "ok      source math: math.jsonl: 1 file(s), 3 records" in result.stdout
    assert "refused endpoints: 1 of 5 SGLang endpoints passed preflight, fewer than the 5 required" in result.stdout
    assert lines[-1].startswith(f"{len(lines) - 1} checks: {len(refused)} refused")
    assert len(refused) == 7


def test_a_tokenizer_that_does_not_load_is_refused_and_the_endpoints_are_still_checked(tmp_path):
    with sim() as server:
        result = check(
            "--recipe", str(recipe(tmp_path, "math.jsonl")), "--tokenizer", str(tmp_path / "no-such-tokenizer"),
            "--sglang-url", server.url, "--output", str(tmp_path / "out"),
        )  # fmt: skip
        generations = server.stats()["generations"]
    assert result.returncode == 1
    [tokenizer] = [x for x in lines_of(result) if x.startswith("refused tokenizer: ")]
    assert "no-such-tokenizer" in tokenizer
    assert "warn    endpoints: no canary and no tokenizer agreement: the tokenizer did not load" in result.stdout
    assert f"ok      endpoint {server.url}: serves moonshotai/Kimi-K2.5" in result.stdout
    assert generations == 0  # no canary without the tokenizer's chat template


def test_a_keyed_deployment_is_checked_with_its_key_and_a_wrong_or_missing_one_is_refused(tmp_path, monkeypatch):
    """The check sends the run's key (the same ServerAccess): with it the endpoint passes; without it, or with another,
    the endpoint is refused (a run stops on a refused key whatever the other endpoints say) and exit is 1. The key
    itself is printed nowhere."""
    key = "sk-check-7f3a9c1e"
    folder = tmp_path / "in"
    folder.mkdir()
    args = ["--recipe", str(recipe(folder, "math.jsonl")), "--tokenizer", "standin:kimi-k2.5"]
    monkeypatch.delenv("EAGLE_DATAGEN_API_KEY", raising=False)
    with sim(api_key=key) as server:
        args += ["--sglang-url", server.url, "--output", str(tmp_path / "out")]
        missing = check(*args)
        monkeypatch.setenv("EAGLE_DATAGEN_API_KEY", "sk-wrong")
        wrong = check(*args)
        monkeypatch.setenv("EAGLE_DATAGEN_API_KEY", key)
        right = check(*args)
    for result in (missing, wrong):
        assert result.returncode == 1, result.stdout + result.stderr[-2000:]
        [line] = [x for x in lines_of(result) if x.startswith(f"refused endpoint {server.url}")]
        assert "401" in line and "$EAGLE_DATAGEN_API_KEY" in line
    assert right.returncode == 0, right.stdout + right.stderr[-2000:]
    assert f"ok      endpoint {server.url}: serves moonshotai/Kimi-K2.5" in right.stdout
    for result in (missing, wrong, right):
        assert key not in result.stdout + result.stderr
