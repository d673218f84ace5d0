"""Hostile inputs: every case of tests/data/hostile/cases.json ends as the manifest says, through the real
entry points (`eagle-datagen tokenize` and `run` as subprocesses, the stand-in SGLang server over a socket,
SeaweedFS for S3), and nothing is written outside the output root.

A bad record is rejected with its reason while the run goes on and loses no sample; a bad source file,
recipe, run id or flag stops the command with one line (exit 1) or a usage error (exit 2) before the server
sees a single request.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_datagen.records import validate_record

from conftest import REPO

CORPUS = REPO / "tests" / "data" / "hostile"
CASES: list[dict] = json.loads((CORPUS / "cases.json").read_text(encoding="utf-8"))
RECORD_LINES = (CORPUS / "records.jsonl").read_bytes().split(b"\n")


def cases(entry: str) -> list[dict]:
    return [c for c in CASES if c["entry"] == entry]


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eagle_datagen.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
        timeout=timeout,
    )


def snapshot(folder: Path) -> dict[str, int]:
    """Every file under `folder` (hidden ones too) with its size."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def assert_stopped_with(result: subprocess.CompletedProcess, status: int, fragment: str) -> None:
    """Exit 1: one `eagle-datagen: error:` line; exit 2: argparse's usage error. Never a traceback."""
    assert result.returncode == status, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, result.stderr
    assert fragment in errors[0], errors[0]


def origin_line(origin: str) -> str:
    return origin.rsplit(":", 1)[1]


def test_the_corpus_is_what_its_script_writes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build(tmp_path)
    written = snapshot(tmp_path)
    committed = {k: v for k, v in snapshot(CORPUS).items() if not k.endswith((".py", ".pyc"))}
    assert written == committed
    for name in written:
        assert (tmp_path / name).read_bytes() == (CORPUS / name).read_bytes(), name


def test_every_case_has_an_outcome_and_a_reason():
    assert len(CASES) >= 50 and len({c["id"] for c in CASES}) == len(CASES)
    for case in CASES:
        assert case["why"] and case["expect"] in ("reject", "accept", "duplicate", "error", "records"), case
        if case["expect"] == "reject":
            assert case["reason"], case
        if case["expect"] == "error":
            assert case["exit"] in (1, 2) and case["message"], case
    assert {c["entry"] for c in CASES} == {"record", "source", "recipe", "run_id", "flag"}


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    """`eagle-datagen tokenize` over every hostile record, in a sandbox whose other files must not change."""
    sandbox = tmp_path_factory.mktemp("sandbox")
    shutil.copy(CORPUS / "records.jsonl", sandbox / "records.jsonl")
    (sandbox / "outside").mkdir()
    (sandbox / "outside" / "canary.txt").write_text("untouched\n")
    before = snapshot(sandbox)
    out = sandbox / "out"
    result = cli(
        "tokenize",
        "--prompts",
        str(sandbox / "records.jsonl"),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(out),
        "--max-reject-rate",
        "1",
    )
    after = {k: v for k, v in snapshot(sandbox).items() if not k.startswith("out/")}
    rejects = [json.loads(line) for line in (out / "rejects" / "rejects.jsonl").read_text().splitlines()]
    parts = sorted(out.glob("tokenized/category=*/part-*.parquet"))
    rows = [row for part in parts for row in pq.read_table(part).to_pylist()]
    return {"result": result, "before": before, "after": after, "rejects": rejects, "rows": rows, "out": out}


def expected_prompt_id(case: dict) -> str:
    raw = json.loads(RECORD_LINES[case["line"] - 1].decode("utf-8").removesuffix("\r"))
    record = validate_record(raw, f"records.jsonl:{case['line']}")
    return record.prompt_id


def test_every_hostile_record_ends_as_its_case_says(tokenized):
    assert tokenized["result"].returncode == 0, tokenized["result"].stderr[-2000:]
    assert tokenized["after"] == tokenized["before"]  # nothing outside the output root changed
    by_line = {int(origin_line(r["origin"])): r for r in tokenized["rejects"]}
    assert len(by_line) == len(tokenized["rejects"])  # one reject per bad line
    kept = {row["prompt_id"] for row in tokenized["rows"]}
    for case in cases("record"):
        reject = by_line.get(case["line"])
        if case["expect"] == "reject":
            assert reject is not None and reject["reason"] == case["reason"], (case["id"], reject)
            assert reject["detail"] and reject["stage"] in ("read", "validate", "tokenize")
        else:
            assert reject is None, (case["id"], reject)
            assert expected_prompt_id(case) in kept, case["id"]
    summary = json.loads((tokenized["out"] / "tokenized" / "_summary.json").read_text())
    record_cases = cases("record")
    assert summary["records_read"] == len(record_cases)
    assert summary["rejected"] == sum(c["expect"] == "reject" for c in record_cases)
    assert summary["duplicates"] == sum(c["expect"] == "duplicate" for c in record_cases)
    assert summary["prompts"] == len(tokenized["rows"]) == sum(c["expect"] == "accept" for c in record_cases)
    assert set(summary["categories"]) == {"chat", "(none)"}  # invalid categories are not names of anything


def test_accepted_hostile_text_is_tokenized_exactly_as_the_template_renders_it(tokenized, tokenizer):
    rows = {row["prompt_id"]: row["prompt_ids"] for row in tokenized["rows"]}
    plain = None
    for case in cases("record"):
        if case["expect"] != "accept":
            continue
        raw = json.loads(RECORD_LINES[case["line"] - 1].decode("utf-8").removesuffix("\r"))
        record = validate_record(raw, "x")
        ids = rows[record.prompt_id]
        assert ids == tokenizer.apply_chat_template(
            record.messages, tools=record.tools, add_generation_prompt=True, tokenize=True, return_dict=False
        ), case["id"]
        if case["id"] == "record_plain_question":
            plain = ids
        if case["id"].startswith("record_jinja_"):
            text = tokenizer.decode(ids)
            assert "{{" in text or "{%" in text, case["id"]  # the Jinja stayed text, it was not evaluated
    specials = set(range(163584, 163842))
    structure = [i for i in plain if i in specials]
    for name in ("spaced_think", "upper_think", "fullwidth_think", "zero_width_think", "partial_token"):
        [case] = [c for c in cases("record") if c["id"] == f"record_{name}"]
        ids = rows[expected_prompt_id(case)]
        assert [i for i in ids if i in specials] == structure, name  # odd spellings stay ordinary text


def run_records(records: Path, output: str, run_id: str, *extra: str) -> subprocess.CompletedProcess:
    """`eagle-datagen run` over a records file against a stand-in server of its own."""
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        return cli(
            "run", "--prompts", str(records), "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code",
            "--sglang-url", sim.url,
            "--output", output, "--run-id", run_id, "--max-reject-rate", "1", "--draft-vocab-size", "16", *extra,
        )  # fmt: skip


@pytest.mark.slow
def test_a_hostile_run_loses_no_sample_and_writes_only_under_its_root(tmp_path):
    shutil.copy(CORPUS / "records.jsonl", tmp_path / "records.jsonl")
    (tmp_path / "outside").mkdir()
    before = snapshot(tmp_path)
    out = tmp_path / "root"
    result = run_records(tmp_path / "records.jsonl", str(out), "hostile", "--samples-per-prompt", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("root/")} == before
    accepted = sum(c["expect"] == "accept" for c in cases("record"))
    manifest = json.loads((out / "manifests" / "run=hostile.json").read_text())
    counts = manifest["counts"]
    assert counts["samples"] == counts["data"] + counts["quarantine"] == 2 * accepted
    sample_ids = [
        sid
        for entry in manifest["files"]
        if entry["kind"] in ("data", "quarantine")
        for sid in pq.read_table(out / entry["key"]).column("sample_id").to_pylist()
    ]
    assert len(sample_ids) == len(set(sample_ids)) == 2 * accepted  # every sample once
    rejects = (out / "rejects" / "run=hostile" / "rejects.jsonl").read_text().splitlines()
    assert len(rejects) == sum(c["expect"] == "reject" for c in cases("record"))
    assert any(e["kind"] == "rejects" for e in manifest["files"])


@pytest.mark.slow
def test_hostile_records_on_s3_stay_under_their_prefix(tmp_path, s3_env):
    client = s3_env.client()

    def bucket() -> set[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket="eagle")
        return {item["Key"] for page in pages for item in page.get("Contents", [])}

    prefix = f"hostile-{uuid.uuid4().hex[:8]}/"
    before = bucket()
    result = run_records(CORPUS / "records.jsonl", f"s3://eagle/{prefix}", "hostile-s3")
    assert result.returncode == 0, result.stderr[-3000:]
    new = bucket() - before
    assert new and all(key.startswith(prefix) for key in new), sorted(new)[:10]
    assert f"{prefix}manifests/run=hostile-s3.json" in new
    assert not any("/../" in key or key.startswith("/") for key in new)


@pytest.mark.slow
@pytest.mark.parametrize("case", cases("source"), ids=lambda c: c["id"])
def test_each_hostile_source_file_ends_as_its_case_says(case, tmp_path):
    source = tmp_path / Path(case["file"]).name
    shutil.copy(CORPUS / case["file"], source)
    out = tmp_path / "out"
    result = cli(
        "tokenize", "--prompts", str(source), "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code",
        "--output", str(out),
        "--max-reject-rate", "1",
    )  # fmt: skip
    assert all(name == source.name or name.startswith("out/") for name in snapshot(tmp_path))
    if case["expect"] == "error":
        assert_stopped_with(result, 1, case["message"])
        assert not (out / "tokenized").exists()  # stopped before writing anything
        return
    assert result.returncode == 0, result.stderr[-2000:]
    rejects_file = out / "rejects" / "rejects.jsonl"
    rejects = [json.loads(line) for line in rejects_file.read_text().splitlines()] if rejects_file.exists() else []
    by_row = {origin_line(r["origin"]).removeprefix("row"): r["reason"] for r in rejects}
    for number, outcome in enumerate(case["outcomes"], start=1):
        assert by_row.get(str(number), "accept") == outcome, (number, by_row)
    summary = json.loads((out / "tokenized" / "_summary.json").read_text())
    assert summary["prompts"] == case["outcomes"].count("accept")


@pytest.fixture(scope="module")
def standin_server():
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    with SimServerThread(SimConfig().with_profile("instant")) as sim:
        yield sim


def command_for(case: dict, sim_url: str, out: Path) -> list[str]:
    base = [
        "run",
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--sglang-url",
        sim_url,
        "--output",
        str(out),
    ]
    ok = str(CORPUS / "sources" / "ok.jsonl")
    if case["entry"] == "recipe":
        return [*base, "--recipe", str(CORPUS / case["file"]), "--run-id", "hostile"]
    if case["entry"] == "run_id":
        return [*base, "--prompts", ok, f"--run-id={case['value']}"]
    return [*base, "--prompts", ok, "--run-id", "hostile", *(a.replace("{corpus}", str(CORPUS)) for a in case["args"])]


@pytest.mark.slow
@pytest.mark.parametrize("case", cases("recipe") + cases("run_id") + cases("flag"), ids=lambda c: c["id"])
def test_bad_recipes_run_ids_and_flags_stop_before_the_server_sees_a_request(case, tmp_path, standin_server):
    before = standin_server.stats()["requests"]["total"]
    out = tmp_path / "out"
    result = cli(*command_for(case, standin_server.url, out))
    assert_stopped_with(result, case["exit"], case["message"])
    assert standin_server.stats()["requests"]["total"] == before  # no request, so no GPU time
    assert not out.exists() or not snapshot(out)  # and nothing written
    assert "hunter2" not in result.stdout + result.stderr  # a password in a URL is never echoed
    assert not Path("/tmp/eagle-datagen-pwned").exists()  # the YAML code-execution tag did not run


def test_run_ids_a_command_line_cannot_carry_are_refused_by_every_step(tmp_path):
    """NUL cannot be in argv; the orchestrator steps take run ids as JSON and must refuse it too."""
    from eagle_datagen.errors import ConfigError
    from eagle_datagen.generation.stage import check_run_id
    from eagle_datagen.generation.steps import RunConfig, finalize_step

    for run_id in ("a\x00b", "../x", "", "x\n"):
        with pytest.raises(ConfigError, match="must match"):
            check_run_id(run_id)
        with pytest.raises(ConfigError, match="must match"):
            RunConfig(output=str(tmp_path), tokenizer="t", sglang_urls=["http://h:1"], run_id=run_id)
    config = {"output": str(tmp_path), "tokenizer": "t", "sglang_urls": ["http://h:1"], "run_id": "../../etc"}
    with pytest.raises(ConfigError, match="must match"):
        finalize_step(config)


def test_export_refuses_a_run_id_that_is_a_path(tmp_path):
    result = cli("export", "--output", str(tmp_path), "--run-id", "../../etc", "--to", str(tmp_path / "x.jsonl"))
    assert_stopped_with(result, 1, "must match")
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize(
    "key", ["../x", "/etc/x", "data/category=../../../x/run=r/part-00000.parquet", "a//b", "a\x00b"]
)
def test_keys_from_a_tampered_plan_or_manifest_cannot_leave_the_root(tmp_path, key):
    from eagle_datagen.storage.objects import put_once
    from eagle_datagen.storage.output_root import LocalOutputRoot, S3OutputRoot, UnsafeKey

    (tmp_path / "root").mkdir()
    root = LocalOutputRoot(str(tmp_path / "root"))
    before = snapshot(tmp_path)
    for write in (root.write_bytes, lambda k, d: put_once(root, k, d), S3OutputRoot("s3://b/p").write_bytes):
        with pytest.raises(UnsafeKey, match="keys stay inside the output root"):
            write(key, b"x")
    with pytest.raises(UnsafeKey):
        root.read_bytes(key)
    assert snapshot(tmp_path) == before
