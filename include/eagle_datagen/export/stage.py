"""`eagle-datagen export`: a published run or release, in the format a trainer reads.

Shards are read a row group at a time (export/source.py), turned into training rows in bulk (export/rows.py)
and handed to the format's writer (export/formats.py). With a shuffle seed the rows first go to a staging
Arrow file beside the target, read back in buckets (storage/reorder.py; never memory-mapped) in the order
`speculators prepare-data --seed` gives them (HF `datasets.shuffle`, a numpy `default_rng(seed).permutation`,
of the rows read, then of the rows kept), so that a speculators export is row for row what prepare-data
writes from the JSONL export. A training mix (export/mix.py: per-category weights, a mode filter) selects the
rows read; a mix that resamples stages the rows the same way and writes each row as many times as its weight
gives (the copies follow each other, or go where the seed's shuffle puts them: the shuffle sees the mixed rows as
the rows read, as prepare-data would read them from the mixed JSONL export). The draft vocabulary is the run's
or release's own, or, with `draft_vocab_size`, built from the supervised tokens of the exported rows (cut as
exported, copies included), counted as the trainers count them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from eagle_datagen.errors import ConfigError
from eagle_datagen.export.formats import WRITERS, FormatWriter, JsonlWriter
from eagle_datagen.export.metadata import TrainContext, readme_text, train_command, write_info
from eagle_datagen.export.mix import MODE_COLUMN, ExportMix, MixPlan, keep_modes, tally, with_modes
from eagle_datagen.export.rows import LOGPROB_COLUMNS, RowCounts, SeqLimit, soft_targets, training_rows
from eagle_datagen.export.source import ExportSource, open_release, open_run
from eagle_datagen.profile import load_profile
from eagle_datagen.stats.draft_vocab import DraftVocab, build_draft_vocab
from eagle_datagen.stats.statistics import TokenCounter
from eagle_datagen.storage import reorder
from eagle_datagen.storage.output_root import OutputRoot

SHUFFLE_BATCH_ROWS = 4096
SHUFFLE_BATCH_BYTES = 16 * 2**20  # ... and at most about this many bytes per batch handed to the writer
SHUFFLE_BUCKET_BYTES = 64 * 2**20  # a shuffled export holds one bucket of rows at a time (twice: read, in order)


@dataclass(frozen=True)
class ExportOptions:
    format: str
    to: str  # a file for jsonl (or - for stdout), a folder otherwise
    run_id: str | None = None
    release_id: str | None = None
    categories: list[str] | None = None
    limit: SeqLimit = field(default_factory=SeqLimit)
    shuffle_seed: int | None = None
    draft_vocab_size: int | None = None  # None: the run's or release's draft vocabulary
    command: str = ""  # the command line, for the README
    location: str | None = None  # where the trainer finds the export, when not at `to` (uploaded exports)
    mix: ExportMix = field(default_factory=ExportMix)  # per-category weights and a mode filter (export/mix.py)
    logprobs: bool = False  # carry the soft targets (top-k logprobs), in the formats that can (export/formats.py)
    front_end: str = "cli"  # messages name the sequence limit as this front end calls it


@dataclass
class ExportSummary:
    format: str
    to: str
    rows: int
    counts: dict[str, int]
    files: list[str]
    draft_vocab_k: int | None


def open_source(root: OutputRoot, options: ExportOptions) -> ExportSource:
    if (options.run_id is None) == (options.release_id is None):
        raise ConfigError("export needs exactly one of --run-id and --release-id")
    if options.run_id is not None:
        return open_run(root, options.run_id, options.categories)
    assert options.release_id is not None
    return open_release(root, options.release_id, options.categories)


def _prepare_target(options: ExportOptions, writer_cls: type[FormatWriter]) -> tuple[Path, Path]:
    """(target, work): the export is written to `work` beside the target and renamed into place when it is
    complete, so that a failed export leaves nothing that looks finished (a rerun clears its `work`)."""
    target = Path(options.to)
    if writer_cls.folder and target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"{target} exists and is not an empty folder: export {options.format} to a new folder")
    if options.to == "-":
        return target, target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.with_name(f".{target.name}.partial")
    if work.is_dir():
        shutil.rmtree(work)
    work.unlink(missing_ok=True)
    if writer_cls.folder:
        work.mkdir()
    return target, work


def _discard(work: Path, target: Path) -> None:
    if work == target:
        return
    if work.is_dir():
        shutil.rmtree(work, ignore_errors=True)
    else:
        work.unlink(missing_ok=True)


def _commit(work: Path, target: Path) -> None:
    if work == target:
        return
    if target.is_dir():  # an empty folder (checked before)
        target.rmdir()
    os.replace(work, target)


@dataclass
class ModeTally:
    """Rows per (category, mode): read (before the mode filter) and exported (written, copies included)."""

    read: Counter[tuple[str, str]] = field(default_factory=Counter)
    exported: Counter[tuple[str, str]] = field(default_factory=Counter)

    def to_json(self) -> dict[str, dict[str, dict[str, int]]]:
        result: dict[str, dict[str, dict[str, int]]] = {}
        for category, mode in sorted(set(self.read) | set(self.exported)):
            pair = (category, mode)
            result.setdefault(category, {})[mode] = {"read": self.read[pair], "exported": self.exported[pair]}
        return result

    def exported_by_mode(self) -> dict[str, int]:
        by_mode: Counter[str] = Counter()
        for (_, mode), n in self.exported.items():
            by_mode[mode] += n
        return dict(sorted((mode, n) for mode, n in by_mode.items() if n))


def _row_tables(
    source: ExportSource,
    columns: list[str],
    limit: SeqLimit,
    counts: RowCounts,
    mix: ExportMix,
    modes: ModeTally,
    plan: MixPlan | None,
    logprobs: bool = False,
) -> Iterator[pa.Table]:
    for table in source.tables(columns):
        table = with_modes(table)
        modes.read.update(tally(table))
        kept = keep_modes(table, mix.modes)
        counts.rows_filtered_by_mode += table.num_rows - kept.num_rows
        if plan is not None:
            plan.observe(kept)
        rows = training_rows(kept, limit, counts)
        if rows.num_rows:
            yield soft_targets(rows) if logprobs else rows


def shuffled_order(row_index: np.ndarray, rows_read: int, seed: int) -> np.ndarray:
    """The order `speculators prepare-data --seed` gives kept rows: datasets' shuffle (a
    `default_rng(seed).permutation`) of all rows read, rows dropped, then a shuffle of the kept rows."""
    position = np.empty(rows_read, dtype=np.int64)
    position[np.random.default_rng(seed).permutation(rows_read)] = np.arange(rows_read)
    first = np.argsort(position[row_index], kind="stable")
    return first[np.random.default_rng(seed).permutation(len(first))]


def mixed_order(row_index: np.ndarray, copies: np.ndarray, seed: int | None) -> np.ndarray:
    """The staged row of each output row: staged row i (read as row `row_index[i]`) `copies[row_index[i]]` times,
    copies together in read order; with a seed, in the order shuffled_order gives the mixed rows (the copies of
    every row read, in read order, being the rows a trainer reads from the mixed JSONL export)."""
    reps = copies[row_index]
    staged = np.repeat(np.arange(len(row_index), dtype=np.int64), reps)
    if seed is None:
        return staged
    first_copy = np.cumsum(copies) - copies  # where each row read starts among the mixed rows
    nth = np.arange(len(staged), dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
    mixed_index = np.repeat(first_copy[row_index], reps) + nth
    return staged[shuffled_order(mixed_index, int(copies.sum()), seed)]


def _shuffled(
    tables: Iterator[pa.Table],
    staging: Path,
    seed: int | None,
    counts: RowCounts,
    bucket_bytes: int = SHUFFLE_BUCKET_BYTES,
    copies: Callable[[], np.ndarray] | None = None,
) -> Iterator[pa.Table]:
    """The rows of `tables` in the seed's order (shuffled_order), in bounded memory: the rows are staged in a
    file, and put in that order by storage/reorder.py (buckets of about `bucket_bytes`, by the rows' sizes, so
    that long rows make smaller buckets). With `copies` (of each row read, known once all are read: a training
    mix), each row comes that many times (`mixed_order`; no seed: in read order). Memory: one staged batch, one
    bucket, and about 24 bytes per row; the tables handed on have at most SHUFFLE_BATCH_ROWS rows and about
    SHUFFLE_BATCH_BYTES."""
    writer: pa.ipc.RecordBatchFileWriter | None = None
    try:
        with pa.OSFile(str(staging), "wb") as sink:
            for table in tables:
                if writer is None:
                    writer = pa.ipc.new_file(sink, table.schema)
                writer.write_table(table)
            if writer is None:
                return
            writer.close()
        with pa.OSFile(str(staging)) as source:  # read, not memory-mapped: pages do not stay resident
            reader = pa.ipc.open_file(source)
            # copied: a zero-copy view would keep each whole batch (its ids) alive, the staging file in memory
            row_index = np.concatenate(
                [reader.get_batch(i).column("row_index").to_numpy().copy() for i in range(reader.num_record_batches)]
            )
        if copies is not None:
            source = mixed_order(row_index, copies(), seed)  # output place -> staged row, copies repeated
            del row_index
            for bucket in reorder.gather(staging, source, bucket_bytes):
                yield from reorder.slices(bucket, SHUFFLE_BATCH_ROWS, SHUFFLE_BATCH_BYTES)
            return
        assert seed is not None
        order = shuffled_order(row_index, counts.rows_read, seed)  # output place -> staged row
        del row_index
        place = np.empty(len(order), dtype=np.int64)  # staged row -> its place in the output
        place[order] = np.arange(len(order), dtype=np.int64)
        del order
        for bucket in reorder.in_order(staging, place, bucket_bytes):
            yield from reorder.slices(bucket, SHUFFLE_BATCH_ROWS, SHUFFLE_BATCH_BYTES)
    finally:
        staging.unlink(missing_ok=True)


def _count_written(rows: pa.Table, written: RowCounts) -> None:
    seq_len = rows.column("seq_len").to_numpy()
    written.rows_exported += rows.num_rows
    written.tokens += int(seq_len.sum())
    written.supervised_tokens += int(seq_len.sum() - rows.column("prompt_len").to_numpy().sum())


def _supervised_ids(rows: pa.Table) -> np.ndarray:
    ids = rows.column("input_ids").combine_chunks().values.to_numpy()
    mask = rows.column("loss_mask").combine_chunks().values.to_numpy()
    return ids[mask == 1]


def run_export(root: OutputRoot, options: ExportOptions) -> ExportSummary:
    if options.format not in WRITERS:
        raise ConfigError(f"unknown export format {options.format!r}: use one of {', '.join(WRITERS)}")
    writer_cls = WRITERS[options.format]
    if options.logprobs and writer_cls.no_logprobs:
        raise ConfigError(
            f"--logprobs: {options.format} does not carry soft targets ({writer_cls.no_logprobs}): export jsonl or hf"
        )
    source = open_source(root, options)
    published = None if options.draft_vocab_size else source.published_draft_vocab()
    if writer_cls.needs_vocab and options.draft_vocab_size is None and published is None:
        raise ConfigError(
            f"{source.kind} {source.id} has no draft vocabulary and {options.format} needs one (d2t/t2d): "
            "pass --draft-vocab-size K to build it from the exported rows"
        )
    options.mix.check(source.categories, f"{source.kind} {source.id}")
    profile = load_profile(source.profile)
    target, work = _prepare_target(options, writer_cls)
    try:
        summary = _write(options, source, writer_cls, published, profile.vocab_size, target, work)
    except BaseException:
        _discard(work, target)
        raise
    _commit(work, target)
    return summary


def _write(
    options: ExportOptions,
    source: ExportSource,
    writer_cls: type[FormatWriter],
    published: DraftVocab | None,
    vocab_size: int,
    target: Path,
    work: Path,
) -> ExportSummary:
    identity = f"{source.kind}={source.id}:{options.format}"
    if writer_cls is JsonlWriter and options.to == "-":
        writer: FormatWriter = JsonlWriter(target, identity, options.logprobs, handle=sys.stdout.buffer)
    else:
        writer = writer_cls(work, identity, options.logprobs)
    counts, modes = RowCounts(), ModeTally()
    # an older run's own vocabulary may count held-out rows: the exported rows are counted too, to replace it
    recount = published is not None and source.vocab_counts_heldout
    counter = TokenCounter(vocab_size) if options.draft_vocab_size or recount else None
    sample_ids = (work / "sample_ids.txt").open("w") if writer_cls.folder else None
    soft = list(LOGPROB_COLUMNS) if options.logprobs else []
    columns = list(dict.fromkeys([*writer_cls.columns, "category", "prompt_ids", "output_ids", MODE_COLUMN, *soft]))
    plan = MixPlan(options.mix) if options.mix.resamples else None
    written = RowCounts()
    try:
        tables = _row_tables(source, columns, options.limit, counts, options.mix, modes, plan, options.logprobs)
        if options.shuffle_seed is not None or plan is not None:
            staging = (work if writer_cls.folder else work.parent) / f".{target.name}.staging.arrow"
            copies = plan.copies if plan is not None else None
            tables = _shuffled(tables, staging, options.shuffle_seed, counts, copies=copies)
        for rows in tables:
            if counter is not None:
                counter.add_ids(_supervised_ids(rows))
            if sample_ids is not None:
                sample_ids.write("\n".join(rows.column("sample_id").to_pylist()) + "\n")
            modes.exported.update(tally(rows))
            _count_written(rows, written)
            writer.write(rows)
    finally:
        if sample_ids is not None:
            sample_ids.close()
    # the rows written, copies included (the cut and drop counts are of the distinct rows read)
    counts.rows_exported, counts.tokens, counts.supervised_tokens = (
        written.rows_exported,
        written.tokens,
        written.supervised_tokens,
    )
    if not counts.rows_exported:  # an empty export is no training data: never a success
        raise ConfigError(_nothing_exported(source, counts, options.front_end))
    vocab, vocab_from = _draft_vocab(options, source, published, counter)
    files = writer.finish(vocab) if writer_cls.folder else [target.name, *writer.finish(vocab)]
    if sample_ids is not None:
        files.append("sample_ids.txt")
    info = _info(options, source, counts, vocab, vocab_from, files, modes)
    info["modes"] = modes.exported_by_mode()  # rows written per mode, copies included
    if writer_cls.folder:
        files += ["export_info.yaml", "README.md"]
        info["files"] = files
        write_info(work / "export_info.yaml", info)
        (work / "README.md").write_text(readme_text(info))
    elif options.to != "-":
        write_info(target.with_name(target.name + ".export_info.yaml"), info)
    return ExportSummary(options.format, options.to, counts.rows_exported, counts.to_json(), files, vocab and vocab.k)


def _nothing_exported(source: ExportSource, counts: RowCounts, front_end: str) -> str:
    what = f"{source.kind} {source.id}"
    if not counts.rows_read and counts.rows_filtered_by_mode:
        modes = "--modes" if front_end == "cli" else "the mix's modes"
        return (
            f"nothing exported: every one of the {counts.rows_filtered_by_mode:,} data rows of {what} is of a mode "
            f"the export leaves out: widen {modes}"
        )
    if not counts.rows_read:
        return f"nothing exported: {what} has no data rows (every sample was quarantined?)"
    if not counts.rows_dropped_unsupervised + counts.rows_dropped_overlong:
        mix = "--mix" if front_end == "cli" else "the mix's weights"
        return f"nothing exported: the mix's weights keep none of the {counts.rows_read:,} data rows of {what}: {mix}"
    limit = "--max-seq-len" if front_end == "cli" else "the export_max_seq_len param"
    return (
        f"nothing exported: every one of the {counts.rows_read:,} data rows of {what} was dropped by the sequence "
        f"limit ({counts.rows_dropped_unsupervised:,} whose prompt alone fills it, {counts.rows_dropped_overlong:,} "
        f"longer than it with overlong drop): raise {limit}"
    )


def _draft_vocab(
    options: ExportOptions, source: ExportSource, published: DraftVocab | None, counter: TokenCounter | None
) -> tuple[DraftVocab | None, str | None]:
    if published is not None and (counter is None or not source.heldout_rows):
        return published, f"the {source.kind}'s draft vocabulary"
    if counter is None:
        return None, None
    size = options.draft_vocab_size
    if published is not None:  # a run published before held-out rows were left out of its vocabulary
        size = published.k
        if size > counter.distinct:
            raise ConfigError(
                f"{source.kind} {source.id}'s draft vocabulary counts held-out rows (published before they were left "
                f"out of it) and the exported rows supervise only {counter.distinct} distinct tokens, fewer than its "
                f"{size}: pass --draft-vocab-size K (at most {counter.distinct}) to build one from the exported rows"
            )
        return build_draft_vocab(counter.counts, size), (
            f"the exported rows' supervised tokens (the {source.kind}'s own draft vocabulary counts held-out rows)"
        )
    assert size is not None
    if size > counter.distinct:
        raise ConfigError(
            f"a draft vocabulary of {size} tokens was asked, but the exported rows supervise "
            f"only {counter.distinct} distinct tokens: lower --draft-vocab-size"
        )
    return build_draft_vocab(counter.counts, size), "the exported rows' supervised tokens"


def _info(
    options: ExportOptions,
    source: ExportSource,
    counts: RowCounts,
    vocab: DraftVocab | None,
    vocab_from: str | None,
    files: list[str],
    modes: ModeTally,
) -> dict[str, Any]:
    where = options.location or options.to
    context = TrainContext(where, source.model, vocab.k if vocab else None, options.limit.max_len)
    return {
        "format": options.format,
        "source": {
            "kind": source.kind,
            "id": source.id,
            "output": source.root.uri,
            "manifest": source.manifest_key,
            "model": source.model,
            "profile": source.profile,
            "weight_version": source.weight_version,
        },
        "location": where,
        "categories": source.categories,
        "mix": options.mix.to_json(source.categories),
        "rows": counts.to_json()
        | {
            "superseded_rows_skipped": source.superseded_rows,
            "heldout_rows_skipped": sum(source.heldout_rows.values()),
        },
        "rows_by_category": modes.to_json(),
        # held out for evaluation (heldout.py): never exported, counted per category
        "heldout": {
            "fraction": source.heldout.fraction if source.heldout else None,
            "rows_by_category": dict(sorted(source.heldout_rows.items())),
        },
        "sequence_length": {"max_seq_len": options.limit.max_len, "overlong": options.limit.overlong},
        "shuffle_seed": options.shuffle_seed,
        "logprobs": options.logprobs,
        "draft_vocab": {"k": vocab.k, "from": vocab_from, "coverage": round(float(vocab.coverage), 6)}
        if vocab
        else None,
        "files": files,
        "inputs": source.input_checksums(),
        "train_command": train_command(options.format, context),
        "command": options.command or shlex.join(["eagle-datagen", "export", "--format", options.format]),
    }
