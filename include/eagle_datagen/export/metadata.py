"""What an export says about itself: `export_info.yaml` (for programs) and `README.md` (for people).

Both name the run or release, the manifest's checksums of the files read, the rows and what the
sequence-length cut did, the draft vocabulary, and the command that starts training from the export
(checked against the trainer versions named in docs/internals/training.md). YAML rather than JSON: TorchSpec
loads every *.json under a data folder it is given as training data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class TrainContext:
    folder: str  # the export's path as given to --to
    model: str
    k: int | None
    max_seq_len: int | None


def train_command(fmt: str, c: TrainContext) -> str:
    """The trainer's command that consumes this export (docs/internals/training.md explains each)."""
    k = c.k if c.k is not None else "K"
    if fmt == "speculators":
        seq = f" --total-seq-len {c.max_seq_len}" if c.max_seq_len else ""
        return (
            f"speculators train --verifier-name-or-path {c.model} --trust-remote-code --data-path {c.folder} "
            f"--draft-vocab-size {k}{seq} --num-layers 1 --no-norm-before-residual --full-attention-indices 0 "
            "--save-path ./checkpoints  # then eagle-datagen convert-drafter for SGLang (docs/internals/training.md)"
        )
    if fmt == "specforge":
        seq = f" data.max_length={c.max_seq_len}" if c.max_seq_len else ""
        return (
            "specforge train --config run.yaml "
            f"model.target_model_path={c.model} model.trust_remote_code=true "
            f"model.vocab_mapping_path={c.folder}/vocab_mapping.pt data.prompts_path={c.folder}/train.jsonl{seq}"
            f"  # run.yaml: docs/internals/training.md; the draft config's draft_vocab_size must be {k}"
        )
    if fmt == "torchspec":
        seq = f" training.max_seq_length={c.max_seq_len}" if c.max_seq_len else ""
        return (
            f"python3 -m torchspec.train_entry --config configs/<model>.yaml model.target_model_path={c.model} "
            f"dataset.train_data_path={c.folder}/train.parquet{seq}  # see docs/internals/training.md: "
            "check your TorchSpec "
            "reads pre-tokenized Parquet"
        )
    if fmt == "hf":
        return f'python -c "import datasets; print(datasets.load_from_disk({c.folder!r}))"'
    return f"any trainer that reads JSONL with input_ids and loss_mask: {c.folder}"


def write_info(path: Path, info: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(info, sort_keys=False, width=120))


def _mix_line(mix: dict[str, Any]) -> str:
    weights = ", ".join(f"{c} x{w:g}" for c, w in mix["weights"].items())
    named = f"`{mix['name']}`: " if mix.get("name") else ""
    return f"{named}{weights}; modes {', '.join(mix['modes'])}; seed {mix['seed']} (export_info.yaml: rows_by_category)"


def readme_text(info: dict[str, Any]) -> str:
    source, rows, cut = info["source"], info["rows"], info["sequence_length"]
    vocab = info["draft_vocab"]
    vocab_line = (
        f"{vocab['k']:,} tokens, from {vocab['from']}" if vocab else "none (pass --draft-vocab-size to build one)"
    )
    limit = (
        f"{cut['max_seq_len']:,} tokens ({cut['overlong']}): {rows['rows_cut']:,} rows cut "
        f"({rows['tokens_cut']:,} tokens), {rows['rows_dropped_unsupervised']:,} dropped without a supervised "
        f"token, {rows['rows_dropped_overlong']:,} dropped as overlong"
        if cut["max_seq_len"]
        else "none"
    )
    lines = [
        f"# eagle-datagen export: {info['format']}",
        "",
        f"- {source['kind']}: `{source['id']}` of `{source['output']}` (manifest `{source['manifest']}`), "
        f"model `{source['model']}`, weight version `{source['weight_version']}`",
        f"- rows: {rows['rows_exported']:,} ({rows['tokens']:,} tokens, {rows['supervised_tokens']:,} supervised); "
        f"categories: {', '.join(info['categories'])}",
        "- modes (rows): "
        + (", ".join(f"{mode} {n:,}" for mode, n in (info.get("modes") or {}).items()) or "none")
        + " (thinking: the model reasoned first; instant: the template turned thinking off)",
        f"- sequence-length cut: {limit}",
        f"- mix: {_mix_line(info['mix'])}",
        f"- shuffled: {'seed ' + str(info['shuffle_seed']) if info['shuffle_seed'] is not None else 'no'}",
        f"- draft vocabulary: {vocab_line}",
        f"- files: {', '.join(f'`{f}`' for f in info['files'])}",
        "- `sample_ids.txt`: line i is the sample_id of row i (trainers drop every other column)"
        if "sample_ids.txt" in info["files"]
        else "- each row carries its `sample_id`",
        f"- inputs: {len(info['inputs'])} files, checksums in `export_info.yaml`",
        "",
        "Train:",
        "",
        "```sh",
        info["train_command"],
        "```",
        "",
        f"Exported with `{info['command']}`.",
        "",
    ]
    return "\n".join(lines)
