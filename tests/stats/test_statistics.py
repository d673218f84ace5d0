"""Run statistics and token counts on small hand-built tables with known answers."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from eagle_datagen.profile import parse_profile
from eagle_datagen.stats.statistics import (
    HISTOGRAM_EDGES,
    TokenCounter,
    compute_statistics,
    distribution,
    histogram,
    token_frequency_summary,
)

TE, EOS = 163607, 163586  # Kimi-K2.5 </think> and <|im_end|>
IDS = pa.list_(pa.int32())


def samples(rows: list[tuple], quarantine: bool = False) -> pa.Table:
    """rows: (category, prompt_ids, output_ids, finish_reason[, reject_reason])."""
    columns = {
        "category": pa.array([r[0] for r in rows], pa.string()),
        "prompt_ids": pa.array([r[1] for r in rows], IDS),
        "output_ids": pa.array([r[2] for r in rows], IDS),
        "finish_reason": pa.array([r[3] for r in rows], pa.string()),
        "completion_tokens": pa.array([len(r[2]) for r in rows], pa.int32()),
    }
    if quarantine:
        columns["reject_reason"] = pa.array([r[4] for r in rows], pa.string())
    return pa.table(columns)


DATA = [
    samples(
        [
            ("math", [1, 2, 3], [10, 11, TE, 20, 21, EOS], "stop"),  # reasoning 2, answer 2
            ("math", [1, 2, 3, 4, 5], [TE, 30, EOS], "stop"),  # reasoning 0, answer 1
            ("math", [1, 2], [40, 41, 42, 43], "length"),  # no think end: no reasoning/answer
        ]
    ),
    samples([("code", [7], [1, 2, 3, TE, EOS], "stop")]),  # reasoning 3, answer 0
]
QUARANTINE = [
    samples(
        [
            ("math", [1], [5, 6, EOS], "stop", "no_think_end"),
            ("code", [1], [5, 6], "length", "truncated"),
            ("code", [1], [5], "abort", "no_think_end"),
        ],
        quarantine=True,
    )
]


def test_counts_by_outcome_reason_and_finish(kimi_profile):
    stats = compute_statistics(DATA, QUARANTINE, kimi_profile)
    math, code, everything = stats["categories"]["math"], stats["categories"]["code"], stats["all"]
    assert list(stats["categories"]) == ["code", "math"]
    assert (math["samples"], math["valid"], math["quarantined"]) == (4, 3, 1)
    assert (code["samples"], code["valid"], code["quarantined"]) == (3, 1, 2)
    assert (everything["samples"], everything["valid"], everything["quarantined"]) == (7, 4, 3)
    assert math["reject_reasons"] == {"no_think_end": 1}
    assert code["reject_reasons"] == {"no_think_end": 1, "truncated": 1}
    assert everything["reject_reasons"] == {"no_think_end": 2, "truncated": 1}
    assert math["finish_reasons"] == {"stop": 3, "length": 1}
    assert math["finish_reasons_by_outcome"] == {"data": {"stop": 2, "length": 1}, "quarantine": {"stop": 1}}
    assert everything["finish_reasons"] == {"stop": 4, "length": 2, "abort": 1}
    assert math["without_think_end"] == 1 and code["without_think_end"] == 0


def test_lengths_split_reasoning_and_answer(kimi_profile):
    stats = compute_statistics(DATA, QUARANTINE, kimi_profile)
    math = stats["categories"]["math"]["lengths"]
    assert math["prompt"] | {"histogram": None} == {
        "count": 3, "mean": round(10 / 3, 3), "p50": 3, "p90": 5, "p99": 5, "max": 5, "histogram": None
    }  # fmt: skip
    assert (math["output"]["count"], math["output"]["max"], math["output"]["p50"]) == (3, 6, 4)
    assert (math["reasoning"]["count"], math["reasoning"]["mean"], math["reasoning"]["max"]) == (2, 1.0, 2)
    assert (math["answer"]["count"], math["answer"]["mean"], math["answer"]["max"]) == (2, 1.5, 2)
    everything = stats["all"]
    assert everything["tokens"] == {"prompt": 11, "reasoning": 5, "answer": 3, "output": 18}
    assert everything["lengths"]["reasoning"]["histogram"]["counts"][:5] == [1, 0, 1, 1, 0]  # 0, 2, 3
    assert stats["categories"]["code"]["lengths"]["answer"] | {"histogram": None} == {
        "count": 1, "mean": 0.0, "p50": 0, "p90": 0, "p99": 0, "max": 0, "histogram": None
    }  # fmt: skip


def test_only_the_final_eos_is_left_out_of_the_answer_and_the_first_think_end_splits(kimi_profile):
    table = samples(
        [
            ("a", [1], [5, TE, 6, EOS, 7, EOS], "stop"),  # answer: 6, EOS, 7 -> 3
            ("a", [1], [5, TE, 6, TE, 7], "length"),  # first think end at 1; answer 6, TE, 7 -> 3
            ("a", [1], [TE], "length"),  # reasoning 0, answer 0
            ("a", [1], [], "abort"),  # empty output: no think end
        ]
    )
    lengths = compute_statistics([table], [], kimi_profile)["all"]["lengths"]
    assert lengths["reasoning"]["count"] == 3 and lengths["reasoning"]["max"] == 1
    assert lengths["answer"]["histogram"]["counts"][:4] == [1, 0, 0, 2]
    assert lengths["output"]["histogram"]["counts"][0] == 1


def test_percentiles_are_observed_lengths(kimi_profile):
    table = samples([("x", [1] * n, [9] * n, "stop") for n in range(1, 101)])
    dist = compute_statistics([table], [], kimi_profile)["all"]["lengths"]["output"]
    assert {k: dist[k] for k in ("count", "mean", "p50", "p90", "p99", "max")} == {
        "count": 100, "mean": 50.5, "p50": 50, "p90": 90, "p99": 99, "max": 100
    }  # fmt: skip
    assert sum(dist["histogram"]["counts"]) == 100
    assert dist["histogram"]["edges"] == list(HISTOGRAM_EDGES)


def test_histogram_bins_are_fixed_and_log_spaced():
    edges = np.asarray(HISTOGRAM_EDGES)
    assert edges[:9].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8] and edges[-1] == 2**20
    assert np.all(np.diff(edges) > 0)
    ratios = edges[20:] / edges[19:-1]
    assert np.allclose(ratios, 2**0.25, rtol=0.05)
    counts = histogram(np.array([0, 0, 1, 7, 8, 9, 2**20, 5 * 2**20]))
    assert len(counts) == len(edges) - 1 and sum(counts) == 8
    assert counts[0] == 2 and counts[1] == 1 and counts[7] == 1 and counts[8] == 2 and counts[-1] == 2


def test_empty_distribution_and_empty_run_are_json(kimi_profile):
    assert distribution(np.array([], dtype=np.int64)) | {"histogram": None} == {
        "count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None, "histogram": None
    }  # fmt: skip
    stats = compute_statistics([], [], kimi_profile)
    assert stats["all"]["samples"] == 0 and stats["categories"] == {}
    json.dumps(stats, allow_nan=False)


def test_chunked_sliced_and_null_inputs_give_the_same_answers(kimi_profile):
    whole = pa.concat_tables(DATA)
    chunked = pa.Table.from_batches(whole.to_batches(max_chunksize=1))
    junk = samples([("junk", [99], [TE, TE], "stop")])
    sliced = pa.concat_tables([junk, whole, junk]).combine_chunks().slice(1, whole.num_rows)
    assert sliced["output_ids"].chunks[0].offset == 1
    expected = compute_statistics(DATA, QUARANTINE, kimi_profile)
    assert compute_statistics([chunked], QUARANTINE, kimi_profile) == expected
    assert compute_statistics([sliced], QUARANTINE, kimi_profile) == expected
    with_null = whole.set_column(2, "output_ids", pa.array([[1, TE, EOS], None, [TE], [TE, 2]], IDS))
    lengths = compute_statistics([with_null], [], kimi_profile)["all"]["lengths"]
    assert lengths["reasoning"]["count"] == 3 and lengths["output"]["histogram"]["counts"][0] == 1


def test_stats_are_json_and_name_the_profile(kimi_profile):
    stats = compute_statistics(DATA, QUARANTINE, kimi_profile)
    assert json.loads(json.dumps(stats, allow_nan=False)) == stats
    assert stats["profile"]["think_end_id"] == TE and stats["profile"]["eos_id"] == EOS
    assert stats["schema"] == "eagle-datagen/stats/v1"


def test_missing_columns_are_named(kimi_profile):
    with pytest.raises(ValueError, match=r"data table lacks column\(s\) \['output_ids'\]"):
        compute_statistics([DATA[0].drop_columns(["output_ids"])], [], kimi_profile)
    no_reason = QUARANTINE[0].drop_columns(["reject_reason"])
    assert compute_statistics([], [no_reason], kimi_profile)["all"]["reject_reasons"] == {"(null)": 3}


def test_other_profiles_use_their_own_token_ids():
    profile = parse_profile(
        {
            "name": "tiny",
            "model": "x/tiny",
            "vocab_size": 100,
            "context_length": 1000,
            "thinking": "generated",
            "tokens": {"think_start": {"text": "<t>", "id": 97}, "think_end": {"text": "</t>", "id": 98},
                       "eos": {"text": "<e>", "id": 99}},
            "prompt_suffix": [{"text": "a", "id": 5}],
        }
    )  # fmt: skip
    table = samples([("a", [1], [97, 3, 4, 98, 5, 99], "stop")])
    lengths = compute_statistics([table], [], profile)["all"]["lengths"]
    assert (lengths["reasoning"]["max"], lengths["answer"]["max"]) == (3, 1)


# --- token counts ------------------------------------------------------------------------------------------


def test_counter_counts_output_ids_only():
    counter = TokenCounter(163840)
    assert counter.add(DATA[0]) == 13
    expected = np.bincount([10, 11, TE, 20, 21, EOS, TE, 30, EOS, 40, 41, 42, 43], minlength=163840)
    assert np.array_equal(counter.counts, expected) and counter.counts.dtype == np.int64
    assert (counter.total, counter.distinct) == (13, 11)


def test_counter_counts_only_the_slice_of_a_sliced_table():
    counter = TokenCounter(50)
    table = samples([("a", [1], [1, 1], "stop"), ("a", [1], [2, 3], "stop"), ("a", [1], [4], "stop")])
    counter.add(table.slice(1, 1))
    assert counter.counts[[1, 2, 3, 4]].tolist() == [0, 1, 1, 0]


def test_counter_merge_and_bytes_round_trip():
    a, b, both = TokenCounter(163840), TokenCounter(163840), TokenCounter(163840)
    a.add(DATA[0])
    b.add(DATA[1])
    both.add(DATA[0])
    both.add(DATA[1])
    restored = TokenCounter.from_bytes(a.to_bytes())
    assert np.array_equal(restored.counts, a.counts) and restored.vocab_size == 163840
    assert np.array_equal(restored.merge(b).counts, both.counts)
    with pytest.raises(ValueError, match="cannot merge"):
        a.merge(TokenCounter(10))


def test_counter_rejects_ids_outside_the_vocabulary():
    counter = TokenCounter(10)
    with pytest.raises(ValueError, match="token id 12 is outside the vocabulary of 10"):
        counter.add(samples([("a", [1], [1, 12], "stop")]))
    with pytest.raises(ValueError, match="negative"):
        counter.add_ids(np.array([-1, 2]))
    assert counter.total == 0


def test_compute_statistics_fills_a_counter_in_the_same_pass(kimi_profile):
    counter = TokenCounter(kimi_profile.vocab_size)
    compute_statistics(DATA, QUARANTINE, kimi_profile, counter=counter)
    assert counter.total == 18 and counter.counts[TE] == 3 and counter.counts[5] == 0  # quarantine not counted


def test_token_frequency_summary_coverage():
    counts = np.zeros(70000, dtype=np.int64)
    counts[:1500] = 2
    counts[1500:3000] = 1
    summary = token_frequency_summary(counts)
    assert (summary["distinct_tokens"], summary["total_tokens"], summary["vocab_size"]) == (3000, 4500, 70000)
    assert summary["coverage_top_k"] == {
        "1000": round(2000 / 4500, 6), "8000": 1.0, "16000": 1.0, "32000": 1.0, "64000": 1.0
    }  # fmt: skip
    assert summary["tokens_for_coverage"] == {"0.9": 2550, "0.95": 2775, "0.99": 2955}
    empty = token_frequency_summary(np.zeros(10, dtype=np.int64))
    assert empty["total_tokens"] == 0 and empty["coverage_top_k"]["1000"] == 0.0
    json.dumps(summary, allow_nan=False)


def with_cache(table: pa.Table, cached: list[int | None], prompt_tokens: list[int] | None = None) -> pa.Table:
    table = table.append_column("cached_tokens", pa.array(cached, pa.int32()))
    if prompt_tokens is not None:
        table = table.append_column("prompt_tokens", pa.array(prompt_tokens, pa.int32()))
    return table


def test_prompt_cache_share_overall_and_per_category(kimi_profile):
    """sum(cached_tokens) / sum(prompt_tokens) over the samples that report cached_tokens, valid or not."""
    data = [
        with_cache(DATA[0], [2, 0, None], [3, 5, 2]),  # math: the third did not report
        with_cache(DATA[1], [1]),  # code, no prompt_tokens column: prompt length counts (1)
    ]
    quarantine = [with_cache(QUARANTINE[0], [1, None, 0], [1, 1, 1])]  # math 1/1, code: one reported, 0/1
    stats = compute_statistics(data, quarantine, kimi_profile)
    assert stats["categories"]["math"]["prompt_cache"] == {
        "samples_reporting": 3,
        "cached_tokens": 3,
        "prompt_tokens": 9,
        "cached_share": round(3 / 9, 6),
    }
    assert stats["categories"]["code"]["prompt_cache"] == {
        "samples_reporting": 2,
        "cached_tokens": 1,
        "prompt_tokens": 2,
        "cached_share": 0.5,
    }
    assert stats["all"]["prompt_cache"] == {
        "samples_reporting": 5,
        "cached_tokens": 4,
        "prompt_tokens": 11,
        "cached_share": round(4 / 11, 6),
    }
    json.dumps(stats, allow_nan=False)


def test_prompt_cache_is_unknown_when_no_sample_reports_it(kimi_profile):
    stats = compute_statistics(DATA, QUARANTINE, kimi_profile)  # tables without the column (older shards)
    assert stats["all"]["prompt_cache"] == {
        "samples_reporting": 0,
        "cached_tokens": 0,
        "prompt_tokens": 0,
        "cached_share": None,
    }


def test_counts_and_lengths_by_mode(kimi_profile):
    """A table without `mode` (contract v1.0) counts as thinking; an instant answer is all answer (no reasoning,
    not a sample without </think>); per category and mode: samples, valid, quarantined, trained tokens, reasons."""
    instant = samples([("math", [1, 163606, TE], [50, 51, 52, EOS], "stop")]).append_column(
        "mode", pa.array(["instant"], pa.string())
    )
    rejected = samples(
        [("math", [1, 163606, TE], [TE, 5, EOS], "stop", "think_token_in_instant")], quarantine=True
    ).append_column("mode", pa.array(["instant"], pa.string()))
    stats = compute_statistics([*DATA, instant], [*QUARANTINE, rejected], kimi_profile)
    math = stats["categories"]["math"]
    assert math["without_think_end"] == 1  # the thinking sample cut at max_new_tokens, not the instant one
    answer, reasoning = math["lengths"]["answer"], math["lengths"]["reasoning"]
    assert (answer["count"], answer["max"], reasoning["count"]) == (3, 3, 2)
    by_mode = stats["modes"]
    assert by_mode["all"] == {
        "instant": {"samples": 2, "valid": 1, "quarantined": 1, "output_tokens": 4,
                    "reject_reasons": {"think_token_in_instant": 1}},
        "thinking": {"samples": 7, "valid": 4, "quarantined": 3, "output_tokens": 18,
                     "reject_reasons": {"no_think_end": 2, "truncated": 1}},
    }  # fmt: skip
    assert set(by_mode["categories"]["math"]) == {"thinking", "instant"}
    assert set(by_mode["categories"]["code"]) == {"thinking"}
    json.dumps(stats)
