"""include/recipes/kimi-k2.5.yaml, unedited, on local fixtures of its datasets' shapes (tests/data/kimi_k25_recipe,
served as the `datasets` cache would hold the real ones: tests/hf_fixture_cache.py): every source reads, every
category gets its prompts in its modes, and a whole run publishes both modes, tool loops included."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_datagen.sources.recipe import load_recipe
from hf_fixture_cache import KIMI_FIXTURES, KIMI_RECIPE, kimi_recipe_cache

from conftest import REPO

CATEGORIES = {
    "chat", "chinese", "multilingual", "tool_calls", "agentic", "creative_writing", "math", "code", "long_context",
}  # fmt: skip
THINK, END = 163606, 163607


BENCHMARKS = REPO / "tests" / "data" / "benchmarks"  # small files in the benchmarks' own formats, as --benchmark-dir
NAMED = ["humaneval", "mt_bench", "gsm8k", "math500", "ceval", "aime", "bfcl", "speed_bench"]


def cli(
    command: str, env: dict[str, str], *args: str, benchmarks: Path | None = BENCHMARKS
) -> subprocess.CompletedProcess:
    base = [sys.executable, "-m", "eagle_datagen.cli", command, "--recipe", str(KIMI_RECIPE)]
    base += ["--tokenizer", "standin:kimi-k2.5", "--trust-remote-code"]
    base += ["--benchmark-dir", str(benchmarks)] if benchmarks is not None else []
    return subprocess.run([*base, *args], env=env, capture_output=True, text=True, cwd=REPO, timeout=600)


def test_the_recipe_names_its_public_sources_shares_and_modes():
    recipe = load_recipe(KIMI_RECIPE)
    assert set(recipe.categories) == CATEGORIES
    fixtures = {entry["dataset"] for entry in json.loads((KIMI_FIXTURES / "datasets.json").read_text())}
    for name, category in recipe.categories.items():
        assert category.max_prompts, f"{name} has no share"
        assert recipe.mode_for(name) == "mix" and 0 < recipe.instant_fraction_for(name) < 1
        for source in category.sources:
            assert source.path.startswith("hf://datasets/"), source.path
            assert source.path.removeprefix("hf://datasets/") in fixtures  # each source has its fixture
    assert [b.name for b in recipe.decontamination.benchmarks] == NAMED  # what the K2.5 drafter cards report
    assert recipe.turns_for("agentic") == "each"
    assert recipe.max_prompt_tokens_for("long_context") == 32768
    text = KIMI_RECIPE.read_text()
    for licence in ("MIT", "Apache-2.0"):
        assert licence in text
    for name in recipe.categories:  # each mode samples as the profile recommends
        sampling = recipe.sampling_for(name)
        assert sampling.temperature is None and sampling.top_p is None


@pytest.fixture(scope="module")
def fixture_env(tmp_path_factory) -> dict[str, str]:
    return kimi_recipe_cache(tmp_path_factory.mktemp("hf"))


def test_every_source_of_the_recipe_reads_and_renders_in_its_modes(fixture_env, tmp_path):
    result = cli("tokenize", fixture_env, "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"items of {NAMED}" in result.stderr  # every benchmark the recipe names was read and indexed
    summary = json.loads((tmp_path / "tokenized" / "_summary.json").read_text())
    assert set(summary["categories"]) == CATEGORIES and summary["rejected"] == 0
    modes: Counter[tuple[str, str]] = Counter()
    for part in tmp_path.glob("tokenized/category=*/part-*.parquet"):
        for row in pq.read_table(part).to_pylist():
            modes[row["category"], row["mode"]] += 1
            assert row["prompt_ids"][-1] == (END if row["mode"] == "instant" else THINK)
            if row["category"] == "long_context":
                assert 8192 <= len(row["prompt_ids"]) <= 32768
    assert {mode for _, mode in modes} == {"thinking", "instant"}
    assert {category for category, _ in modes} == CATEGORIES


def test_without_its_benchmark_files_the_recipe_is_refused_in_one_line_naming_the_file_and_the_fix(
    fixture_env, tmp_path
):
    result = cli("tokenize", fixture_env, "--output", str(tmp_path), benchmarks=None)
    assert result.returncode != 0
    [line] = [line for line in result.stderr.splitlines() if "error:" in line]
    expected = KIMI_RECIPE.parent / "mt_bench" / "question.jsonl"
    assert f"benchmark mt_bench of the decontamination list has no file at {expected}" in line, line
    assert "--benchmark-dir" in line and "remove mt_bench from the recipe's decontamination.benchmarks" in line, line
    assert not (tmp_path / "tokenized").exists()


@pytest.mark.slow
def test_the_recipe_runs_end_to_end(fixture_env, tmp_path):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    config = SimConfig(tokenizer_path="standin:kimi-k2.5", tool_calls=True).with_profile("instant")
    with SimServerThread(config) as sim:
        args = ["--sglang-url", sim.url, "--output", str(tmp_path), "--run-id", "k", "--draft-vocab-size", "8"]
        result = cli("run", fixture_env, *args, "--max-new-tokens", "1000")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.loads((tmp_path / "manifests" / "run=k.json").read_text())
    assert set(manifest["counts"]["by_category"]) == CATEGORIES
    assert set(manifest["counts"]["modes"]) == {"thinking", "instant"}
    assert list(manifest["provenance"]["decontamination"]["benchmarks"]) == NAMED  # every set it was checked against
    assert manifest["validation"]["tokenizer_check_modes"] == ["instant", "thinking"]
    by_mode = manifest["sampling"]["chat"]["sampling_by_mode"]
    assert (by_mode["thinking"]["temperature"], by_mode["instant"]["temperature"]) == (1.0, 0.6)
    rows = [
        row
        for kind in ("data", "quarantine")
        for part in sorted(Path(tmp_path).glob(f"{kind}/category=*/run=k/part-*.parquet"))
        for row in pq.read_table(part).to_pylist()
    ]
    agentic = [r for r in rows if r["category"] == "agentic"]
    assert Counter(r["step_kind"] for r in agentic)["tool_result"] > 0
    for row in agentic:  # a conversation keeps its mode in every step
        same = {r["mode"] for r in agentic if r["conversation_id"] == row["conversation_id"]}
        assert same == {row["mode"]}
