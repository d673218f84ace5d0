"""Resolve a prompt source spec (file, folder, glob or `s3://` URI) into the files it names."""

from __future__ import annotations

import glob
import gzip
import io
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from eagle_datagen.errors import SourceError
from eagle_datagen.objectstore.s3 import GLOB_CHARS, S3Uri, describe_error, is_s3_uri, match_keys, read_object

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}
COMPRESSIONS = (".gz", ".zst")
MAX_EXPANSION = 100
MIN_EXPANSION_LIMIT = 256 * 1024 * 1024


def source_format(name: str) -> str | None:
    """jsonl, parquet or csv by file name (`.jsonl.gz` and `.jsonl.zst` are jsonl); None if unsupported."""
    stem = name
    for suffix in COMPRESSIONS:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            if FORMATS.get(Path(stem).suffix) == "parquet":
                return None
    return FORMATS.get(Path(stem).suffix.lower())


@dataclass(frozen=True)
class SourceFile:
    uri: str  # a local path or s3://bucket/key; a folder or hf://datasets/OWNER/NAME for Hugging Face datasets
    hf_kind: str | None = None  # saved (save_to_disk), folder (a dataset's file layout) or hub; None: a file
    split: str | None = None
    config: str | None = None

    @property
    def format(self) -> str:
        if self.hf_kind is not None:
            return "hf"
        fmt = source_format(self.uri)
        assert fmt is not None, self.uri
        return fmt

    @property
    def is_local(self) -> bool:
        return not is_s3_uri(self.uri) and self.hf_kind is None

    def read_bytes(self) -> bytes:
        try:
            if is_s3_uri(self.uri):
                s3 = S3Uri.parse(self.uri)
                data = read_object(s3.bucket, s3.key)
            else:
                data = Path(self.uri).read_bytes()
        except OSError as exc:
            raise SourceError(f"cannot read prompt source {self.uri}: {exc.strerror or exc}") from None
        except Exception as exc:  # boto errors: one line with the S3 error code
            raise SourceError(f"cannot read prompt source {self.uri}: {describe_error(exc)}") from None
        return _decompress(self.uri, data)

    def open_stream(self) -> IO[bytes]:
        """The file's (decompressed) bytes as a stream, read as it is consumed: a local file is never held
        whole (a compressed one stops at the same expansion limit as `read_bytes`); an object in a bucket is
        fetched whole, as `read_bytes` does, and streamed from memory."""
        if not self.is_local:
            return io.BytesIO(self.read_bytes())
        try:
            if not self.uri.endswith(COMPRESSIONS):
                return open(self.uri, "rb")  # noqa: SIM115 (the caller closes it)
            limit = decompression_limit(Path(self.uri).stat().st_size)
        except OSError as exc:
            raise SourceError(f"cannot read prompt source {self.uri}: {exc.strerror or exc}") from None
        return io.BufferedReader(_LimitedStream(self.uri, limit), buffer_size=1 << 20)


class _LimitedStream(io.RawIOBase):
    """A local compressed file decompressed as it is read; past `limit` bytes (a compression bomb) or on corrupt
    data, a `SourceError`."""

    def __init__(self, uri: str, limit: int) -> None:
        import pyarrow as pa  # only compressed sources need it

        self.uri, self.limit, self.total = uri, limit, 0
        self._arrow_errors: tuple[type[BaseException], ...] = (pa.ArrowException,)
        self._inner: Any = gzip.open(uri, "rb") if uri.endswith(".gz") else pa.input_stream(uri, compression="zstd")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self._inner.read(len(buffer))
        except (OSError, EOFError, zlib.error, *self._arrow_errors) as exc:
            raise SourceError(f"cannot decompress prompt source {self.uri} (truncated or corrupt?): {exc}") from None
        self.total += len(data)
        if self.total > self.limit:
            raise SourceError(
                f"prompt source {self.uri} expands to more than {self.limit:,} bytes (over {MAX_EXPANSION}x: a "
                "compression bomb?); split it into smaller files or store it uncompressed"
            )
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inner.close()
        super().close()


def decompression_limit(compressed_size: int) -> int:
    """The most bytes a compressed source may expand to: real prompt files compress 3-10x, a compression
    bomb 1000x or more. Reading stops at the limit instead of filling the memory."""
    return max(MIN_EXPANSION_LIMIT, MAX_EXPANSION * compressed_size)


def _decompress(uri: str, data: bytes) -> bytes:
    if not uri.endswith(COMPRESSIONS):
        return data
    import pyarrow as pa  # not at import time: only compressed sources need it (zstd, and the except)

    limit = decompression_limit(len(data))
    try:
        if uri.endswith(".gz"):
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
                out = stream.read(limit + 1)
        else:
            with pa.input_stream(pa.py_buffer(data), compression="zstd") as stream:
                out = stream.read(limit + 1)
    except (OSError, EOFError, zlib.error, pa.ArrowException) as exc:
        raise SourceError(f"cannot decompress prompt source {uri} (truncated or corrupt?): {exc}") from None
    if len(out) > limit:
        raise SourceError(
            f"prompt source {uri} expands to more than {limit:,} bytes from {len(data):,} "
            f"(over {MAX_EXPANSION}x: a compression bomb?); split it into smaller files or store it uncompressed"
        )
    return out


def _supported(names: list[str]) -> list[str]:
    return sorted(n for n in names if source_format(n) is not None)


def resolve_files(
    spec: str, base_dir: Path | None = None, split: str | None = None, config: str | None = None
) -> list[SourceFile]:
    """All prompt files a spec names, sorted; a spec that names nothing is an error (a typo must not pass
    silently). Hugging Face datasets are sources/resolve.py's (which calls this for everything else)."""
    if split is not None or config is not None:
        raise SourceError(
            f"prompt source {spec} has split or config, which only Hugging Face datasets have (hf://datasets/OWNER/"
            "NAME, a save_to_disk folder, or a folder of Parquet or Arrow files in a dataset's layout)"
        )
    if is_s3_uri(spec):
        try:
            uri = S3Uri.parse(spec)
            keys = match_keys(uri)
        except ValueError as exc:
            raise SourceError(f"bad prompt source {spec}: {exc}") from None
        except Exception as exc:
            raise SourceError(
                f"cannot list prompt source {spec}: {describe_error(exc)} "
                "(check the bucket, AWS_ENDPOINT_URL and credentials)"
            ) from None
        files = _supported(keys)
        if not files:
            raise SourceError(f"prompt source {spec} names no .jsonl, .parquet or .csv objects")
        return [SourceFile(f"s3://{uri.bucket}/{key}") for key in files]

    path = Path(spec)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    if any(c in spec for c in GLOB_CHARS):
        matches = _supported([p for p in glob.glob(str(path), recursive=True) if Path(p).is_file()])
        if not matches:
            raise SourceError(f"prompt source {spec} matches no .jsonl, .parquet or .csv files")
        return [SourceFile(p) for p in matches]
    if path.is_dir():
        matches = _supported([str(p) for p in path.rglob("*") if p.is_file()])
        if not matches:
            raise SourceError(f"prompt source folder {spec} holds no .jsonl, .parquet or .csv files")
        return [SourceFile(p) for p in matches]
    if not path.exists():
        raise SourceError(f"prompt source not found: {path} (check the path, or quote a glob)")
    if source_format(path.name) is None:
        raise SourceError(f"unsupported prompt source format: {path} (use .jsonl, .parquet or .csv)")
    return [SourceFile(str(path))]
