"""One category DAG run (`dag.test()`) against a real SGLang server (CPU, tiny model), the one real-engine test
whose server loads a tokenizer (the stand-in Kimi tokenizer in the model's folder): preflight, plan, the
mapped shards and finalize all talk to the real engine through the Airflow connection `sglang_default`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from eagle_datagen_airflow.runs import run_id_for
from eagle_datagen_stack.sglang_engine import ServerOptions
from engine_support import assert_rows_match_server, published_rows, real_servers

pytestmark = [pytest.mark.slow, pytest.mark.engine]

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
DEMO_PROMPTS = REPO / "include" / "data" / "demo_prompts"
PROMPTS = 4


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recipe")
    lines = (DEMO_PROMPTS / "math.jsonl").read_text(encoding="utf-8").splitlines()[:PROMPTS]
    (folder / "math.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    recipe = folder / "recipe.yaml"
    recipe.write_text(
        # Airflow keeps one asset per name: the recipe name of the other DAG tests (the release asset's URI holds
        # it) and a category of its own (eagle_datagen__<category>), or the other tests' assets turn inactive
        "version: 1\nname: dagtest\nseed: 7\ncategories:\n"
        "  realmath:\n    sources: [math.jsonl]\n    sampling: {max_new_tokens: 160}\n",
        encoding="utf-8",
    )
    logs = tmp_path_factory.mktemp("sglang-logs")
    with real_servers(logs, ServerOptions(skip_tokenizer_init=False)) as [(server, proxy)]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("EAGLE_DATAGEN_RECIPE", str(recipe))
            sglang = {
                "conn_type": "http",
                "host": "127.0.0.1",
                "port": proxy.port,
                "extra": {"tokenizer": "standin:kimi-k2.5", "trust_remote_code": True},
            }
            mp.setenv("AIRFLOW_CONN_SGLANG_DEFAULT", json.dumps(sglang))
            yield {"server": server, "proxy": proxy, "output": tmp_path_factory.mktemp("out")}


def test_category_dag_against_the_real_engine(stack):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    conf = {"shard_size": 2, "samples_per_prompt": 2, "draft_vocab_size": 16, "output": str(stack["output"])}
    run = bag.get_dag("eagle_datagen__realmath").test(run_conf=conf)
    tasks = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert run.state == "success", tasks
    assert {k for k in tasks if k[0] == "generate_shard"} == {("generate_shard", 0), ("generate_shard", 1)}

    rows = published_rows(stack["output"], run_id_for("realmath", run.run_id))
    every = rows["data"] + rows["quarantine"]
    assert len(every) == len({r["sample_id"] for r in every}) == PROMPTS * 2
    assert rows["data"], "the tiny model answers validly most of the time"
    exchanges = stack["proxy"].exchanges
    assert_rows_match_server(every, exchanges)
    # with its tokenizer loaded the server also decodes text (which the pipeline never uses)
    assert any(e.text for e in exchanges if e.status == 200)
    model_info = requests.get(f"{stack['server'].url}/model_info", timeout=10).json()
    assert model_info["tokenizer_path"] == model_info["model_path"]
