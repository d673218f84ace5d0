"""A prompt source spec resolved: a Hugging Face dataset (hf://, a saved dataset folder, a folder in a dataset's
layout) is one source (sources/hf_datasets.py); anything else is the files it names (sources/locations.py)."""

from __future__ import annotations

from pathlib import Path

from eagle_datagen.objectstore.s3 import is_s3_uri
from eagle_datagen.sources.hf_datasets import hub_source, local_source
from eagle_datagen.sources.hub_paths import HUB_PREFIX
from eagle_datagen.sources.locations import SourceFile, resolve_files


def resolve_source(
    spec: str, base_dir: Path | None = None, split: str | None = None, config: str | None = None
) -> list[SourceFile]:
    """All sources a spec names, sorted; a spec that names nothing is an error (a typo must not pass silently)."""
    if spec.startswith(HUB_PREFIX):
        return [hub_source(spec, split, config)]
    if not is_s3_uri(spec):
        local = Path(spec) if base_dir is None or Path(spec).is_absolute() else base_dir / spec
        found = local_source(local, split, config)
        if found is not None:
            return [found]
    return resolve_files(spec, base_dir, split, config)
