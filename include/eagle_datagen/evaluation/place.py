"""Where an evaluation's files go: beside the run's manifests (`ROOT/evaluations/eval=<id>.json`) or at `--to`.

    <base>.json              the results (schema eagle-datagen/evaluation/v1), written last
    <base>.records.parquet   one row per request: every figure of the JSON is computed from it
    <base>.report.html       the report with its plots
    <base>.rejects.jsonl     `--prompts` records rejected before any request, with their reasons
    <base>/                  work files of the steps (the prompt set, each category's records), removed at the end

The JSON names the records and the report by their file names, relative to itself, with their sha256.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from eagle_datagen.errors import ConfigError
from eagle_datagen.objectstore.s3 import is_s3_uri
from eagle_datagen.storage.output_root import OutputRoot, open_output_root

EVAL_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")  # no dots: the files' suffixes follow a dot
EVALUATIONS = "evaluations"


def evaluation_key(eval_id: str) -> str:
    return f"{EVALUATIONS}/eval={eval_id}.json"


def check_eval_id(eval_id: str) -> str:
    if not EVAL_ID_PATTERN.fullmatch(eval_id):
        raise ConfigError(f"evaluation id {eval_id!r} must match [A-Za-z0-9][A-Za-z0-9_-]{{0,127}}")
    return eval_id


@dataclass(frozen=True)
class EvaluationPlace:
    root: OutputRoot
    base: str  # the key of the JSON without ".json"

    @property
    def json_key(self) -> str:
        return f"{self.base}.json"

    @property
    def records_key(self) -> str:
        return f"{self.base}.records.parquet"

    @property
    def report_key(self) -> str:
        return f"{self.base}.report.html"

    @property
    def rejects_key(self) -> str:
        return f"{self.base}.rejects.jsonl"

    @property
    def prepared_key(self) -> str:
        return f"{self.base}/prepared.json"

    @property
    def prompts_key(self) -> str:
        return f"{self.base}/prompts.parquet"

    def part_key(self, category: str) -> str:
        return f"{self.base}/records/category={category}.parquet"

    def location(self, key: str) -> str:
        return self.root.location(key)

    @staticmethod
    def name(key: str) -> str:
        """A file's name relative to the JSON beside it."""
        return key.rsplit("/", 1)[-1]


def split_location(uri: str) -> tuple[OutputRoot, str]:
    """A file's folder as an output root, and its name: `s3://b/p/x.json` or a local path."""
    if is_s3_uri(uri):
        folder, _, name = uri.rstrip("/").rpartition("/")
        return open_output_root(folder), name
    path = Path(uri).expanduser().resolve()
    return open_output_root(str(path.parent)), path.name


def place_for(output: str | None, to: str | None, eval_id: str) -> EvaluationPlace:
    if to:
        root, name = split_location(to)
        if not name.endswith(".json") or len(name) == len(".json"):
            raise ConfigError(f"--to {to!r} must name a .json file (the records and the report go beside it)")
        return EvaluationPlace(root, name.removesuffix(".json"))
    if output:
        return EvaluationPlace(open_output_root(output), evaluation_key(eval_id).removesuffix(".json"))
    raise ConfigError("give --output ROOT (results under ROOT/evaluations/) or --to FILE.json: where the results go")
