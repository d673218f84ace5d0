"""`eagle-datagen export --to s3://...`: the export written once as objects on a real S3 server (SeaweedFS),
read back with the trainers' readers; the same export again stores nothing new, a different one is refused."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from published_runs import publish, shard_rows
from readers import expected_rows, read_rows

from eagle_datagen.cli import main
from eagle_datagen.storage.output_root import LocalOutputRoot, open_output_root

pytestmark = pytest.mark.slow


def download(uri: str, to: Path) -> list[str]:
    """Every object under `uri` into the folder `to`; their names."""
    root = open_output_root(uri)
    names = sorted(root.list(""))
    to.mkdir(parents=True)
    for name in names:
        (to / name).write_bytes(root.read_bytes(name))
    return names


@pytest.fixture
def published_run(tmp_path):
    root = LocalOutputRoot(str(tmp_path / "root"))
    shards = {"math": [shard_rows(0, 5, "math", "r1"), shard_rows(5, 4, "math", "r1")]}
    publish(root, "r1", shards, k=20)
    return root, [s for rows in shards["math"] for s in rows]


@pytest.mark.parametrize("fmt", ["speculators", "jsonl"])
def test_export_to_s3_is_read_back_by_the_trainers_reader(tmp_path, s3_env, published_run, capsys, fmt):
    root, samples = published_run
    base = f"s3://eagle/exports-{uuid.uuid4().hex[:8]}"
    to = f"{base}/train.jsonl" if fmt == "jsonl" else f"{base}/spec"
    command = ["export", "--output", str(root.path), "--run-id", "r1", "--format", fmt, "--to", to]
    assert main(command) == 0
    assert f"exported 9 samples of run r1 as {fmt} to {to}" in capsys.readouterr().err
    names = download(base if fmt == "jsonl" else to, tmp_path / "back")
    local = tmp_path / "back" / ("train.jsonl" if fmt == "jsonl" else "")
    assert sorted(read_rows(fmt, local, tmp_path)) == sorted(expected_rows(samples))
    info = next(n for n in names if n.endswith("export_info.yaml"))
    assert yaml.safe_load((tmp_path / "back" / info).read_text())["location"] == to  # where the trainer finds it
    assert main(command) == 0  # the same export again: every object is already there, byte for byte
    assert main([*command, "--shuffle-seed", "7"]) == 1  # a different export under the same name
    assert "already holds another export's file: exports are written once" in capsys.readouterr().err


def test_export_to_a_bare_bucket_is_refused_before_any_work(tmp_path, s3_env, published_run, capsys):
    root, _ = published_run
    assert main(["export", "--output", str(root.path), "--run-id", "r1", "--format", "hf", "--to", "s3://eagle"]) == 1
    assert "give the export a name under the bucket" in capsys.readouterr().err
