"""`eagle-datagen export` in every format, read back with the reader each trainer uses: ids and masks equal
prompt_ids + output_ids and [0]*prompt + [1]*output row for row, the sample_id index matches, the draft
vocabulary maps mark the same K ids as the published one, and the metadata says what was cut."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from published_runs import VOCAB, assemble, publish, shard_rows
from readers import check_npy_maps, expected_rows, read_rows

from eagle_datagen.cli import main
from eagle_datagen.errors import ConfigError, DataGenError
from eagle_datagen.export import FORMATS
from eagle_datagen.export.rows import SeqLimit
from eagle_datagen.export.stage import ExportOptions, run_export
from eagle_datagen.export.torch_file import read_tensors
from eagle_datagen.stats.draft_vocab import DraftVocab, build_draft_vocab
from eagle_datagen.stats.statistics import TokenCounter
from eagle_datagen.storage.manifest import Manifest, ManifestFile, write_manifest
from eagle_datagen.storage.objects import put_once
from eagle_datagen.storage.output_root import LocalOutputRoot
from eagle_datagen.storage.parquet import encode_shard, samples_table

K = 40


@pytest.fixture
def published(tmp_path):
    root = LocalOutputRoot(str(tmp_path / "root"))
    shards = {
        "math": [shard_rows(0, 7, "math", "r1"), shard_rows(7, 5, "math", "r1")],
        "code": [shard_rows(100, 6, "code", "r1")],
    }
    draft = publish(root, "r1", shards, k=K)
    samples = [s for tables in shards.values() for rows in tables for s in rows]
    return root, samples, draft


def target(tmp_path, fmt: str):
    return tmp_path / ("out.jsonl" if fmt == "jsonl" else f"out-{fmt}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_holds_prompt_plus_output_row_for_row(tmp_path, published, fmt):
    root, samples, draft = published
    summary = run_export(root, ExportOptions(format=fmt, to=str(target(tmp_path, fmt)), run_id="r1"))
    assert summary.rows == len(samples)
    assert read_rows(fmt, target(tmp_path, fmt), tmp_path) == expected_rows(samples)


@pytest.mark.parametrize("fmt", FORMATS)
def test_metadata_names_the_run_its_checksums_the_rows_and_the_training_command(tmp_path, published, fmt):
    root, samples, _ = published
    out = target(tmp_path, fmt)
    run_export(root, ExportOptions(format=fmt, to=str(out), run_id="r1", limit=SeqLimit(30)))
    info_file = out.with_name(out.name + ".export_info.yaml") if fmt == "jsonl" else out / "export_info.yaml"
    info = yaml.safe_load(info_file.read_text())
    manifest = json.loads((root.path / "manifests/run=r1.json").read_text())
    listed = {f["key"]: f["sha256"] for f in manifest["files"] if f["kind"] in ("data", "draft_vocab")}
    assert {i["key"]: i["sha256"] for i in info["inputs"]} == listed
    assert info["source"] | {"output": None} == {
        "kind": "run", "id": "r1", "output": None, "manifest": "manifests/run=r1.json",
        "model": "moonshotai/Kimi-K2.5", "profile": "kimi-k2.5", "weight_version": "w1",
    }  # fmt: skip
    assert info["rows"]["rows_exported"] == len(expected_rows(samples, 30))
    assert info["sequence_length"] == {"max_seq_len": 30, "overlong": "cut"}
    assert info["draft_vocab"]["k"] == K and info["train_command"]
    if fmt != "jsonl":
        readme = (out / "README.md").read_text()
        assert info["train_command"] in readme and "r1" in readme
        assert set(info["files"]) == {p.name for p in out.iterdir()}


def test_training_commands_name_the_trainers_inputs(tmp_path, published):
    root, _, _ = published
    commands = {}
    for fmt in ("speculators", "specforge"):
        run_export(root, ExportOptions(format=fmt, to=str(tmp_path / fmt), run_id="r1", limit=SeqLimit(4096)))
        commands[fmt] = yaml.safe_load((tmp_path / fmt / "export_info.yaml").read_text())["train_command"]
    assert (
        f"--data-path {tmp_path / 'speculators'} --draft-vocab-size {K} --total-seq-len 4096" in commands["speculators"]
    )
    assert f"model.vocab_mapping_path={tmp_path / 'specforge'}/vocab_mapping.pt" in commands["specforge"]
    assert f"data.prompts_path={tmp_path / 'specforge'}/train.jsonl data.max_length=4096" in commands["specforge"]


def test_speculators_folder_is_what_prepare_data_writes(tmp_path, published):
    root, samples, _ = published
    out = tmp_path / "spec"
    run_export(root, ExportOptions(format="speculators", to=str(out), run_id="r1"))
    state = json.loads((out / "state.json").read_text())
    assert state["_format_type"] == "torch"  # prepare-data's set_format("torch"): the trainer reads tensors
    features = json.loads((out / "dataset_info.json").read_text())["features"]
    int64_list = {"feature": {"dtype": "int64", "_type": "Value"}, "_type": "List"}
    assert features == {
        "input_ids": int64_list,
        "loss_mask": int64_list,
        "seq_len": {"dtype": "int64", "_type": "Value"},
    }
    assert [f["filename"] for f in state["_data_files"]] == ["data-00000-of-00001.arrow"]


def test_vocabulary_maps_of_every_format_mark_the_published_ids(tmp_path, published):
    root, _, draft = published
    expected = np.flatnonzero(draft.t2d)
    for fmt in ("speculators", "specforge", "torchspec", "hf"):
        run_export(root, ExportOptions(format=fmt, to=str(tmp_path / fmt), run_id="r1"))
    assert np.array_equal(check_npy_maps(tmp_path / "speculators", K, VOCAB), expected)
    mapping = read_tensors((tmp_path / "specforge" / "vocab_mapping.pt").read_bytes())
    assert set(mapping) == {"d2t", "t2d"}
    assert mapping["d2t"].dtype == np.int64 and mapping["t2d"].dtype == np.bool_ and mapping["t2d"].shape == (VOCAB,)
    assert np.array_equal(np.flatnonzero(mapping["t2d"]), expected)
    assert np.array_equal(np.arange(K) + mapping["d2t"], expected)
    for fmt in ("torchspec", "hf"):
        vocab = DraftVocab.from_safetensors_bytes((tmp_path / fmt / "draft_vocab.safetensors").read_bytes())
        assert np.array_equal(np.flatnonzero(vocab.t2d), expected)


def test_draft_vocab_size_counts_the_supervised_tokens_of_the_exported_rows(tmp_path, published):
    root, samples, _ = published
    out = tmp_path / "spec"
    run_export(
        root, ExportOptions(format="speculators", to=str(out), run_id="r1", limit=SeqLimit(20), draft_vocab_size=12)
    )
    counter = TokenCounter(VOCAB)
    for _, ids, mask in expected_rows(samples, 20):
        counter.add_ids(np.array(ids)[np.array(mask) == 1])
    expected = build_draft_vocab(counter.counts, 12)
    assert np.array_equal(check_npy_maps(out, 12, VOCAB), np.flatnonzero(expected.t2d))
    info = yaml.safe_load((out / "export_info.yaml").read_text())
    assert info["draft_vocab"]["from"] == "the exported rows' supervised tokens"


def test_max_seq_len_cuts_or_drops_as_the_trainers_do_and_counts_it(tmp_path, published):
    root, samples, _ = published
    limit = 25
    cut = run_export(
        root, ExportOptions(format="jsonl", to=str(tmp_path / "cut.jsonl"), run_id="r1", limit=SeqLimit(limit))
    )
    assert read_rows("jsonl", tmp_path / "cut.jsonl", tmp_path) == expected_rows(samples, limit)
    lengths = [(len(s["prompt_ids"]), len(s["prompt_ids"]) + len(s["output_ids"])) for s in samples]
    unsupervised = sum(p >= limit for p, _ in lengths)
    longer = sum(n > limit and p < limit for p, n in lengths)
    assert unsupervised and longer  # the fixture has both kinds
    assert cut.counts["rows_dropped_unsupervised"] == unsupervised and cut.counts["rows_cut"] == longer
    assert cut.counts["tokens_cut"] == sum(n - limit for p, n in lengths if n > limit and p < limit)
    drop = run_export(
        root, ExportOptions(format="jsonl", to=str(tmp_path / "drop.jsonl"), run_id="r1", limit=SeqLimit(limit, "drop"))
    )
    kept = [s["sample_id"] for s, (_, n) in zip(samples, lengths, strict=True) if n <= limit]
    assert [r[0] for r in read_rows("jsonl", tmp_path / "drop.jsonl", tmp_path)] == kept
    assert drop.counts["rows_dropped_overlong"] == longer and drop.counts["rows_cut"] == 0


def test_an_export_that_keeps_no_row_fails_naming_the_limit_as_the_front_end_calls_it(tmp_path, published, capsys):
    """An empty export is no training data: never exit 0 (nor a green export task in the release DAG)."""
    root, _, _ = published
    base = ["export", "--output", str(root.path), "--run-id", "r1", "--format", "jsonl", "--max-seq-len", "2"]
    assert main([*base, "--to", str(tmp_path / "none.jsonl"), "--overlong", "drop"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert "nothing exported: every one of the 18 data rows of run r1 was dropped by the sequence limit" in line
    assert line.endswith("raise --max-seq-len") and not (tmp_path / "none.jsonl").exists()
    airflow = ExportOptions("jsonl", str(tmp_path / "a.jsonl"), "r1", limit=SeqLimit(2, "drop"), front_end="airflow")
    with pytest.raises(ConfigError) as refused:
        run_export(root, airflow)
    assert str(refused.value).endswith("raise the export_max_seq_len param") and "--" not in str(refused.value)


@pytest.mark.parametrize("fmt", ["speculators", "torchspec"])
def test_shuffle_is_prepare_datas_order_and_the_index_follows(tmp_path, published, fmt):
    root, samples, _ = published
    out = tmp_path / fmt
    run_export(root, ExportOptions(format=fmt, to=str(out), run_id="r1", shuffle_seed=0, limit=SeqLimit(30)))
    first = np.random.default_rng(0).permutation(len(samples))  # datasets.shuffle(seed=0) of the rows read
    kept = [r for r in (expected_rows([samples[i]], 30) for i in first) if r]  # prepare-data drops rows
    second = np.random.default_rng(0).permutation(len(kept))  # and shuffles the kept rows again
    assert read_rows(fmt, out, tmp_path) == [kept[i][0] for i in second]
    assert not list(out.glob(".*staging*"))


def test_categories_narrow_the_export(tmp_path, published):
    root, samples, _ = published
    run_export(root, ExportOptions(format="hf", to=str(tmp_path / "hf"), run_id="r1", categories=["code"]))
    rows = read_rows("hf", tmp_path / "hf", tmp_path)
    assert rows == expected_rows([s for s in samples if s["category"] == "code"])
    with pytest.raises(ConfigError, match=r"no data for categories \['chat'\]"):
        run_export(root, ExportOptions(format="hf", to=str(tmp_path / "hf2"), run_id="r1", categories=["chat"]))


def test_a_release_exports_each_sample_once_the_newest_run_winning(tmp_path):
    root = LocalOutputRoot(str(tmp_path / "root"))
    old = {"math": [shard_rows(0, 6, "math", "old", seed=1)]}
    new = {"math": [shard_rows(3, 6, "math", "new", seed=2)], "code": [shard_rows(50, 3, "code", "new")]}
    publish(root, "old", old, k=10, created_at="2026-11-01T00:00:00+00:00")
    publish(root, "new", new, k=10, created_at="2026-11-02T00:00:00+00:00")
    release = assemble(root, "rel1", ["math", "code"], k=30)
    out = tmp_path / "spec"
    summary = run_export(root, ExportOptions(format="speculators", to=str(out), release_id="rel1"))
    assert summary.rows == release["counts"]["samples"] == 6 + 3 + 3
    newest_first = [s for rows in new["math"] for s in rows] + [s for s in old["math"][0] if s["sample_id"][-2:] < "03"]
    order = [s for rows in new["code"] for s in rows]
    expected = {sid: (ids, mask) for sid, ids, mask in expected_rows(newest_first + order)}
    rows = read_rows("speculators", out, tmp_path)
    assert {sid: (ids, mask) for sid, ids, mask in rows} == expected and len(rows) == len(expected)
    published = DraftVocab.from_safetensors_bytes((root.path / release["draft_vocab"]["key"]).read_bytes())
    assert np.array_equal(check_npy_maps(out, 30, VOCAB), np.flatnonzero(published.t2d))
    info = yaml.safe_load((out / "export_info.yaml").read_text())
    assert info["source"]["kind"] == "release" and info["rows"]["superseded_rows_skipped"] == 3
    only_code = run_export(
        root, ExportOptions(format="jsonl", to=str(tmp_path / "c.jsonl"), release_id="rel1", categories=["code"])
    )
    assert only_code.rows == 3


def test_an_altered_shard_is_refused(tmp_path, published):
    root, _, _ = published
    shard = next((root.path / "data" / "category=math").rglob("part-00000.parquet"))
    shard.write_bytes(shard.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(DataGenError, match="does not match the checksum"):
        run_export(root, ExportOptions(format="hf", to=str(tmp_path / "hf"), run_id="r1"))
    assert not list(tmp_path.glob("*hf*"))  # nothing half-written is left, nothing looks finished


def test_command_line_errors_are_one_line(tmp_path, published, capsys):
    root, _, _ = published
    publish(root, "novocab", {"math": [shard_rows(0, 2, "math", "novocab")]}, k=None)
    base = ["export", "--output", str(root.path), "--to"]
    assert main([*base, str(tmp_path / "s"), "--run-id", "novocab", "--format", "specforge"]) == 1
    assert "has no draft vocabulary and specforge needs one" in capsys.readouterr().err
    assert (
        main([*base, str(tmp_path / "s"), "--run-id", "novocab", "--format", "specforge", "--draft-vocab-size", "5"])
        == 0
    )
    assert "exported 2 samples of run novocab as specforge" in capsys.readouterr().err
    assert main([*base, str(tmp_path / "s"), "--run-id", "r1", "--format", "hf"]) == 1
    assert "is not an empty folder" in capsys.readouterr().err
    assert main([*base, str(tmp_path / "x"), "--release-id", "nope", "--format", "hf"]) == 1
    assert "release nope is not under" in capsys.readouterr().err


def test_exports_read_the_run_from_either_backend(tmp_path, output_uri):
    from eagle_datagen.storage.output_root import open_output_root

    root = open_output_root(output_uri)
    shards = {"math": [shard_rows(0, 6, "math", "r1"), shard_rows(6, 6, "math", "r1")]}
    draft = publish(root, "r1", shards, k=20)
    out = tmp_path / "spec"
    run_export(root, ExportOptions(format="speculators", to=str(out), run_id="r1", shuffle_seed=3))
    samples = [s for rows in shards["math"] for s in rows]
    assert sorted(read_rows("speculators", out, tmp_path)) == sorted(expected_rows(samples))
    assert np.array_equal(check_npy_maps(out, 20, VOCAB), np.flatnonzero(draft.t2d))
    assert yaml.safe_load((out / "export_info.yaml").read_text())["source"]["output"] == root.uri


def test_the_command_line_assembles_the_release_the_dag_does(tmp_path):
    """`eagle-datagen release` runs the package's release step, the one the release DAG's task runs."""
    import subprocess
    import sys

    root = LocalOutputRoot(str(tmp_path))
    publish(root, "r1", {"math": [shard_rows(0, 3, "math", "r1")], "code": [shard_rows(3, 2, "code", "r1")]}, k=10)
    result = subprocess.run(
        [sys.executable, "-m", "eagle_datagen.cli", "release", "--output", str(tmp_path), "--release-id", "rel"]
        + ["--draft-vocab-size", "10"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["counts"]["samples"] == 5 and sorted(printed["categories"]) == ["code", "math"]
    assert json.loads(root.read_bytes("releases/release=rel.json"))["counts"]["samples"] == 5


def test_export_counts_rows_per_mode_and_reads_shards_of_contract_1_0(tmp_path):
    """export_info.yaml counts the exported rows per mode; a shard written before the mode column (v1.0: no
    column, no minor version) exports as thinking, in every format, the hf one (every column) included."""
    root = LocalOutputRoot(str(tmp_path / "out"))
    new = [row | {"mode": "instant"} for row in shard_rows(0, 3, "chat", "r")]
    old = samples_table(shard_rows(3, 4, "chat", "r")).drop_columns(["mode"])
    sink = pa.BufferOutputStream()
    pq.write_table(old.replace_schema_metadata({"eagle_datagen.contract": "1"}), sink)
    files = [
        ManifestFile.of(put_once(root, f"data/category=chat/run=r/part-{i:05d}.parquet", data), "data", rows=n,
                        category="chat")
        for i, (data, n) in enumerate(((encode_for_test(new), 3), (sink.getvalue().to_pybytes(), 4)))
    ]  # fmt: skip
    counts = {"samples": 7, "data": 7, "quarantine": 0, "reasons": {}}
    write_manifest(root, Manifest("r", "moonshotai/Kimi-K2.5", "kimi-k2.5", {}, {}, counts, files))
    for fmt in ("jsonl", "hf"):
        to = tmp_path / (fmt + (".jsonl" if fmt == "jsonl" else ""))
        run_export(root, ExportOptions(format=fmt, to=str(to), run_id="r", draft_vocab_size=8))
        info_path = to / "export_info.yaml" if fmt == "hf" else tmp_path / "jsonl.jsonl.export_info.yaml"
        assert yaml.safe_load(info_path.read_text())["modes"] == {"instant": 3, "thinking": 4}
    assert len(read_rows("hf", tmp_path / "hf", tmp_path)) == 7
    assert sorted(datasets.load_from_disk(str(tmp_path / "hf"))["mode"]) == ["instant"] * 3 + ["thinking"] * 4


def encode_for_test(rows: list[dict]) -> bytes:
    return encode_shard(samples_table(rows))
