"""Run statistics: what a run produced, per category and for the whole run, and how often each token was trained.

Everything here works on pyarrow Tables of samples (data and quarantine shards) and is vectorised: list columns
are read through their flat values and offsets, never row by row. The result of `compute_statistics` is plain
JSON (ints, floats, strings, lists, dicts) so it can be uploaded beside the data and plotted later without the
raw samples: every length distribution carries its percentiles and a histogram on fixed log-spaced bins.

Length definitions (per valid sample, `output_ids` as the model produced them):
- prompt: `len(prompt_ids)`; output: `len(output_ids)` (the trained tokens);
- reasoning: tokens before the first think_end id (samples without think_end are left out, instant ones too);
- answer: tokens after that think_end, up to but excluding a final EOS (same samples as reasoning), or, for an
  instant sample (modes.py), every token but a final EOS.
Counts by mode (thinking, instant) are `modes` (stats/modes.py).
Percentiles use the inverted-CDF definition: p90 is the smallest observed length that at least 90% of the
samples do not exceed, so it is always a length that occurred.

Prompt cache: `prompt_cache` is the share of prompt tokens the server found in its prefix cache (sum of
`cached_tokens` / sum of `prompt_tokens`) over every sample, valid or quarantined, whose server reported
`cached_tokens` (null: not reported, e.g. a failed request or a shard older than the column).
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eagle_datagen.modes import INSTANT
from eagle_datagen.profile import ModelProfile
from eagle_datagen.stats.conversations import ConversationCounts
from eagle_datagen.stats.modes import ModeCounts, mode_column

STATS_SCHEMA = "eagle-datagen/stats/v1"
ALL = "all"
NULL_LABEL = "(null)"
LENGTH_KINDS = ("prompt", "reasoning", "answer", "output")
PERCENTILES = (50, 90, 99)
COVERAGE_KS = (1000, 8000, 16000, 32000, 64000)
COVERAGE_TARGETS = (0.9, 0.95, 0.99)
DATA_COLUMNS = ("category", "prompt_ids", "output_ids", "finish_reason")
QUARANTINE_COLUMNS = ("category", "finish_reason")


def _log_edges(octaves: int = 20, per_octave: int = 4) -> tuple[int, ...]:
    powers = np.round(2.0 ** (np.arange(octaves * per_octave + 1) / per_octave)).astype(np.int64)
    return tuple(int(x) for x in np.concatenate([[0], np.unique(powers)]))


# Bin i holds lengths in [edges[i], edges[i+1]); lengths at or above the last edge (2**20) go to the last bin.
# Four bins per octave from 1 up; bin 0 holds the zero lengths alone. Fixed, so histograms of different runs,
# shards and categories line up.
HISTOGRAM_EDGES: tuple[int, ...] = _log_edges()
_EDGES = np.asarray(HISTOGRAM_EDGES, dtype=np.int64)


def histogram(lengths: np.ndarray) -> list[int]:
    """Counts of `lengths` on HISTOGRAM_EDGES (len(HISTOGRAM_EDGES) - 1 bins)."""
    nbins = len(_EDGES) - 1
    if len(lengths) == 0:
        return [0] * nbins
    index = np.clip(np.searchsorted(_EDGES, lengths, side="right") - 1, 0, nbins - 1)
    return np.bincount(index, minlength=nbins).astype(np.int64).tolist()


def distribution(lengths: np.ndarray) -> dict[str, Any]:
    """{count, mean, p50, p90, p99, max, histogram: {edges, counts}} of integer lengths (None when empty)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    out: dict[str, Any] = {"count": int(len(lengths))}
    if len(lengths):
        out["mean"] = round(float(lengths.mean()), 3)
        values = np.percentile(lengths, PERCENTILES, method="inverted_cdf")
        out.update({f"p{p}": int(v) for p, v in zip(PERCENTILES, values, strict=True)})
        out["max"] = int(lengths.max())
    else:
        out.update({"mean": None, **{f"p{p}": None for p in PERCENTILES}, "max": None})
    out["histogram"] = {"edges": list(HISTOGRAM_EDGES), "counts": histogram(lengths)}
    return out


class TokenCounter:
    """Frequencies of the trained tokens (`output_ids` of data tables) as an int64 array of length vocab_size.

    Per-shard counters are combined with `merge`; `to_bytes`/`from_bytes` carry them between workers as .npy.
    """

    def __init__(self, vocab_size: int, counts: np.ndarray | None = None):
        if type(vocab_size) is not int or vocab_size <= 0:
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
        if counts is None:
            counts = np.zeros(vocab_size, dtype=np.int64)
        else:
            counts = np.asarray(counts)
            if counts.shape != (vocab_size,):
                raise ValueError(f"counts has shape {counts.shape}, expected ({vocab_size},)")
            counts = counts.astype(np.int64, copy=True)
        self.vocab_size = vocab_size
        self.counts = counts

    def add(self, table: pa.Table | pa.ChunkedArray | pa.Array, column: str = "output_ids") -> int:
        """Count every id of `table[column]` (a list column); returns the number of tokens added."""
        ids = table[column] if isinstance(table, pa.Table) else table
        flat = pc.list_flatten(ids)
        chunks = flat.chunks if isinstance(flat, pa.ChunkedArray) else [flat]
        added = 0
        for chunk in chunks:
            added += self.add_ids(chunk.to_numpy(zero_copy_only=False))
        return added

    def add_ids(self, ids: np.ndarray) -> int:
        """Count a flat array of token ids."""
        ids = np.asarray(ids)
        if ids.size == 0:
            return 0
        if ids.dtype.kind not in "iu":
            raise ValueError(f"token ids must be integers, got dtype {ids.dtype}")
        if ids.dtype.kind == "i" and int(ids.min()) < 0:
            raise ValueError(f"negative token id {int(ids.min())}")
        binned = np.bincount(ids, minlength=self.vocab_size)
        if len(binned) > self.vocab_size:
            raise ValueError(f"token id {len(binned) - 1} is outside the vocabulary of {self.vocab_size} ids")
        self.counts += binned
        return int(ids.size)

    def merge(self, other: TokenCounter) -> TokenCounter:
        """Add another counter's counts into this one (in place); returns self."""
        if other.vocab_size != self.vocab_size:
            raise ValueError(f"cannot merge token counts of vocab {other.vocab_size} into vocab {self.vocab_size}")
        self.counts += other.counts
        return self

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    @property
    def distinct(self) -> int:
        return int(np.count_nonzero(self.counts))

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.save(buffer, self.counts, allow_pickle=False)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> TokenCounter:
        counts = np.load(io.BytesIO(data), allow_pickle=False)
        if counts.ndim != 1 or counts.dtype.kind not in "iu":
            raise ValueError(f"token counts must be a 1-d integer array, got {counts.dtype} {counts.shape}")
        return cls(int(counts.shape[0]), counts)


def token_frequency_summary(counts: np.ndarray) -> dict[str, Any]:
    """Distinct and total trained tokens, and the share covered by the K most frequent ids.

    `coverage_top_k[K]` answers "what share of trained tokens would a draft vocabulary of K ids cover";
    `tokens_for_coverage[share]` is the smallest K that covers at least that share.
    """
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    distinct = int(np.count_nonzero(counts))
    cumulative = np.cumsum(np.sort(counts)[::-1])
    coverage: dict[str, float] = {}
    needed: dict[str, int | None] = {}
    for k in COVERAGE_KS:
        covered = int(cumulative[min(k, len(cumulative)) - 1]) if len(cumulative) else 0
        coverage[str(k)] = round(covered / total, 6) if total else 0.0
    for share in COVERAGE_TARGETS:
        needed[str(share)] = int(np.searchsorted(cumulative, share * total, side="left")) + 1 if total else None
    return {
        "vocab_size": int(len(counts)),
        "distinct_tokens": distinct,
        "total_tokens": total,
        "coverage_top_k": coverage,
        "tokens_for_coverage": needed,
    }


class _Labels:
    """Strings to small ints, in first-seen order."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def encode(self, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks else pa.array([], pa.string())
        if not pa.types.is_string(column.type):
            column = column.cast(pa.string())
        encoded = pc.dictionary_encode(pc.fill_null(column, NULL_LABEL))
        mapping = np.array([self.ids.setdefault(s, len(self.ids)) for s in encoded.dictionary.to_pylist()] or [0])
        return mapping[encoded.indices.to_numpy(zero_copy_only=False)].astype(np.int32)

    def names(self) -> list[str]:
        return list(self.ids)


def _list_lengths(column: pa.ChunkedArray) -> np.ndarray:
    lengths = pc.fill_null(pc.list_value_length(column), 0)
    return lengths.to_numpy().astype(np.int64) if len(lengths) else np.zeros(0, np.int64)


def _reasoning_and_answer(
    column: pa.ChunkedArray, think_end: int, eos: int, instant: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: tokens before the first think_end, and after it up to a final EOS; -1 where think_end is absent.
    Rows of `instant` (a mask) have no reasoning (-1) and their whole output, but a final EOS, is the answer."""
    parts_r, parts_a = [], []
    row = 0
    for chunk in column.chunks:
        n = len(chunk)
        offsets = chunk.offsets.to_numpy().astype(np.int64)
        start, stop = int(offsets[0]), int(offsets[-1])
        values = chunk.values.slice(start, stop - start).to_numpy(zero_copy_only=False)
        offsets -= start
        lengths = np.diff(offsets)
        positions = np.flatnonzero(values == think_end)
        rows = np.searchsorted(offsets, positions, side="right") - 1
        rows, first = np.unique(rows, return_index=True)
        reasoning = np.full(n, -1, dtype=np.int64)
        reasoning[rows] = positions[first] - offsets[rows]
        ends_eos = np.zeros(n, dtype=bool)
        nonempty = lengths > 0
        ends_eos[nonempty] = values[offsets[1:][nonempty] - 1] == eos
        answer = np.where(reasoning >= 0, np.maximum(lengths - reasoning - 1 - ends_eos, 0), -1)
        if instant is not None:
            rows_instant = instant[row : row + n]
            reasoning[rows_instant] = -1
            answer[rows_instant] = np.maximum(lengths - ends_eos, 0)[rows_instant]
        row += n
        if chunk.null_count:
            valid = chunk.is_valid().to_numpy(zero_copy_only=False)
            reasoning[~valid] = -1
            answer[~valid] = -1
        parts_r.append(reasoning)
        parts_a.append(answer)
    if not parts_r:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(parts_r), np.concatenate(parts_a)


def _cache_counts(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Rows that report cached_tokens: (row mask, cached tokens, prompt tokens); None without the column."""
    if "cached_tokens" not in table.column_names:
        return None
    cached = table["cached_tokens"]
    reported = cached.is_valid().to_numpy(zero_copy_only=False) if len(cached) else np.zeros(0, bool)
    values = pc.fill_null(cached, 0).to_numpy().astype(np.int64) if len(cached) else np.zeros(0, np.int64)
    if "prompt_tokens" in table.column_names:
        prompt = pc.fill_null(table["prompt_tokens"], 0).to_numpy().astype(np.int64)
    elif "prompt_ids" in table.column_names:
        prompt = _list_lengths(table["prompt_ids"])
    else:
        return None
    return reported, values[reported], prompt[reported]


def _prompt_cache(samples: int, cached: int, prompt: int) -> dict[str, Any]:
    return {
        "samples_reporting": samples,
        "cached_tokens": cached,
        "prompt_tokens": prompt,
        "cached_share": round(cached / prompt, 6) if prompt else None,
    }


def _require(table: pa.Table, columns: tuple[str, ...], kind: str) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValueError(f"{kind} table lacks column(s) {missing}; it has {table.column_names}")


def compute_statistics(
    data: Iterable[pa.Table],
    quarantine: Iterable[pa.Table],
    profile: ModelProfile,
    counter: TokenCounter | None = None,
    trained: Callable[[pa.Table], pa.Array] | None = None,
) -> dict[str, Any]:
    """Statistics of a run, per category and for the whole run ("all"), as a JSON-serialisable dict.

    Counts (samples, valid, quarantined, reject reasons, finish reasons) cover every sample; the length
    distributions and token totals cover the valid samples (the data tables), which is what gets trained.
    When `counter` is given, the data tables' output ids are counted into it in the same pass: those of the rows
    `trained` keeps (a boolean mask per table; held-out rows are never trained on: heldout.py), else all.
    """
    think_end, eos = profile.think_end.id, profile.eos.id
    categories, finishes, rejects = _Labels(), _Labels(), _Labels()
    data_cat: list[np.ndarray] = []
    lengths: dict[str, list[np.ndarray]] = {kind: [] for kind in LENGTH_KINDS}
    finish_counts: Counter[tuple[str, int, int]] = Counter()  # (outcome, category, finish) -> n
    reject_counts: Counter[tuple[int, int]] = Counter()  # (category, reason) -> n
    quarantined: Counter[int] = Counter()
    cache: dict[int, list[int]] = {}  # category -> [samples reporting, cached tokens, prompt tokens]

    def count_cache(cat: np.ndarray, table: pa.Table) -> None:
        found = _cache_counts(table)
        if found is None:
            return
        reported, cached, prompt = found
        for c in np.unique(cat[reported]):
            rows = cat[reported] == c
            entry = cache.setdefault(int(c), [0, 0, 0])
            entry[0] += int(rows.sum())
            entry[1] += int(cached[rows].sum())
            entry[2] += int(prompt[rows].sum())

    conversations = ConversationCounts()
    modes = ModeCounts()
    instant_parts: list[np.ndarray] = []

    def count_pairs(cat: np.ndarray, other: np.ndarray) -> Counter[tuple[int, int]]:
        keys, n = np.unique(cat.astype(np.int64) << 32 | other.astype(np.int64), return_counts=True)
        return Counter({(int(k >> 32), int(k & 0xFFFFFFFF)): int(c) for k, c in zip(keys, n, strict=True)})

    for table in data:
        _require(table, DATA_COLUMNS, "data")
        if table.num_rows == 0:
            continue
        conversations.add(table)
        modes.add(table, "data")
        cat = categories.encode(table["category"])
        for (c, f), n in count_pairs(cat, finishes.encode(table["finish_reason"])).items():
            finish_counts["data", c, f] += n
        data_cat.append(cat)
        lengths["prompt"].append(_list_lengths(table["prompt_ids"]))
        lengths["output"].append(_list_lengths(table["output_ids"]))
        instant = pc.equal(mode_column(table), INSTANT).to_numpy(zero_copy_only=False).astype(bool)
        instant_parts.append(instant)
        reasoning, answer = _reasoning_and_answer(table["output_ids"], think_end, eos, instant)
        lengths["reasoning"].append(reasoning)
        lengths["answer"].append(answer)
        if counter is not None:
            counter.add(table if trained is None else table.filter(trained(table)))
        count_cache(cat, table)

    for table in quarantine:
        _require(table, QUARANTINE_COLUMNS, "quarantine")
        if table.num_rows == 0:
            continue
        conversations.add(table)
        modes.add(table, "quarantine")
        cat = categories.encode(table["category"])
        for (c, f), n in count_pairs(cat, finishes.encode(table["finish_reason"])).items():
            finish_counts["quarantine", c, f] += n
        if "reject_reason" in table.column_names:
            reasons = rejects.encode(table["reject_reason"])
        else:
            reasons = rejects.encode(pa.nulls(table.num_rows, pa.string()))
        reject_counts.update(count_pairs(cat, reasons))
        for c, n in zip(*np.unique(cat, return_counts=True), strict=True):
            quarantined[int(c)] += int(n)
        count_cache(cat, table)

    cat_all = np.concatenate(data_cat) if data_cat else np.zeros(0, np.int32)
    merged = {kind: np.concatenate(parts) if parts else np.zeros(0, np.int64) for kind, parts in lengths.items()}
    instant_all = np.concatenate(instant_parts) if instant_parts else np.zeros(0, bool)
    finish_names, reject_names = finishes.names(), rejects.names()

    def group(selected: set[int]) -> dict[str, Any]:
        mask = np.isin(cat_all, list(selected))
        valid = int(mask.sum())
        n_quarantined = sum(quarantined[c] for c in selected)
        by_outcome: dict[str, Counter[str]] = {"data": Counter(), "quarantine": Counter()}
        for (outcome, c, f), n in finish_counts.items():
            if c in selected:
                by_outcome[outcome][finish_names[f]] += n
        reasons: Counter[str] = Counter()
        for (c, r), n in reject_counts.items():
            if c in selected:
                reasons[reject_names[r]] += n
        dists, tokens = {}, {}
        for kind in LENGTH_KINDS:
            values = merged[kind][mask]
            if kind in ("reasoning", "answer"):
                values = values[values >= 0]
            dists[kind] = distribution(values)
            tokens[kind] = int(values.sum())
        # thinking samples without </think> (an instant sample has none by design)
        without_think_end = int(np.count_nonzero((merged["reasoning"][mask] < 0) & ~instant_all[mask]))
        cache_totals = [sum(cache.get(c, [0, 0, 0])[i] for c in selected) for i in range(3)]
        sent, cached = cache_totals[2], cache_totals[1]
        return {
            # every sample whose server reported cached_tokens (data and quarantine): GPU prefill work
            "prefill": {
                "prompt_tokens_sent": sent,
                "cached_tokens": cached,
                "computed_tokens": sent - cached,
                "cached_share": cached / sent if sent else None,
            },
            "samples": valid + n_quarantined,
            "valid": valid,
            "quarantined": n_quarantined,
            "reject_reasons": _ordered(reasons),
            "finish_reasons": _ordered(by_outcome["data"] + by_outcome["quarantine"]),
            "finish_reasons_by_outcome": {k: _ordered(v) for k, v in by_outcome.items()},
            "without_think_end": without_think_end,
            "tokens": tokens,
            "lengths": dists,
            "prompt_cache": _prompt_cache(*cache_totals),
        }

    names = categories.names()
    multi_turn = conversations.to_json()
    return ({"conversations": multi_turn} if multi_turn else {}) | {
        "modes": modes.to_json(),
        "schema": STATS_SCHEMA,
        "profile": {
            "name": profile.name,
            "model": profile.model,
            "vocab_size": profile.vocab_size,
            "think_end_id": think_end,
            "eos_id": eos,
        },
        "lengths_cover": "valid samples (data tables); percentiles are inverted-CDF (observed lengths)",
        "histogram_edges": list(HISTOGRAM_EDGES),
        ALL: group(set(range(len(names)))),
        "categories": {name: group({names.index(name)}) for name in sorted(names)},
    }


def _ordered(counter: Counter[str]) -> dict[str, int]:
    """Most frequent first, then by name, for stable JSON and tables."""
    return {k: int(v) for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])) if v}
