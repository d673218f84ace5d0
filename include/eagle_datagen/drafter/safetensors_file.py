"""safetensors files read and written with numpy alone, bfloat16 included (the project's environment has no torch,
and numpy has no bfloat16).

The format: an 8-byte little-endian header size, a JSON header (name -> dtype, shape, data_offsets; and
`__metadata__`), then the tensors' bytes. A tensor is read when asked for (a checkpoint's frozen copy of the
target's embedding, 2.3 GB for Kimi-K2.5 in bfloat16, is never read), and cast in slices so that memory stays near
one tensor's size.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FLOAT_DTYPES = ("F32", "F16", "BF16")  # the ones a conversion casts; ints and bools are kept as they are
ITEM_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
         "I8": "i1", "U8": "u1", "BOOL": "?"}  # fmt: skip  (BF16: its raw 16 bits)
CAST_SLICE = 1 << 24  # elements cast at a time


class SafetensorsError(ValueError):
    """A file that is not safetensors, or a tensor of a dtype this module does not know."""


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str  # safetensors' name: F32, BF16, I64, BOOL, ...
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the file
    end: int


def read_header(path: Path) -> dict[str, TensorInfo]:
    with path.open("rb") as stream:
        head = stream.read(8)
        if len(head) != 8:
            raise SafetensorsError(f"{path}: not a safetensors file (shorter than its header size)")
        (size,) = struct.unpack("<Q", head)
        if size > 100 * 2**20:
            raise SafetensorsError(f"{path}: not a safetensors file (a header of {size} bytes)")
        try:
            header = json.loads(stream.read(size))
        except ValueError as exc:
            raise SafetensorsError(f"{path}: not a safetensors file ({exc})") from exc
    base = 8 + size
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in ITEM_SIZE:
            raise SafetensorsError(f"{path}: tensor {name} has dtype {entry['dtype']}, which this reader lacks")
        start, end = entry["data_offsets"]
        tensors[name] = TensorInfo(path, entry["dtype"], tuple(entry["shape"]), base + start, base + end)
    return tensors


def read_array(info: TensorInfo) -> np.ndarray:
    """The tensor as numpy (a BF16 tensor as its raw uint16 bits)."""
    with info.file.open("rb") as stream:
        stream.seek(info.start)
        data = stream.read(info.end - info.start)
    return np.frombuffer(data, dtype=NUMPY[info.dtype]).reshape(info.shape)


def _to_float32(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values.astype(np.float32)


def _from_float32(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":  # round to nearest even, as torch's .to(torch.bfloat16); NaN stays NaN
        bits = values.view(np.uint32)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)
    return values.astype(NUMPY[dtype])


def cast_bytes(values: np.ndarray, source: str, target: str) -> Iterable[bytes]:
    """A float tensor's bytes in another float dtype, slice by slice (through float32: exact for F16 and BF16)."""
    flat = values.reshape(-1)
    if source == target:
        yield flat.tobytes()
        return
    for at in range(0, flat.size, CAST_SLICE):
        yield _from_float32(_to_float32(flat[at : at + CAST_SLICE], source), target).tobytes()


@dataclass(frozen=True)
class OutTensor:
    """A tensor to write: where it comes from and the dtype it is written in."""

    source: TensorInfo
    dtype: str


def write_file(path: Path, tensors: dict[str, OutTensor], metadata: dict[str, str]) -> None:
    """Write `tensors` (in name order) to a safetensors file, reading and casting one tensor at a time."""
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    names = sorted(tensors)
    for name in names:
        out = tensors[name]
        size = ITEM_SIZE[out.dtype] * int(np.prod(out.source.shape, dtype=np.int64))
        header[name] = {"dtype": out.dtype, "shape": list(out.source.shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    with path.open("wb") as stream:
        stream.write(struct.pack("<Q", len(encoded)) + encoded)
        for name in names:
            out = tensors[name]
            values = read_array(out.source)
            if out.dtype == out.source.dtype:
                stream.write(values.tobytes())
            else:
                for chunk in cast_bytes(values, out.source.dtype, out.dtype):
                    stream.write(chunk)
