"""A category DAG against two stand-in replicas, one with the echo bug: the mapped generate_shard tasks each
screen their own answers; the task that ejects the replica records it under the output root, the shard
tasks after it leave the replica out, and the run's report lists it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle_datagen_airflow.runs import run_id_for

pytestmark = pytest.mark.slow

DAGS = Path(__file__).resolve().parents[2] / "dags"
PROMPTS, SHARD_SIZE = 40, 10


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from eagle_datagen.standin.sglang.config import SimConfig
    from eagle_datagen.standin.sglang.runner import SimServerThread

    folder = tmp_path_factory.mktemp("sick")
    lines = [json.dumps({"messages": [{"role": "user", "content": f"sum {i} and {i * 7}"}]}) for i in range(PROMPTS)]
    (folder / "math.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "recipe.yaml").write_text(
        # Airflow keeps one asset per name: the recipe name of the other DAG tests (the release asset's URI holds
        # it) and a category of its own (eagle_datagen__<category>), or the other tests' assets turn inactive
        "version: 1\nname: dagtest\ncategories:\n  sickmath:\n    sources: [math.jsonl]\n"
        "    samples_per_prompt: 2\n    sampling: {max_new_tokens: 256}\n",
        encoding="utf-8",
    )
    instant = SimConfig().with_profile("instant")
    with (
        SimServerThread(instant) as good,
        SimServerThread(SimConfig(faults={"echo": 0.5}, fault_seed=3).with_profile("instant")) as sick,
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setenv("EAGLE_DATAGEN_RECIPE", str(folder / "recipe.yaml"))
        extra = {
            "urls": [good.url, sick.url],
            "tokenizer": "standin:kimi-k2.5",
            "trust_remote_code": True,
            "concurrency": 2,
        }
        mp.setenv("AIRFLOW_CONN_SGLANG_DEFAULT", json.dumps({"conn_type": "http", "extra": extra}))
        yield {"output": str(folder / "out"), "good": good, "sick": sick}


def test_shard_tasks_share_an_ejection_and_the_report_lists_it(deployment, caplog):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    conf = {"shard_size": SHARD_SIZE, "draft_vocab_size": 16, "output": deployment["output"]}
    with caplog.at_level("WARNING", logger="eagle_datagen"):
        run = bag.get_dag("eagle_datagen__sickmath").test(run_conf=conf)
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert all(state == "success" for state in states.values()), states
    shards = sum(task == "generate_shard" for task, _ in states)
    assert set(states) >= {("preflight", -1), ("plan", -1), ("finalize", -1)}, states  # an empty run passes all()
    assert shards == PROMPTS // SHARD_SIZE, states  # shards of SHARD_SIZE prompts
    sick = deployment["sick"].url
    assert any("taken out of rotation" in r.getMessage() and sick in r.getMessage() for r in caplog.records)

    out = Path(deployment["output"])
    run_id = run_id_for("sickmath", run.run_id)
    manifest = json.loads((out / "manifests" / f"run={run_id}.json").read_text())
    (ejection,) = manifest["counts"]["endpoints"][sick]["ejected"]
    tallies = [json.loads(p.read_text()) for p in (out / f"checkpoints/run={run_id}/endpoints").glob("tally-*.json")]
    later = [t for t in tallies if t["by"] != ejection["by"]]
    assert ejection["by"].startswith("shard ") and later  # other shard tasks ran after or beside it
    learned = [t for t in later if t["endpoints"][sick]["learned_ejection"]]
    assert learned and all(t["endpoints"][sick]["answers"] == 0 for t in learned)
    assert manifest["counts"]["data"] == PROMPTS * 2  # no echo answer stored, every sample once
    assert sick in (out / "manifests" / f"run={run_id}.report.html").read_text()
