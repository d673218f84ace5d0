"""Shared fixtures: the stand-in tokenizer, the Kimi profile, prompt files and a SeaweedFS server."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("EAGLE_DATAGEN_CACHE", str(REPO / ".cache"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# Property-based tests (hypothesis): the same examples on every run (derandomize) so CI is reproducible, no
# per-example deadline (two busy cores), no example database in the checkout. HYPOTHESIS_PROFILE=deep
# searches ten times longer with fresh random examples.
settings.register_profile("ci", max_examples=300, derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("deep", deadline=None, max_examples=3000, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

DEMO_PROMPTS = REPO / "include" / "data" / "demo_prompts"
DEMO_RECIPE = REPO / "include" / "recipes" / "demo.yaml"


@pytest.fixture(scope="session")
def kimi_profile():
    from eagle_datagen.profile import load_profile

    return load_profile("kimi-k2.5")


@pytest.fixture(scope="session")
def standin_dir() -> Path:
    from eagle_datagen.standin.kimi_tokenizer import standin_tokenizer_dir

    return standin_tokenizer_dir()


@pytest.fixture(scope="session")
def fast_standin_dir() -> Path:
    from eagle_datagen.standin.kimi_tokenizer import FAST_STANDIN_NAME, standin_tokenizer_dir

    return standin_tokenizer_dir(None, FAST_STANDIN_NAME)


@pytest.fixture(scope="session")
def fast_tokenizer(kimi_profile):
    """The same ids as a fast tokenizer.json (no remote code): for tests that need a fast tokenizer."""
    from eagle_datagen.tokenization.loader import load_tokenizer

    return load_tokenizer("standin:kimi-k2.5-fast", kimi_profile).tokenizer


@pytest.fixture(scope="session")
def loaded_tokenizer(kimi_profile):
    from eagle_datagen.tokenization.loader import load_tokenizer

    return load_tokenizer("standin:kimi-k2.5", kimi_profile, trust_remote_code=True)


@pytest.fixture(scope="session")
def tokenizer(loaded_tokenizer):
    return loaded_tokenizer.tokenizer


def write_jsonl(path: Path, rows: list) -> Path:
    """Rows may be dicts (written as JSON) or raw bytes/str lines (written as they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        for row in rows:
            if isinstance(row, bytes):
                handle.write(row + b"\n")
            elif isinstance(row, str):
                handle.write(row.encode("utf-8", errors="surrogatepass") + b"\n")
            else:
                handle.write(json.dumps(row, ensure_ascii=False).encode("utf-8", errors="surrogatepass") + b"\n")
    return path


def user_record(text: str, category: str = "chat", **extra) -> dict:
    return {"category": category, "messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """A real S3 server on 127.0.0.1 for the whole session, stopped by its PID at the end."""
    from eagle_datagen.objectstore.seaweedfs import SeaweedFS

    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"), buckets=["eagle"])
    with server:
        yield server


@pytest.fixture
def s3_env(seaweedfs, monkeypatch):
    """Point boto3 (and the package's cached client) at the test server."""
    from eagle_datagen.objectstore.s3 import s3_client

    for key, value in seaweedfs.env.items():
        monkeypatch.setenv(key, value)
    s3_client.cache_clear()
    yield seaweedfs
    s3_client.cache_clear()


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def output_uri(request, tmp_path) -> str:
    """An output root on each backend: a local folder, and a fresh prefix on the session's SeaweedFS."""
    if request.param == "local":
        return str(tmp_path / "out")
    request.getfixturevalue("s3_env")
    return f"s3://eagle/root-{uuid.uuid4().hex[:12]}"
