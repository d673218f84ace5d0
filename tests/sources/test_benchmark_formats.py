"""Benchmark files in their published formats (tests/data/benchmarks: fixtures written for the project), read
as prompt sets with their own categories and as decontamination sets, auto-detected or named."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_datagen.cli import main
from eagle_datagen.errors import ConfigError
from eagle_datagen.sources.benchmark_formats import (
    FORMATS,
    bfcl_tool,
    category_name,
    ceval_subject,
    detect_benchmark,
)
from eagle_datagen.sources.benchmarks import BenchmarkSource, load_benchmark
from eagle_datagen.sources.collect import PromptFilters, collect_prompts, plans_from_sources
from eagle_datagen.sources.decontamination import BenchmarkIndex

from conftest import user_record, write_jsonl

DATA = Path(__file__).resolve().parents[1] / "data" / "benchmarks"
SPEED_COLUMNS = ("question_id", "category", "sub_category", "turns", "source", "src_id", "difficulty", "multiturn")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture
def speed_parquet(tmp_path) -> Path:
    """SPEED-Bench's `qualitative` split as it is published: one Parquet file, `turns` a list of strings."""
    rows = lines(DATA / "speed_bench" / "qualitative.jsonl")
    schema = pa.schema(
        [(c, pa.list_(pa.string()) if c == "turns" else pa.bool_() if c == "multiturn" else pa.string())
         for c in SPEED_COLUMNS]
    )  # fmt: skip
    path = tmp_path / "qualitative" / "test-00000-of-00001.parquet"
    path.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def read_prompts(*paths: Path, fmt: str | None = None):
    return collect_prompts(plans_from_sources([str(p) for p in paths], format=fmt))


def test_each_published_format_is_detected_from_its_keys():
    expected = {
        "mt_bench/question.jsonl": "mt_bench",
        "mt_bench/question_prompt.jsonl": "mt_bench",
        "speed_bench/qualitative.jsonl": "speed_bench",
        "speed_bench/prepared.jsonl": "speed_bench",
        "bfcl/BFCL_v3_simple.json": "bfcl",
        "bfcl/BFCL_v3_multi_turn_base.json": "bfcl",
        "gsm8k/test.jsonl": "gsm8k",
        "math500/test.jsonl": "math500",
        "humaneval/HumanEval.jsonl": "humaneval",
        "aime/aime_2024.jsonl": "aime",
    }
    for name, fmt in expected.items():
        assert {detect_benchmark(row) for row in lines(DATA / name)} == {fmt}, name
    assert detect_benchmark({"id": "1", "question": "q", "A": "a", "B": "b", "C": "c", "D": "d"}) == "ceval"
    assert detect_benchmark({"ID": "2024-I-1", "Problem": "p", "Solution": "s", "Answer": 3}) == "aime"
    assert {detect_benchmark(row) for row in lines(DATA / "aime/aime2025-I.jsonl")} == {None}  # its name says it
    # the data contract and the other prompt formats are not benchmarks
    for row in ({"messages": [{"role": "user", "content": "hi"}]}, {"prompt": "hi"}, {"question": "hi"}):
        assert detect_benchmark(row) is None


def test_benchmark_files_are_prompt_sets_with_their_own_categories(tmp_path, speed_parquet):
    files = [DATA / "mt_bench/question.jsonl", speed_parquet, DATA / "gsm8k/test.jsonl", DATA / "math500/test.jsonl",
             DATA / "ceval/val/computer_network_val.csv", DATA / "ceval/test/high_school_physics_test.csv",
             DATA / "humaneval/HumanEval.jsonl"]  # fmt: skip
    result = read_prompts(*files)
    by_id = {p.record_id: p for p in result.prompts}
    assert {p.category for p in result.prompts} == {
        "writing", "math", "coding", "multilingual", "intermediate_algebra", "number_theory", "computer_network",
        "high_school_physics", "code",
    }  # fmt: skip
    first_turn = lines(DATA / "mt_bench/question.jsonl")[0]["turns"][0]
    assert by_id["901"].messages == [{"role": "user", "content": first_turn}]  # a later turn needs an answer first
    assert by_id["sb-0002"].messages[0]["content"].startswith("请把下面这句话翻译成英文")
    assert by_id["line1"].category == "math"  # GSM8K has no ids: where the row was read
    assert by_id["test/number_theory/9002.json"].category == "number_theory"
    ceval = by_id["computer_network-0"].messages[0]["content"]
    assert ceval.startswith("在开放系统互连参考模型中") and ceval.endswith("\nD. 传输层")
    assert by_id["Fixture/0"].messages[0]["content"].startswith("Complete the following Python function.")
    # SPEED-Bench's placeholders are not prompts until its prepare script fills them
    placeholders = [r for r in result.rejects if r.reason == "benchmark_placeholder"]
    assert sorted(r.record_id for r in placeholders) == ["sb-0003", "sb-0004"]
    assert "prepare script" in placeholders[0].detail and result.invalid == 2
    # the copy that names `turns` `prompt`, and the prepared SPEED-Bench file, give the same prompts
    copy = read_prompts(DATA / "mt_bench/question_prompt.jsonl")
    assert [p.prompt_id for p in copy.prompts] == [p.prompt_id for p in read_prompts(files[0]).prompts]
    prepared = {p.record_id: p for p in read_prompts(DATA / "speed_bench/prepared.jsonl").prompts}
    assert prepared["sb-0001"].prompt_id == by_id["sb-0001"].prompt_id and "sb-0003" in prepared


def test_bfcl_functions_become_openai_tools(tmp_path):
    result = read_prompts(DATA / "bfcl", fmt="bfcl")
    by_id = {p.record_id: p for p in result.prompts}
    assert {p.category for p in result.prompts} == {"simple", "parallel_multiple", "multi_turn_base"}
    [tool] = by_id["simple_0"].tools
    assert tool["function"]["name"] == "garden_rectangle_area"  # dots are not allowed in OpenAI names
    parameters = tool["function"]["parameters"]
    assert parameters["type"] == "object" and parameters["properties"]["length"]["type"] == "number"
    multiple = by_id["parallel_multiple_0"]
    assert [m["role"] for m in multiple.messages] == ["system", "user"]
    book, trains = (t["function"] for t in multiple.tools)
    assert book["parameters"]["properties"]["slot"]["type"] == "array"
    assert "type" not in trains["parameters"]["properties"]["options"]  # BFCL's `any`: no type
    assert by_id["multi_turn_base_0"].tools is None  # its functions come from BFCL's class docs, not the row
    assert bfcl_tool({"name": "a.b.c", "parameters": {"type": "dict", "properties": {}}})["function"]["name"] == "a_b_c"


def test_a_named_format_reads_rows_its_keys_would_not_say(tmp_path):
    path = write_jsonl(tmp_path / "gsm.jsonl", [{"question": "How many legs do three spiders have together?"}])
    assert detect_benchmark(lines(path)[0]) is None  # no `#### N` answer: not detected ...
    [prompt] = read_prompts(path, fmt="gsm8k").prompts  # ... but read when named
    assert prompt.category == "math" and prompt.record_id == "line1"


def test_categories_and_subjects():
    assert category_name("Intermediate Algebra", "x") == "intermediate_algebra"
    assert category_name("  ", "fallback") == "fallback" and category_name(None, "f") == "f"
    assert ceval_subject("/d/val/computer_network_val.csv:row1") == "computer_network"
    assert ceval_subject("/d/computer_network/val-00000-of-00001.parquet:row3") == "computer_network"
    assert FORMATS["ceval"].key_columns == ("question",)


def test_every_set_decontaminates_naming_the_set_and_item(tmp_path, speed_parquet):
    sets = {
        "mt_bench": DATA / "mt_bench/question.jsonl",
        "speed_bench": speed_parquet,
        "bfcl": DATA / "bfcl",
        "gsm8k": DATA / "gsm8k/test.jsonl",
        "math500": DATA / "math500/test.jsonl",
        "ceval": DATA / "ceval",
        "humaneval": DATA / "humaneval/HumanEval.jsonl",
    }
    items = [item for name, path in sets.items() for item in load_benchmark(BenchmarkSource(name=name, path=str(path)))]
    index = BenchmarkIndex(items)
    second_turn = lines(DATA / "mt_bench/question.jsonl")[1]["turns"][0]
    bfcl = lines(DATA / "bfcl/BFCL_v3_multi_turn_base.json")[0]["question"][0][0]["content"]
    ceval_question = "在开放系统互连参考模型中，负责在相邻节点之间可靠地传输数据帧并进行差错控制的是哪一层"
    code = lines(DATA / "humaneval/HumanEval.jsonl")[0]["prompt"]
    records = [
        user_record("Please help me with my homework: " + second_turn, id="mt"),
        user_record("Translate please: " + lines(DATA / "speed_bench/qualitative.jsonl")[1]["turns"][0], id="sb"),
        user_record("Another task for you. " + bfcl + " Thanks!", id="bfcl"),
        user_record(lines(DATA / "gsm8k/test.jsonl")[1]["question"], id="gsm"),
        user_record("Solve: " + lines(DATA / "math500/test.jsonl")[0]["problem"], id="math"),
        user_record("请回答下面的问题并说明理由：" + ceval_question + "？", id="ceval"),  # characters are words
        user_record("Fix my code:\n" + code, id="he"),
        user_record("Summarize this article for me.", id="cnn-leak", source="abisee/cnn_dailymail")
        | {"id": "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"},  # a SPEED-Bench placeholder row's source and src_id
        user_record("Write a haiku about the first frost on a quiet vineyard in late October.", id="clean"),
    ]
    path = write_jsonl(tmp_path / "train.jsonl", records)
    result = collect_prompts(plans_from_sources([str(path)]), filters=PromptFilters(benchmarks=index))
    assert [p.record_id for p in result.prompts] == ["clean"]
    found = {r.record_id: (r.benchmark, r.detail) for r in result.rejects}
    assert {k: v[0] for k, v in found.items()} == {
        "mt": "mt_bench", "sb": "speed_bench", "bfcl": "bfcl", "gsm": "gsm8k", "math": "math500", "ceval": "ceval",
        "he": "humaneval", "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567": "speed_bench",
    }  # fmt: skip
    assert "item 902" in found["mt"][1] and "item multi_turn_base_0" in found["bfcl"][1]
    assert "item computer_network-0" in found["ceval"][1] and "item Fixture/0" in found["he"][1]
    assert "placeholder row of source 'abisee/cnn_dailymail'" in found["0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"][1]
    by_source = result.sources[str(path)].benchmark_overlaps
    assert by_source == {"bfcl": 1, "ceval": 1, "gsm8k": 1, "humaneval": 1, "math500": 1, "mt_bench": 1,
                         "speed_bench": 2}  # fmt: skip


def test_placeholders_match_the_hub_spelling_of_a_source(tmp_path, speed_parquet):
    index = BenchmarkIndex(load_benchmark(BenchmarkSource(name="sb", path=str(speed_parquet))))
    src_id = "fixture-problem-77"
    keys = [("hf://datasets/LiveCodeBench/code_generation_lite/", src_id), ("other/set", src_id), (None, src_id)]
    found = index.find([["unrelated text"]] * 3, keys)
    assert [f is not None and f.item.item_id for f in found] == ["sb-0004", False, False]


def test_the_command_line_reports_overlaps_per_set(tmp_path, speed_parquet):
    """`tokenize --benchmark NAME=PATH` with published files: rejects and the summary name each set."""
    leak = lines(DATA / "gsm8k/test.jsonl")[0]["question"]
    prompts = write_jsonl(tmp_path / "p.jsonl", [user_record(leak, id="a"), user_record("a fresh prompt", id="b"),
                                                  user_record("x", id="0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
                                                              source="abisee/cnn_dailymail")])  # fmt: skip
    out = tmp_path / "out"
    args = ["tokenize", "--prompts", str(prompts), "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code",
            "--output", str(out), "--benchmark", f"gsm8k={DATA / 'gsm8k/test.jsonl'}",
            "--benchmark", f"speed={speed_parquet}"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "tokenized/_summary.json").read_text())
    assert summary["sources"][str(prompts)]["benchmark_overlaps"] == {"gsm8k": 1, "speed": 1}
    rejects = [json.loads(line) for line in (out / "rejects/rejects.jsonl").read_text().splitlines()]
    assert sorted(r["benchmark"] for r in rejects) == ["gsm8k", "speed"]


def test_a_benchmark_file_runs_as_prompts_of_eagle_datagen_tokenize(tmp_path, speed_parquet):
    out = tmp_path / "out"
    args = ["tokenize", "--prompts", str(speed_parquet), "--prompts", str(DATA / "bfcl"), "--tokenizer",
            "standin:kimi-k2.5", "--trust-remote-code", "--output", str(out), "--max-reject-rate", "0.5"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "tokenized/_summary.json").read_text())
    assert set(summary["categories"]) >= {"coding", "multilingual", "simple", "parallel_multiple"}


def test_each_benchmark_the_kimi_recipe_names_drops_a_prompt_that_holds_one_of_its_items(tmp_path):
    """The K2.5 recipe's decontamination list, its relative paths read under this folder (as --benchmark-dir): every
    set loads in its format, and a training prompt wrapping one of its items is rejected naming that set."""
    from eagle_datagen.sources.recipe import load_recipe

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "include" / "recipes" / "kimi-k2.5.yaml")
    sources = recipe.decontamination.benchmarks
    records, items = [], []
    for source in sources:
        loaded = load_benchmark(source, DATA)
        items += loaded
        text = max((t for item in loaded for t in item.texts), key=len)  # the longest text: always 13 words or more
        records.append(user_record(f"Here is a task for you.\n{text}\nThanks in advance!", id=source.name))
    records.append(user_record("Write a haiku about the first frost on a quiet vineyard in late October.", id="clean"))
    assert {"aime"} <= {i.benchmark for i in items} and len([i for i in items if i.benchmark == "aime"]) == 5
    path = write_jsonl(tmp_path / "train.jsonl", records)
    result = collect_prompts(plans_from_sources([str(path)]), filters=PromptFilters(benchmarks=BenchmarkIndex(items)))
    assert [p.record_id for p in result.prompts] == ["clean"]
    assert {r.record_id: r.benchmark for r in result.rejects} == {s.name: s.name for s in sources}


def test_a_missing_benchmark_file_is_one_line_naming_it_where_and_the_fix(tmp_path):
    with pytest.raises(ConfigError) as missing:
        load_benchmark(BenchmarkSource(name="gsm8k", path="gsm8k/test.jsonl"), tmp_path, "airflow")
    line = str(missing.value)
    assert "\n" not in line and f"benchmark gsm8k of the decontamination list has no file at {tmp_path}/gsm8k" in line
    assert "EAGLE_DATAGEN_BENCHMARK_DIR names the folder" in line and "remove gsm8k from the recipe's" in line
    (tmp_path / "bfcl").mkdir()  # there, but nothing readable in it: the reason too
    with pytest.raises(ConfigError, match=r"has no file at .*/bfcl: .* \(prompt source folder bfcl holds no"):
        load_benchmark(BenchmarkSource(name="bfcl", path="bfcl"), tmp_path)
