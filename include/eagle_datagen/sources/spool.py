"""The prompt spool: validated prompt records kept on local disk while a run's sources are read, so that
collecting a million prompts holds their keys in memory, not their messages.

Each record is one JSON line in an anonymous temporary file (in TMPDIR, removed when closed or when the process
ends); its ordinal is its position in the file. Records are read back one by one (`read`, for the filters) or
all in order, a selection of them (`records`).
"""

from __future__ import annotations

import json
import tempfile
from array import array
from collections.abc import Iterator
from typing import Any

from eagle_datagen.records import PromptRecord


class PromptSpool:
    def __init__(self) -> None:
        self._file: Any = tempfile.TemporaryFile(prefix="eagle-datagen-prompts-")  # noqa: SIM115 (closed by close)
        self._offsets = array("q")
        self._end = 0

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def size_bytes(self) -> int:
        return self._end

    def add(self, record: PromptRecord) -> int:
        """Append `record`; returns its ordinal."""
        line = (
            json.dumps(
                [
                    record.prompt_id,
                    record.record_id,
                    record.category,
                    record.messages,
                    record.tools,
                    record.source,
                    record.origin,
                ],
                ensure_ascii=False,
            ).encode("utf-8")
            + b"\n"
        )
        self._file.seek(self._end)
        self._file.write(line)
        self._offsets.append(self._end)
        self._end += len(line)
        return len(self._offsets) - 1

    def read(self, ordinal: int) -> PromptRecord:
        self._file.seek(self._offsets[ordinal])
        return _decode(self._file.readline())

    def records(self, selection: bytearray | None = None) -> Iterator[PromptRecord]:
        """The records (those whose byte in `selection` is set), in the order they were added."""
        self._file.seek(0)
        for ordinal in range(len(self._offsets)):
            line = self._file.readline()
            if selection is None or selection[ordinal]:
                yield _decode(line)

    def close(self) -> None:
        self._file.close()


def _decode(line: bytes) -> PromptRecord:
    prompt_id, record_id, category, messages, tools, source, origin = json.loads(line)
    return PromptRecord(prompt_id, record_id, category, messages, tools, source, origin)
