"""Property-based tests of the manifest reader (storage/manifest.py) and of storage keys: a corrupted, truncated
or wrong-typed manifest gives `ManifestError` (one line naming the file), never a traceback from deep inside,
and no key a reader accepts can reach outside the output root."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle_datagen.storage.manifest import (
    Manifest,
    ManifestError,
    ManifestFile,
    list_manifests,
    manifest_key,
    parse_manifest,
    read_manifest,
    verify_manifest,
)
from eagle_datagen.storage.output_root import LocalOutputRoot, UnsafeKey, check_key
from fuzz_strategies import one_value_changed

FILES = [
    ManifestFile("data/category=math/run=r1/part-00000.parquet", "data", "a" * 64, 1234, rows=10, category="math"),
    ManifestFile("quarantine/category=math/run=r1/part-00000.parquet", "quarantine", "b" * 64, 99, 1, "math"),
    ManifestFile("manifests/run=r1.report.html", "report", "c" * 64, 5000),
]
GOOD = Manifest(
    run_id="r1",
    model="moonshotai/Kimi-K2.5",
    profile="kimi-k2.5",
    provenance={"servers": [{"weight_version": "default"}]},
    sampling={"math": {"sampling_params": {"temperature": 1.0}, "samples_per_prompt": 1}},
    counts={"samples": 11, "data": 10, "quarantine": 1, "reasons": {"no_eos": 1}, "by_category": {}},
    files=FILES,
    created_at="2026-01-01T00:00:00+00:00",
).to_json()
GOOD_BYTES = json.dumps(GOOD, indent=1).encode()
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
UNSAFE_KEYS = st.sampled_from(["../x", "/etc/passwd", "a/../../b", "a//b", "./a", "a\\b", "a\x00b", "", "a/"])


def test_a_manifest_eagle_datagen_wrote_parses():
    assert parse_manifest(GOOD_BYTES, "m.json", "r1") == GOOD


@st.composite
def damaged(draw) -> bytes:
    """The good manifest, damaged one way: truncated, bytes flipped, a value replaced or removed, or noise."""
    how = draw(st.sampled_from(["truncate", "flip", "replace", "remove", "unsafe_key", "noise", "other_json"]))
    if how == "truncate":
        return GOOD_BYTES[: draw(st.integers(0, len(GOOD_BYTES) - 1))]
    if how == "flip":
        data = bytearray(GOOD_BYTES)
        for position in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=4)):
            data[position] ^= draw(st.integers(1, 255))
        return bytes(data)
    if how == "noise":
        return draw(st.binary(max_size=200))
    if how == "other_json":
        return json.dumps(draw(ANY_JSON)).encode()
    if how == "unsafe_key":
        manifest = copy.deepcopy(GOOD)
        manifest["files"][draw(st.integers(0, len(FILES) - 1))]["key"] = draw(UNSAFE_KEYS)
        return json.dumps(manifest).encode()
    return json.dumps(draw(one_value_changed(GOOD, ANY_JSON))).encode()  # a value replaced or removed


def check_parsed(manifest: dict) -> None:
    """What every reader relies on, when a manifest parses."""
    for entry in manifest["files"]:
        check_key(entry["key"])
        assert entry["kind"] in {"data", "quarantine", "rejects", "statistics", "draft_vocab", "report", "summary"}
        assert isinstance(entry["size"], int) and len(entry["sha256"]) == 64
    for name in ("data", "quarantine", "samples"):
        assert isinstance(manifest["counts"][name], int)


@given(damaged())
def test_a_damaged_manifest_is_a_clear_error_or_still_a_manifest(data):
    try:
        manifest = parse_manifest(data, "s3://bucket/manifests/run=r1.json", "r1")
    except ManifestError as exc:
        message = str(exc)
        assert "\n" not in message and "s3://bucket/manifests/run=r1.json" in message
        assert "damaged or not an eagle-datagen manifest" in message
        return
    check_parsed(manifest)


@given(damaged())
def test_readers_of_a_stored_manifest_never_fail_deep_inside(data):
    with tempfile.TemporaryDirectory() as folder:
        root = LocalOutputRoot(folder)
        root.write_bytes(manifest_key("r1"), data)
        for read in (lambda: read_manifest(root, "r1"), lambda: list_manifests(root)):
            try:
                result = read()
            except ManifestError:
                continue
            manifests = result if isinstance(result, list) else [result]
            for manifest in manifests:
                check_parsed(manifest)
                problems = verify_manifest(root, manifest)  # the listed files are not there: reported, not raised
                assert len(problems) == len(manifest["files"])


@given(st.text(max_size=30) | st.sampled_from(["..", "a/..", "../..", "a/./b", "//", "a/b/"]))
def test_no_accepted_key_reaches_outside_the_root(key):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "root"
        try:
            check_key(key)
        except UnsafeKey:
            with pytest.raises(UnsafeKey):
                LocalOutputRoot(str(root)).write_bytes(key, b"x")
            assert not Path(folder, "x").exists()
            return
        target = (root / key).resolve()
        assert target.is_relative_to(root.resolve()) and target != root.resolve()
