"""Statistics count prompt tokens sent, served from the prefix cache and computed, per category."""

from __future__ import annotations

import pyarrow as pa

from eagle_datagen.profile import load_profile
from eagle_datagen.stats.statistics import compute_statistics


def table(category: str, prompt_tokens: list[int], cached: list[int | None]) -> pa.Table:
    n = len(prompt_tokens)
    return pa.table(
        {
            "category": [category] * n,
            "prompt_ids": [[1] * p for p in prompt_tokens],
            "output_ids": [[163607, 5, 163586]] * n,
            "finish_reason": ["stop"] * n,
            "prompt_tokens": pa.array(prompt_tokens, pa.int32()),
            "cached_tokens": pa.array(cached, pa.int32()),
        }
    )


def test_prefill_tokens_per_category_and_for_the_run():
    profile = load_profile("kimi-k2.5")
    data = [table("math", [1000, 1000, 1000, 1000], [0, 999, 999, 999]), table("code", [500, 800], [0, 300])]
    quarantine = [table("code", [200], [None]).append_column("reject_reason", pa.array(["no_eos"]))]
    stats = compute_statistics(data, quarantine, profile)
    math = stats["categories"]["math"]["prefill"]
    assert math == {
        "prompt_tokens_sent": 4000,
        "cached_tokens": 2997,
        "computed_tokens": 1003,
        "cached_share": 2997 / 4000,
    }
    code = stats["categories"]["code"]["prefill"]
    assert (code["prompt_tokens_sent"], code["cached_tokens"]) == (1300, 300)  # unreported rows left out
    assert stats["all"]["prefill"]["computed_tokens"] == 1003 + 1000


def test_tables_without_cached_tokens_have_no_share():
    profile = load_profile("kimi-k2.5")
    plain = table("chat", [10], [0]).drop_columns(["cached_tokens"])
    assert compute_statistics([plain], [], profile)["all"]["prefill"]["cached_share"] is None


def test_the_report_shows_prefill_tokens_per_category():
    from eagle_datagen.stats.report import render_report, report_summary

    profile = load_profile("kimi-k2.5")
    data = [table("math", [1000, 1000, 1000, 1000], [0, 999, 999, 999]), table("code", [500, 800], [0, 300])]
    stats = compute_statistics(data, [], profile)
    page = render_report(stats, None, "prefill", {})
    section = page[page.index("<h2>Prefill</h2>") : page.index("<h2>Length distributions</h2>")]
    assert "<td>math</td><td class='n'>4,000</td><td class='n'>2,997</td><td class='n'>1,003</td>" in section
    assert "<td>code</td><td class='n'>1,300</td><td class='n'>300</td><td class='n'>1,000</td>" in section
    assert "<td class='n'>5,300</td><td class='n'>3,297</td><td class='n'>2,003</td><td class='n'>62.2%</td>" in section
    assert report_summary(stats, None, None)["categories"]["code"]["prefill"]["computed_tokens"] == 1000


def test_the_report_has_no_prefill_section_for_statistics_older_than_the_field():
    from eagle_datagen.stats.report import render_report

    stats = compute_statistics([table("math", [10], [0])], [], load_profile("kimi-k2.5"))
    older = {k: {f: v for f, v in g.items() if f != "prefill"} for k, g in stats["categories"].items()}
    all_older = {k: v for k, v in stats["all"].items() if k != "prefill"}
    page = render_report(stats | {"categories": older, "all": all_older}, None, "older", {})
    assert "<h2>Prefill</h2>" not in page
