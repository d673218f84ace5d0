"""Hugging Face dataset sources: dataset layouts, saved folders, hf:// offline from the cache, bounded memory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eagle_datagen.errors import SourceError
from eagle_datagen.sources.collect import check_sources, collect_prompts, plans_from_sources

from conftest import REPO

datasets = pytest.importorskip("datasets")


def sharegpt_rows(n: int, start: int = 0) -> list[dict]:
    return [
        {
            "id": f"r{i}",
            "category": "chat",
            "conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": "reply"}],
        }
        for i in range(start, start + n)
    ]


def collect(spec: str, **settings):
    return collect_prompts(plans_from_sources([spec], **settings))


def test_parquet_files_in_a_dataset_layout_read_one_split(tmp_path):
    (tmp_path / "ds" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(sharegpt_rows(5)), tmp_path / "ds/data/train-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(sharegpt_rows(5, 5)), tmp_path / "ds/data/train-00001-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(sharegpt_rows(3, 100)), tmp_path / "ds/data/test-00000-of-00001.parquet")
    train = collect(str(tmp_path / "ds"))
    assert [p.record_id for p in train.prompts] == [f"r{i}" for i in range(10)]
    assert train.prompts[0].origin.endswith("ds:row1")
    test = collect(str(tmp_path / "ds"), split="test")
    assert [p.record_id for p in test.prompts] == ["r100", "r101", "r102"]
    with pytest.raises(SourceError, match="validation"):
        check_sources(plans_from_sources([str(tmp_path / "ds")], split="validation"))


def test_a_saved_dataset_dict_needs_an_existing_split(tmp_path):
    saved = datasets.DatasetDict(
        train=datasets.Dataset.from_list(sharegpt_rows(3)), test=datasets.Dataset.from_list(sharegpt_rows(2, 9))
    )
    saved.save_to_disk(str(tmp_path / "saved"))
    assert len(collect(str(tmp_path / "saved")).prompts) == 3
    assert len(collect(str(tmp_path / "saved"), split="test").prompts) == 2
    with pytest.raises(SourceError, match=r"no split 'dev'; it has \['train', 'test'\]"):
        collect(str(tmp_path / "saved"), split="dev")


def test_without_the_datasets_extra_one_line_names_it(tmp_path, monkeypatch):
    datasets.Dataset.from_list(sharegpt_rows(2)).save_to_disk(str(tmp_path / "saved"))
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` fails, as where the extra is not installed
    with pytest.raises(SourceError, match=r"needs the datasets package: pip install 'eagle-datagen\[datasets\]'"):
        collect(str(tmp_path / "saved"))


def test_split_on_a_plain_file_is_an_error(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps(sharegpt_rows(1)[0]) + "\n")
    with pytest.raises(SourceError, match="only Hugging Face datasets"):
        check_sources(plans_from_sources([str(tmp_path / "p.jsonl")], split="train"))


def _as_if_downloaded(cache: Path, owner: str, name: str, rows: list[dict]) -> None:
    """What `load_dataset(OWNER/NAME)` leaves in the datasets cache (a prepared split as Arrow), built from
    local rows: the hub cannot be reached from here."""
    staging = cache.parent / "staging"
    datasets.Dataset.from_list(rows).save_to_disk(str(staging))
    target = cache / f"{owner}___{name}" / "default" / "0.0.0" / "0123456789abcdef"
    target.mkdir(parents=True)
    shutil.copy(staging / "data-00000-of-00001.arrow", target / f"{name}-train.arrow")
    info = json.loads((staging / "dataset_info.json").read_text())
    info.update(builder_name="parquet", config_name="default", dataset_name=name, version={"version_str": "0.0.0"})
    info["splits"] = {"train": {"name": "train", "num_examples": len(rows), "dataset_name": name}}
    (target / "dataset_info.json").write_text(json.dumps(info))


def _cli(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HOME=str(home), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    command = [
        sys.executable,
        "-m",
        "eagle_datagen.cli",
        "tokenize",
        *args,
        "--tokenizer",
        "standin:kimi-k2.5",
        "--trust-remote-code",
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)


def test_hub_dataset_offline_from_the_cache_and_a_one_line_error_when_not_cached(tmp_path, standin_dir):
    home = tmp_path / "hf"
    _as_if_downloaded(home / "datasets", "someone", "chats", sharegpt_rows(4))
    done = _cli(["--prompts", "hf://datasets/someone/chats", "--output", str(tmp_path / "out")], home)
    assert done.returncode == 0, done.stderr
    assert "tokenized 4 prompts from 4 records" in done.stdout
    missing = _cli(["--prompts", "hf://datasets/someone/absent?split=test", "--output", str(tmp_path / "o2")], home)
    assert missing.returncode == 1
    [line] = [line for line in missing.stderr.splitlines() if line.startswith("eagle-datagen: error:")]
    assert "hf://datasets/someone/absent (split test) is neither in the local cache" in line
    assert "offline mode is on" in line and missing.stderr.count("Traceback") == 0


STREAM_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys, threading, time
    from eagle_datagen.sources.collect import plans_from_sources
    from eagle_datagen.sources.resolve import resolve_source
    from eagle_datagen.sources.readers import read_rows

    def rss_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20

    [spec] = plans_from_sources([sys.argv[1]])[0].sources
    [source] = resolve_source(spec.path)
    rows = read_rows(source, spec.source_format())
    first = next(rows)  # imports done, the dataset opened and its first batch read
    before, samples, done = rss_mib(), [], False

    def sample():  # the resident set while reading, every 5 ms (ru_maxrss would include the start-up)
        while not done:
            samples.append(rss_mib())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    count, text_bytes = 1, 0
    for row in rows:
        count += 1
        text_bytes += len(row.value["conversations"][0]["value"])
    done = True
    sampler.join()
    print(json.dumps({"rows": count, "text_mib": text_bytes / 2**20, "rss_before_mib": before,
                      "rss_max_while_reading_mib": max(samples)}))
    """
)


def test_a_100k_row_parquet_dataset_is_streamed_with_bounded_memory(tmp_path):
    """100,000 rows of ~1 KiB of text (about 100 MiB) in four Parquet shards: reading them all grows the
    process by a few batches, not by the dataset."""
    folder = tmp_path / "big" / "data"
    folder.mkdir(parents=True)
    words = [f"word{i}" for i in range(5000)]
    for shard in range(4):
        texts = [
            " ".join(words[(row * 7 + k * 13) % 5000] for k in range(120)) + f" #{row}"
            for row in range(shard * 25_000, (shard + 1) * 25_000)
        ]
        table = pa.table(
            {
                "id": [f"r{i}" for i in range(shard * 25_000, (shard + 1) * 25_000)],
                "conversations": [[{"from": "human", "value": t}, {"from": "gpt", "value": "ok"}] for t in texts],
            }
        )
        pq.write_table(table, folder / f"train-{shard:05d}-of-00004.parquet", row_group_size=2000)
        del texts, table
    done = subprocess.run(
        [sys.executable, "-c", STREAM_SCRIPT, str(tmp_path / "big")],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, HF_HOME=str(tmp_path / "hf")),
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    print("streamed:", measured)
    assert measured["rows"] == 100_000 and measured["text_mib"] > 90
    assert measured["rss_max_while_reading_mib"] - measured["rss_before_mib"] < 96


def test_arrow_files_in_a_dataset_layout(tmp_path):
    (tmp_path / "arrow" / "train").mkdir(parents=True)
    table = pa.Table.from_pylist(sharegpt_rows(4))
    with pa.OSFile(str(tmp_path / "arrow/train/data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:  # the Arrow stream files `datasets` writes
            writer.write_table(table)
    assert [p.record_id for p in collect(str(tmp_path / "arrow")).prompts] == ["r0", "r1", "r2", "r3"]
