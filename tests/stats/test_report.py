"""The HTML report and its JSON summary."""

from __future__ import annotations

import base64
import json
import re
import time

import numpy as np
import pyarrow as pa
import pytest

from eagle_datagen.stats import (
    TokenCounter,
    build_draft_vocab,
    compute_statistics,
    render_report,
    report_summary,
)

TE, EOS = 163607, 163586
IDS = pa.list_(pa.int32())
EVIL = "<script>alert(1)</script>"


def synthetic_run(categories: list[str], per_category: int, seed: int = 0) -> tuple[list[pa.Table], list[pa.Table]]:
    """Kimi-shaped samples (reasoning, </think>, answer, <|im_end|>) with Zipf-distributed ids, a few quarantined."""
    rng = np.random.default_rng(seed)
    data, quarantine = [], []
    for i, category in enumerate(categories):
        prompts, outputs = [], []
        for _ in range(per_category):
            reasoning, answer = rng.integers(20, 400 * (1 + i % 3)), rng.integers(0, 200)
            ids = np.minimum(rng.zipf(1.2, size=reasoning + answer) - 1, 150_000)
            outputs.append([*ids[:reasoning], TE, *ids[reasoning:], EOS])
            prompts.append(np.minimum(rng.zipf(1.2, size=rng.integers(5, 300)) - 1, 150_000).tolist())
        table = pa.table(
            {
                "category": pa.array([category] * per_category),
                "prompt_ids": pa.array(prompts, IDS),
                "output_ids": pa.array(outputs, IDS),
                "finish_reason": pa.array(["stop"] * per_category),
                "completion_tokens": pa.array([len(o) for o in outputs], pa.int32()),
            }
        )
        bad = i + 1
        data.append(table.slice(bad))
        reasons = pa.array((["no_think_end", "truncated"] * bad)[:bad])
        quarantine.append(table.slice(0, bad).append_column("reject_reason", reasons))
    return data, quarantine


@pytest.fixture(scope="module")
def run(kimi_profile):
    data, quarantine = synthetic_run(["math", "code", EVIL], 40)
    counter = TokenCounter(kimi_profile.vocab_size)
    stats = compute_statistics(data, quarantine, kimi_profile, counter=counter)
    return stats, counter.counts


def test_report_is_one_self_contained_page(run):
    stats, counts = run
    meta = {"run id": "nightly-1", "model": "moonshotai/Kimi-K2.5", "sampling": {"temperature": 1.0}}
    page = render_report(stats, counts, "Kimi data", meta)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    for name in ("math", "code", "nightly-1", "moonshotai/Kimi-K2.5", "&quot;temperature&quot;: 1.0"):
        assert name in page
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 3
    assert all(base64.b64decode(image).startswith(b"\x89PNG\r\n\x1a\n") for image in images)
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "<link" not in page and "url(" not in page


def test_report_escapes_every_text(run):
    stats, counts = run
    page = render_report(stats, counts, f"title {EVIL}", {"run id": EVIL, EVIL: "value", "server": {"x": EVIL}})
    assert EVIL not in page and "<script" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5  # title, meta key and value, category rows


def test_report_without_counts_or_samples(kimi_profile):
    empty = compute_statistics([], [], kimi_profile)
    page = render_report(empty, None, "empty run", {})
    assert "No token counts were given." in page and "<img" not in page
    only_quarantine = synthetic_run(["chat"], 3)[1]
    page = render_report(compute_statistics([], only_quarantine, kimi_profile), np.zeros(10, np.int64), "q", {})
    assert page.count('<img src="data:image/png;base64,') == 1  # outcomes only


def test_rendering_ten_categories_is_fast(kimi_profile):
    data, quarantine = synthetic_run([f"category-{i}" for i in range(10)], 30, seed=1)
    counter = TokenCounter(kimi_profile.vocab_size)
    stats = compute_statistics(data, quarantine, kimi_profile, counter=counter)
    render_report(stats, counter.counts, "warm-up", {})  # matplotlib's first use loads fonts
    started = time.perf_counter()
    page = render_report(stats, counter.counts, "ten", {"run id": "r"})
    assert time.perf_counter() - started < 6  # about 1 s on one core; the budget is 3 s, with slack for CI
    assert all(f"category-{i}" in page for i in range(10))


def test_summary_is_compact_json(run):
    stats, counts = run
    draft = build_draft_vocab(counts, k=100)
    summary = report_summary(stats, counts, draft)
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary
    assert summary["samples"] == 120 and summary["quarantined"] == 6 and summary["valid"] == 114
    assert summary["reject_reasons"] == {"no_think_end": 4, "truncated": 2}
    assert set(summary["categories"]) == {"math", "code", EVIL}
    assert "histogram" not in json.dumps(summary)
    assert summary["categories"]["code"]["lengths"]["reasoning"]["count"] == 38
    assert summary["draft_vocab"] == {"k": 100, "vocab_size": 163840, "coverage": round(draft.coverage, 6)}
    assert summary["token_frequency"]["total_tokens"] == int(counts.sum()) == summary["tokens"]["output"]
    bare = report_summary(stats, None, None)
    assert bare["token_frequency"] is None and bare["draft_vocab"] is None


def test_dollar_signs_in_names_are_drawn_as_text(kimi_profile):
    data, quarantine = synthetic_run(["$x^2$", "a$b"], 5)
    page = render_report(compute_statistics(data, quarantine, kimi_profile), None, "t", {})
    assert page.count('<img src="data:image/png;base64,') == 2 and "$x^2$" in page


def test_the_report_shows_the_share_of_cached_prompt_tokens(kimi_profile):
    data, quarantine = synthetic_run(["math", "code"], 10)
    prompts = [pc_lengths(t) for t in data]
    data = [
        t.append_column("cached_tokens", pa.array([n // 2 if i == 0 else 0 for n in p], pa.int32()))
        for i, (t, p) in enumerate(zip(data, prompts, strict=True))
    ]
    stats = compute_statistics(data, quarantine, kimi_profile)
    math = stats["categories"]["math"]["prompt_cache"]
    assert 0.4 < math["cached_share"] <= 0.5 and stats["categories"]["code"]["prompt_cache"]["cached_share"] == 0.0
    page = render_report(stats, None, "cache", {})
    assert "prompt tokens cached" in page and "cached prompt tokens" in page
    assert f"{100 * math['cached_share']:.1f}%" in page and "0.0%" in page
    assert f"{100 * stats['all']['prompt_cache']['cached_share']:.1f}%" in page
    assert report_summary(stats, None, None)["categories"]["math"]["prompt_cache"] == math
    older = {k: v for k, v in stats["all"].items() if k != "prompt_cache"}  # statistics from before the field
    render_report(stats | {"all": older}, None, "older", {})


def pc_lengths(table: pa.Table) -> list[int]:
    return [len(ids) for ids in table["prompt_ids"].to_pylist()]


def test_prompt_rejects_by_source_with_benchmark_overlaps(run, tmp_path):
    from eagle_datagen.cli import main
    from eagle_datagen.stats.prompt_rejects import count_prompt_rejects

    from conftest import user_record, write_jsonl

    prompts = write_jsonl(
        tmp_path / "p.jsonl",
        [user_record("The quick brown fox jumps over the lazy dog " * 2), user_record("fine"), {"category": "x"}],
    )
    bench = write_jsonl(tmp_path / "b.jsonl", [{"question": "The quick brown fox jumps over the lazy dog " * 2}])
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
    assert main([*args, "--benchmark", f"pets={bench}", "--max-reject-rate", "0.5"]) == 0
    counts = count_prompt_rejects((out / "rejects/rejects.jsonl").read_bytes())
    assert counts["by_source"] == {
        str(prompts): {"reasons": {"benchmark_overlap": 1, "missing_messages": 1}, "benchmark_overlaps": {"pets": 1}}
    }
    assert counts["benchmark_overlaps"] == {"pets": 1}
    stats = dict(run[0], prompt_rejects=counts)
    page = render_report(stats, None, "t", {})
    assert "Prompt rejects by source" in page and "benchmark_overlap: 1" in page and "pets: 1" in page
    assert report_summary(stats, None, None)["prompt_rejects"] == counts
