"""The stand-in SGLang server started from an installed environment (the wheel's own `eagle-datagen serve-sim`), for
the install tests: it proves the installed package serves, not the checkout's."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path


@contextlib.contextmanager
def installed_serve_sim(command: list[str], cwd: Path, env: Mapping[str, str]) -> Iterator[str]:
    """`command` (the installed `eagle-datagen`, or `python -m eagle_datagen.cli`) running serve-sim on a free port;
    yields its URL, stops it on exit."""
    server = subprocess.Popen(
        [*command, "serve-sim", "--port", "0", "--profile", "instant"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=dict(env),
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("serving SGLang stand-in on "), line + server.stderr.read()
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        server.terminate()
        server.wait(timeout=30)
