"""The compose file's router service against the pinned router: every flag it passes is one that
`smg launch --help` of smg 1.13.0 (from `make sglang`) lists, it overrides the defaults a deployment must not
keep (request timeout, retries), and its port is not published: its worker-admin routes answer anyone who
can reach it (docs/internals/real-engine.md, "The router in a deployment")."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
import yaml

from eagle_datagen_stack.sglang_engine import engine_venv

from conftest import REPO

COMPOSE = REPO / "docker-compose.yaml"


@pytest.fixture(scope="module")
def router() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]["sglang-router"]


def flags_passed(command: str) -> list[str]:
    return re.findall(r"(?<!\S)(--[a-z0-9][a-z0-9-]*)", command)


def smg_help() -> str:
    smg = engine_venv() / "bin" / "smg"
    if not smg.exists():
        reason = f"smg is not installed in {engine_venv()}: run `make sglang`"
        if os.environ.get("EAGLE_DATAGEN_REQUIRE_ENGINE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    done = subprocess.run([str(smg), "launch", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.engine
def test_every_router_flag_in_the_compose_file_exists_in_the_pinned_smg(router):
    known = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", smg_help()))
    passed = flags_passed(router["command"])
    assert passed, router["command"]
    assert not set(passed) - known, f"flags smg 1.13.0 does not have: {sorted(set(passed) - known)}"


@pytest.mark.engine
def test_the_defaults_the_compose_file_overrides_are_the_pinned_smgs():
    text = " ".join(smg_help().split())
    assert "--request-timeout-secs REQUEST_TIMEOUT_SECS Request timeout in seconds (default: 1800)" in text
    assert "retry attempts for failed requests (default: 5)" in text
    assert "or 0.0.0.0 for all interfaces (default: 0.0.0.0)" in text


def test_the_router_overrides_timeout_and_retries(router):
    passed = router["command"].split()
    assert passed[passed.index("--request-timeout-secs") + 1] == "3600"  # the client's --request-timeout
    assert int(passed[passed.index("--retry-max-retries") + 1]) < 5


def test_the_router_port_is_not_published(router):
    # POST /workers, DELETE /workers/{id} and /flush_cache answer without authentication
    assert "ports" not in router, "the router's port must stay inside the deployment's network"
