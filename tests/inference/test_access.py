"""The deployment's access (inference/access.py): where the API key comes from, how it is checked and masked, and
that every aiohttp session of the package is made by it (so no request to SGLang goes without the key)."""

from __future__ import annotations

import re

import pytest

from eagle_datagen.errors import ConfigError
from eagle_datagen.inference.access import server_access
from eagle_datagen.redaction import redact

from conftest import REPO


def test_every_session_of_the_package_is_made_by_its_access():
    package = REPO / "include" / "eagle_datagen"
    makers = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if re.search(r"ClientSession\(", path.read_text(encoding="utf-8")) and "standin" not in path.parts
    ]
    assert makers == ["inference/access.py"]


def test_a_key_file_is_read_checked_and_masked(tmp_path, monkeypatch):
    monkeypatch.delenv("EAGLE_DATAGEN_API_KEY", raising=False)
    assert server_access().headers() == {}
    path = tmp_path / "key"
    path.write_text("  sk-from-a-file-7788\n")
    access = server_access(str(path))
    assert access.headers() == {"Authorization": "Bearer sk-from-a-file-7788"}
    assert "sk-from-a-file" not in repr(access)
    assert redact("header Bearer sk-from-a-file-7788 sent") == "header Bearer *** sent"
    path.write_text("two words\n")
    with pytest.raises(ConfigError, match="spaces or control characters"):
        server_access(str(path))
    path.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        server_access(str(path))
    with pytest.raises(ConfigError, match="cannot read the API key file --api-key-file"):
        server_access(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="CA bundle .* is not a file"):
        server_access(ca_bundle=str(tmp_path / "missing.pem"))
    monkeypatch.setenv("EAGLE_DATAGEN_API_KEY", "sk-from-the-env-99")
    monkeypatch.setenv("EAGLE_DATAGEN_COMPARE_API_KEY", "")
    a = server_access()
    b = server_access(variable="EAGLE_DATAGEN_COMPARE_API_KEY", flag="--compare-api-key-file", fallback=a)
    assert b.api_key == a.api_key and b.source == "$EAGLE_DATAGEN_API_KEY"
