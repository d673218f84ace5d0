"""A stored object as a local file, with its sha256, read a part at a time (never whole in memory).

Finalize and export read published shards row group by row group (pyarrow reads a local file by ranges); an
object on S3 is downloaded to a temporary file first, a local root's file is read where it is. Either way the
sha256 is computed while reading, so a caller checks it against the manifest before trusting a row.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eagle_datagen.errors import DataGenError
from eagle_datagen.objectstore.s3 import describe_error, retry_transient, s3_client
from eagle_datagen.storage.output_root import LocalOutputRoot, OutputRoot, S3OutputRoot

READ_BYTES = 8 * 2**20


@contextmanager
def local_copy(root: OutputRoot, key: str) -> Iterator[tuple[Path, str]]:
    """(a local path holding the object's bytes, their hex sha256); a temporary copy is removed after the block."""
    if isinstance(root, LocalOutputRoot):
        path = Path(root.location(key))
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(READ_BYTES):
                digest.update(chunk)
        yield path, digest.hexdigest()
        return
    if not isinstance(root, S3OutputRoot):  # pragma: no cover - only the two roots exist
        raise TypeError(f"unsupported output root {root!r}")
    bucket, full_key = root.bucket_key(key)
    with tempfile.TemporaryDirectory(prefix="eagle-datagen-copy-") as folder:
        path = Path(folder) / "object"

        def download() -> str:
            digest = hashlib.sha256()
            body = s3_client().get_object(Bucket=bucket, Key=full_key)["Body"]
            with path.open("wb") as handle:
                for chunk in body.iter_chunks(READ_BYTES):
                    digest.update(chunk)
                    handle.write(chunk)
            return digest.hexdigest()

        try:
            sha256 = retry_transient(f"read {root.location(key)}", download)
        except DataGenError:
            raise
        except Exception as exc:
            raise DataGenError(f"cannot read {root.location(key)}: {describe_error(exc)}") from None
        yield path, sha256
