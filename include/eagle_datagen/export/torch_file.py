"""A `torch.save` file of a dict of 1-d tensors, written without torch (SpecForge's `vocab_mapping.pt`).

torch's format (torch >= 1.6, read by `torch.load`, also with `weights_only=True`): an uncompressed zip
whose entries sit under one folder (`archive/`): `data.pkl`, a protocol-2 pickle of the object in which
each tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
OrderedDict())` and each storage a persistent id `("storage", torch.<Type>Storage, key, "cpu", numel)`;
`data/<key>` with the storage's raw little-endian bytes; `byteorder` ("little"), `version` ("3") and
`.format_version` ("1"). Entries are 64-byte aligned (padding in the local header's extra field) as torch
writes them, so that `torch.load(mmap=True)` works too. The pickle names only the globals that torch's
weights-only unpickler allows.

`read_tensors` reads such a file back with the same rules (and only those globals), for tests and checks
where torch is not installed.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

ARCHIVE = "archive"
ALIGNMENT = 64
_STORAGE_TYPES = {
    np.dtype(np.int64): "LongStorage",
    np.dtype(np.bool_): "BoolStorage",
    np.dtype(np.int32): "IntStorage",
}
_DTYPES = {name: dtype for dtype, name in _STORAGE_TYPES.items()}


def _text(value: str) -> bytes:
    data = value.encode("utf-8")
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def _int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)  # BININT


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"  # GLOBAL


def _tensor_pickle(key: str, storage_type: str, numel: int) -> bytes:
    storage = b"(" + _text("storage") + _global("torch", storage_type) + _text(key) + _text("cpu") + _int(numel)
    return (
        _global("torch._utils", "_rebuild_tensor_v2")
        + b"("  # MARK: the arguments
        + storage
        + b"tQ"  # TUPLE, BINPERSID
        + _int(0)  # storage offset
        + _int(numel)
        + b"\x85"  # TUPLE1: size
        + _int(1)
        + b"\x85"  # TUPLE1: stride
        + b"\x89"  # NEWFALSE: requires_grad
        + _global("collections", "OrderedDict")
        + b")R"  # EMPTY_TUPLE, REDUCE: backward hooks
        + b"tR"  # TUPLE, REDUCE
    )


def _aligned_entry(archive: zipfile.ZipFile, offset: int, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    header = 30 + len(name.encode())
    padding = (-(offset + header + 4)) % ALIGNMENT
    info.extra = struct.pack("<HH", 0x4246, padding) + b"Z" * padding  # "FB" padding field, as torch's writer
    archive.writestr(info, data)


def tensors_to_torch_bytes(tensors: Mapping[str, np.ndarray]) -> bytes:
    """The bytes of `torch.save(dict of tensors)` for 1-d int64, int32 or bool arrays."""
    body = b"\x80\x02}(" if tensors else b"\x80\x02}"  # PROTO 2, EMPTY_DICT, MARK
    records = []
    for index, (name, array) in enumerate(tensors.items()):
        array = np.ascontiguousarray(array)
        if array.ndim != 1 or array.dtype not in _STORAGE_TYPES:
            raise TypeError(f"{name}: only 1-d int64, int32 or bool arrays, got {array.dtype} {array.shape}")
        key = str(index)
        body += _text(name) + _tensor_pickle(key, _STORAGE_TYPES[array.dtype], len(array))
        records.append((f"data/{key}", array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()))
    body += (b"u" if tensors else b"") + b"."  # SETITEMS, STOP
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        entries = [("data.pkl", body), (".format_version", b"1"), ("byteorder", b"little"), *records]
        entries.append(("version", b"3"))
        for name, data in entries:
            _aligned_entry(archive, buffer.tell(), f"{ARCHIVE}/{name}", data)
    return buffer.getvalue()


class _Storage:
    def __init__(self, dtype: np.dtype, data: bytes):
        self.array = np.frombuffer(data, dtype=dtype.newbyteorder("<"))


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None):
    if len(size) != 1 or stride != (1,):
        raise pickle.UnpicklingError(f"only contiguous 1-d tensors are read here, got size {size} stride {stride}")
    return storage.array[offset : offset + size[0]].astype(storage.array.dtype.newbyteorder("="))


class _WeightsOnlyUnpickler(pickle.Unpickler):
    """Resolves only the globals a dict of tensors needs (as torch's weights_only loader allows)."""

    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str):
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix = archive, prefix

    def find_class(self, module: str, name: str):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if module == "torch" and name in _DTYPES:
            return _DTYPES[name]
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a weights-only file")

    def persistent_load(self, pid):
        kind, dtype, key, location, numel = pid
        if kind != "storage" or location != "cpu":
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        data = self.archive.read(f"{self.prefix}data/{key}")
        if len(data) != numel * dtype.itemsize:
            raise pickle.UnpicklingError(f"storage {key}: {len(data)} bytes for {numel} x {dtype}")
        return _Storage(dtype, data)


def read_tensors(data: bytes) -> dict[str, np.ndarray]:
    """The dict of tensors (as numpy arrays) of a torch.save file, read with the weights-only rules."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ValueError(f"a torch file holds one */data.pkl, found {pickles}")
        prefix = pickles[0].removesuffix("data.pkl")
        if archive.read(f"{prefix}byteorder") != b"little":
            raise ValueError("only little-endian torch files are read here")
        result = _WeightsOnlyUnpickler(archive.read(pickles[0]), archive, prefix).load()
    if not isinstance(result, dict):
        raise ValueError(f"the file holds a {type(result).__name__}, not a dict of tensors")
    return result
