"""Training mixes at export: per-category weights (over- and undersampling, exact and seeded), the mode filter
on the `mode` column (shards written here with it; rows without it are thinking), what export_info.yaml records,
the shuffle of a mixed export, bounded memory, the command line and a recipe's named mixes."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import numpy as np
import pytest
import yaml
from published_runs import publish, shard_rows
from readers import expected_rows, read_rows

from eagle_datagen.cli import main
from eagle_datagen.errors import ConfigError
from eagle_datagen.export.mix import ExportMix, parse_modes, parse_weights, recipe_mix
from eagle_datagen.export.rows import SeqLimit
from eagle_datagen.export.stage import ExportOptions, run_export, shuffled_order
from eagle_datagen.sources.recipe import parse_recipe
from eagle_datagen.storage.output_root import LocalOutputRoot

COUNTS = {"math": 10, "chat": 8, "code": 5}


def samples_of(shards: dict) -> list[dict]:
    return [s for tables in shards.values() for rows in tables for s in rows]


@pytest.fixture
def published(tmp_path):
    """A run of three categories; chat's and code's rows carry a mode column (chat: half instant, one null), math's
    shard was written before the column existed."""
    root = LocalOutputRoot(str(tmp_path / "root"))
    first = 0
    shards = {}
    for category, n in COUNTS.items():
        shards[category] = [shard_rows(first, n, category, "r1")]
        first += 100
    modes = {s["sample_id"]: ("instant" if i % 2 else "thinking") for i, s in enumerate(shards["chat"][0])}
    modes[shards["chat"][0][0]["sample_id"]] = None  # a row of the column's first writers: thinking
    modes |= {s["sample_id"]: "thinking" for s in shards["code"][0]}
    publish(root, "r1", {"math": shards["math"]}, k=None)  # no mode column
    mixed = {"chat": shards["chat"], "code": shards["code"]}
    publish(root, "r2", mixed, k=None, modes=modes, created_at="2026-02-01T00:00:00+00:00")
    return root, shards, modes


def export(root, tmp_path, name: str, run_id: str = "r1", **options) -> tuple[list, dict]:
    target = tmp_path / name
    run_export(root, ExportOptions(format="jsonl", to=str(target), run_id=run_id, **options))
    info = yaml.safe_load(target.with_name(target.name + ".export_info.yaml").read_text())
    return read_rows("jsonl", target, tmp_path), info


def ranked(sample_ids, category: str, seed: int) -> list[str]:
    return sorted(sample_ids, key=lambda s: hashlib.sha256(f"{seed}:{category}:{s}".encode()).digest())


def test_weights_oversample_and_undersample_exactly(published, tmp_path):
    root, shards, _ = published
    rows, info = export(root, tmp_path, "math.jsonl", mix=ExportMix(weights={"math": 2.5}, seed=3))
    ids = Counter(sample_id for sample_id, _, _ in rows)
    math = [s["sample_id"] for s in shards["math"][0]]
    extra = set(ranked(math, "math", 3)[:5])  # round(0.5 x 10) rows a third time, first by the seed's hash
    assert ids == Counter({s: 3 if s in extra else 2 for s in math})
    assert [sample_id for sample_id, _, _ in rows][:2] == [math[0], math[0]]  # unshuffled: copies together
    assert info["rows"]["rows_exported"] == 25 and info["rows"]["rows_read"] == 10
    assert info["mix"]["weights"] == {"math": 2.5} and info["mix"]["seed"] == 3
    assert info["rows_by_category"] == {"math": {"thinking": {"read": 10, "exported": 25}}}
    again, _ = export(root, tmp_path, "again.jsonl", mix=ExportMix(weights={"math": 2.5}, seed=3))
    assert again == rows  # deterministic
    other, _ = export(root, tmp_path, "other.jsonl", mix=ExportMix(weights={"math": 2.5}, seed=4))
    assert Counter(s for s, _, _ in other) != ids  # another seed, another half


def test_a_fraction_is_rounded_halves_up_and_zero_leaves_a_category_out(published, tmp_path):
    root, shards, _ = published
    mix = ExportMix(weights={"chat": 0.5, "code": 0.5}, seed=1)
    rows, info = export(root, tmp_path, "half.jsonl", run_id="r2", mix=mix)
    got = Counter(s for s, _, _ in rows)
    chat, code = ([s["sample_id"] for s in shards[c][0]] for c in ("chat", "code"))
    assert set(got) == set(ranked(chat, "chat", 1)[:4]) | set(ranked(code, "code", 1)[:3])  # 2.5 -> 3
    assert set(got.values()) == {1}
    rows, info = export(root, tmp_path, "nochat.jsonl", run_id="r2", mix=ExportMix(weights={"chat": 0}))
    assert {s for s, _, _ in rows} == set(code) and info["rows_by_category"]["chat"]["instant"]["exported"] == 0


def test_the_mode_filter_reads_the_mode_column_and_counts_per_mode(published, tmp_path):
    root, shards, modes = published
    rows, info = export(root, tmp_path, "instant.jsonl", run_id="r2", mix=ExportMix(modes=("instant",)))
    instant = {s for s, m in modes.items() if m == "instant"}
    assert {s for s, _, _ in rows} == instant
    assert info["rows_by_category"]["chat"] == {
        "instant": {"read": 4, "exported": 4},
        "thinking": {"read": 4, "exported": 0},  # three written thinking, one null: thinking
    }
    assert info["rows_by_category"]["code"] == {"thinking": {"read": 5, "exported": 0}}
    assert info["rows"]["rows_filtered_by_mode"] == 9 and info["mix"]["modes"] == ["instant"]
    # a shard written before the column: every row is thinking
    rows, _ = export(root, tmp_path, "old.jsonl", mix=ExportMix(modes=("thinking",)))
    assert len(rows) == COUNTS["math"]
    with pytest.raises(ConfigError, match="is of a mode the export leaves out: widen --modes"):
        export(root, tmp_path, "none.jsonl", mix=ExportMix(modes=("instant",)))


def test_a_shuffled_mixed_export_is_what_prepare_data_gives_from_the_mixed_jsonl(published, tmp_path):
    """The speculators invariant, with a mix: the rows of the mixed JSONL export (copies included) are the rows
    `prepare-data --seed` reads; it shuffles them, drops rows without a supervised token after its cut, shuffles
    the rest. The shuffled, cut export of the same mix gives that order row for row."""
    root, _, _ = published
    mix = ExportMix(weights={"chat": 3, "code": 0.6}, seed=2)
    mixed, _ = export(root, tmp_path, "mixed.jsonl", run_id="r2", mix=mix)
    cut = 30
    kept = [i for i, (_, ids, mask) in enumerate(mixed) if sum(mask[:cut])]
    expected = [mixed[i] for i in np.asarray(kept)[shuffled_order(np.asarray(kept), len(mixed), 9)]]
    expected = [(s, ids[:cut], mask[:cut]) for s, ids, mask in expected]
    got, info = export(root, tmp_path, "shuffled.jsonl", run_id="r2", mix=mix, shuffle_seed=9, limit=SeqLimit(cut))
    assert got == expected
    assert info["rows"]["rows_exported"] == len(expected)


def test_a_mixed_export_in_small_buckets_is_the_same(published, tmp_path, monkeypatch):
    from eagle_datagen.export import stage

    root, _, _ = published
    mix = ExportMix(weights={"chat": 2.5, "code": 0.4}, seed=5)
    whole, _ = export(root, tmp_path, "whole.jsonl", run_id="r2", mix=mix, shuffle_seed=1)
    monkeypatch.setattr(stage, "SHUFFLE_BUCKET_BYTES", 1)
    monkeypatch.setattr(stage, "SHUFFLE_BATCH_ROWS", 3)
    buckets, _ = export(root, tmp_path, "buckets.jsonl", run_id="r2", mix=mix, shuffle_seed=1)
    assert buckets == whole and len(whole) == 8 * 5 // 2 + 2  # chat 8 x 2.5, code round(0.4 x 5)
    assert not list(tmp_path.glob(".*staging*"))


def test_weights_and_modes_parse_with_one_line_errors():
    assert parse_weights("math=2, chat=0.5") == {"math": 2.0, "chat": 0.5}
    assert parse_modes("instant,thinking") == ("instant", "thinking")
    for bad, message in (("math", "CATEGORY=WEIGHT"), ("math=-1", "from 0"), ("math=x", "not a number"),
                         ("Math=1", "category"), ("math=1,math=2", "twice"), ("math=inf", "from 0")):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            parse_weights(bad)
    with pytest.raises(ConfigError, match="the modes are thinking, instant"):
        parse_modes("fast")


def test_a_mix_naming_a_category_the_run_lacks_is_refused(published, tmp_path):
    root, _, _ = published
    with pytest.raises(ConfigError, match=r"weighs categories \['poetry'\].*fix --mix"):
        export(root, tmp_path, "x.jsonl", mix=ExportMix(weights={"poetry": 2}))
    assert not (tmp_path / "x.jsonl").exists()


def test_the_command_line_and_a_recipe_mix(published, tmp_path, capsys):
    root, shards, _ = published
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "categories:\n  chat: {sources: [a.jsonl]}\n  code: {sources: [b.jsonl]}\n"
        "mixes:\n  phase2: {weights: {chat: 2, code: 0}, modes: [thinking], seed: 7}\n"
    )
    target = tmp_path / "phase2.jsonl"
    args = ["export", "--output", str(root.path), "--run-id", "r2", "--to", str(target)]
    assert main([*args, "--recipe", str(recipe), "--mix", "phase2"]) == 0
    info = yaml.safe_load(target.with_name("phase2.jsonl.export_info.yaml").read_text())
    assert info["mix"] | {"rule": None} == {
        "name": "phase2", "weights": {"chat": 2.0, "code": 0.0}, "modes": ["thinking"], "seed": 7, "rule": None
    }  # fmt: skip
    thinking_chat = 4  # three written thinking and the null one
    assert info["rows"]["rows_exported"] == 2 * thinking_chat
    target.unlink()
    assert main([*args, "--mix", "chat=0.5", "--modes", "thinking,instant", "--mix-seed", "3"]) == 0
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(lines) == 4 + 5
    capsys.readouterr()
    for bad, message in (
        (["--mix", "phase9", "--recipe", str(recipe)], "has no such mix (it has all, phase2)"),
        (["--mix", "phase2"], "a mix name needs --recipe FILE"),
        (["--modes", "fast"], "the modes are thinking, instant"),
    ):
        assert main([*args[:-1], str(tmp_path / "bad.jsonl"), *bad]) == 1
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err


def test_recipe_mixes_are_checked_when_the_recipe_is_read():
    recipe = parse_recipe({"categories": {"chat": {"sources": ["a"]}}, "mixes": {"p1": {"weights": {"chat": 3}}}})
    assert recipe_mix(recipe, "p1") == ExportMix(weights={"chat": 3.0}, name="p1")
    assert recipe_mix(recipe, "all") == ExportMix(name="all")
    for mixes, message in (
        ({"p": {"weights": {"code": 1}}}, "not categories of the recipe"),
        ({"all": {}}, "give the mix another name"),
        ({"p": {"weights": {"chat": -1}}}, "from 0 to 1000"),
        ({"P": {}}, "pattern"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_recipe({"categories": {"chat": {"sources": ["a"]}}, "mixes": mixes})


def test_an_export_without_a_mix_is_unchanged(published, tmp_path):
    root, shards, _ = published
    rows, info = export(root, tmp_path, "plain.jsonl", run_id="r2")
    assert rows == expected_rows(shards["chat"][0] + shards["code"][0])
    assert info["mix"]["weights"] == {"chat": 1.0, "code": 1.0} and info["mix"]["modes"] == ["thinking", "instant"]
