"""One conductor: the command line and an Airflow DAG run, given the same settings, run the same steps and apply
the same checks, so they plan the same run (shards, samples, sampling) and ask the servers the same things.

The CLI runs `eagle-datagen run` in this process; the DAG runs with `dag.test()` (its tasks in this process too),
both against one stand-in SGLang server and local output folders. Every call of the preflight (the endpoints'
checks: model, mismatch override, readiness wait, canary) is recorded on both paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_datagen.cli import main
from eagle_datagen.errors import ConfigError
from eagle_datagen.generation import steps
from eagle_datagen.generation.endpoint_check import min_endpoints
from eagle_datagen.generation.steps import RunConfig, plan_step, preflight_step

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEMO_PROMPTS = REPO / "include" / "data" / "demo_prompts"
# a category of its own: its DAG's asset name is then this test's alone (an earlier DAG test of the session that
# registered `eagle_datagen__math` under its own recipe's URI left this run's asset inactive and its finalize failing)
CATEGORY = "conductormath"
# the same settings, as each front end says them
FORM = {"shard_size": 2, "samples_per_prompt": 2, "draft_vocab_size": 16, "temperature": 0.7, "limit": 5}
FLAGS = ["--shard-size", "2", "--samples-per-prompt", "2", "--draft-vocab-size", "16", "--temperature", "0.7"]
FLAGS += ["--limit", "5", "--categories", CATEGORY, "--incremental", "--per-weight-version"]  # a DAG run's own


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    folder = tmp_path_factory.mktemp("conductor")
    lines = (DEMO_PROMPTS / "math.jsonl").read_text(encoding="utf-8").splitlines()[:8]
    (folder / "math.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    recipe = folder / "recipe.yaml"
    recipe.write_text(
        "version: 1\nname: demo\nseed: 3\ndefaults:\n  sampling: {max_new_tokens: 128}\n"
        f"categories:\n  {CATEGORY}:\n    sources: [math.jsonl]\n    sampling: {{top_p: 0.9}}\n",
        encoding="utf-8",
    )
    with SimServerThread(SimConfig().with_profile("instant")) as sim, pytest.MonkeyPatch.context() as mp:
        mp.setenv("EAGLE_DATAGEN_RECIPE", str(recipe))
        host, port = sim.url.removeprefix("http://").split(":")
        extra = {"tokenizer": "standin:kimi-k2.5", "trust_remote_code": True}
        sglang = {"conn_type": "http", "host": host, "port": int(port), "extra": extra}
        mp.setenv("AIRFLOW_CONN_SGLANG_DEFAULT", json.dumps(sglang))
        yield {"folder": folder, "recipe": recipe, "url": sim.url}


REAL_PREFLIGHT = steps.preflight_run


def recording_preflight(calls: list, monkeypatch) -> None:
    real = REAL_PREFLIGHT

    async def record(urls, setup, model, canary, **kwargs):  # noqa: ANN001, ANN003, ANN202
        # what the endpoints are asked and judged by; the output root, run id, caller and check objects differ, and
        # the front end, which words the messages (settings.named)
        ignored = ("root", "run_id", "by", "agreement", "wanted_min", "front_end", "access")
        same = {k: v for k, v in kwargs.items() if k not in ignored}
        access = kwargs.get("access")  # the key and CA bundle sent; its messages are in the front end's words
        same["access"] = (access.api_key is not None, access.ca_bundle) if access is not None else None
        calls.append(
            {
                "urls": list(urls),
                "profile": setup.profile.name,
                "agreement": kwargs.get("agreement") is not None,
                # the minimum in force (flag or form, else the recipe's, else the default), however it was given
                "min_endpoints": min_endpoints(kwargs.get("wanted_min"), setup.recipe),
                "model": model,
                "canary_sampling": {k: v for k, v in canary["sampling_params"].items() if k != "sampling_seed"},
            }
            | same
        )
        return await real(urls, setup, model, canary, **kwargs)

    monkeypatch.setattr(steps, "preflight_run", record)


def the_plan(output: Path) -> dict:
    """What a plan decides, without the names of the run: shards, samples, categories' sampling, model."""
    (path,) = output.glob("plans/run=*/plan.json")
    plan = json.loads(path.read_text())
    return {
        "model": plan["model"],
        "profile": plan["profile"],
        "categories": plan["categories"],
        "shards": [{k: v for k, v in s.items() if k != "key"} for s in plan["shards"]],
    }


def test_the_cli_and_a_dag_run_plan_the_same_run_with_the_same_checks(deployment, tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    cli_calls: list = []
    dag_calls: list = []
    recording_preflight(cli_calls, monkeypatch)
    code = main(
        ["run", "--recipe", str(deployment["recipe"]), "--tokenizer", "standin:kimi-k2.5", "--trust-remote-code"]
        + ["--sglang-url", deployment["url"], "--output", str(tmp_path / "cli"), *FLAGS]
    )
    assert code == 0

    recording_preflight(dag_calls, monkeypatch)
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    run = bag.get_dag(f"eagle_datagen__{CATEGORY}").test(run_conf=FORM | {"output": str(tmp_path / "dag")})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["finalize"] == "success", states

    cli_plan, dag_plan = the_plan(tmp_path / "cli"), the_plan(tmp_path / "dag")
    assert cli_plan == dag_plan
    assert cli_plan["categories"][CATEGORY]["sampling"] == {"max_new_tokens": 128, "temperature": 0.7, "top_p": 0.9}
    assert sum(s["samples"] for s in cli_plan["shards"]) == 10 and len(cli_plan["shards"]) == 3
    assert cli_calls == dag_calls and len(cli_calls) == 1, (cli_calls, dag_calls)
    assert cli_calls[0]["allow_model_mismatch"] is False and cli_calls[0]["wait_s"] == 30.0
    assert cli_calls[0]["agreement"] and cli_calls[0]["min_endpoints"] == 1


def test_the_steps_refuse_a_rerun_whose_configuration_changed(deployment, tmp_path):
    """What the command line always checked, a DAG's tasks now check too: a plan made with other sampling is not
    continued with this configuration's (check_plan_matches)."""
    config = RunConfig(
        output=str(tmp_path),
        tokenizer="standin:kimi-k2.5",
        sglang_urls=[deployment["url"]],
        run_id="rerun",
        recipe=str(deployment["recipe"]),
        limit=3,
        trust_remote_code=True,
        front_end="airflow",
    )
    servers = preflight_step(config.to_dict())
    assert plan_step(config.to_dict(), servers)["samples"] == 3
    changed = RunConfig.from_dict(config.to_dict() | {"temperature": 0.2}).to_dict()
    with pytest.raises(ConfigError, match="other settings"):
        plan_step(changed, preflight_step(changed))
