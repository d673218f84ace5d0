"""`LocalStack`: a whole deployment on 127.0.0.1, started in order and stopped in reverse.

    with LocalStack(StackOptions(home=Path(".demo"))) as stack:
        run_id = stack.api.trigger("eagle_datagen__math", {"limit": 5})

brings up, under `home`:
1. `seaweedfs/`: a SeaweedFS S3 server with the bucket `eagle` (the output root is `s3://eagle/<prefix>`);
2. stand-in SGLang servers (threads of this process, one per replica), or with `engine="sglang"` real SGLang
   CPU servers (the tiny model of `make sglang`, one process group per replica) behind the real `smg` router,
   whose URL is then the only inference endpoint;
3. `airflow/`: an Airflow home (SQLite by default), `airflow db migrate`, then the api-server,
   dag-processor and scheduler (plus whatever `components` adds, such as the triggerer), the connections
   `sglang_default` and `aws_default` in their environment, the `sglang` pool, and waits until every DAG
   of the recipe is parsed; with `executor="CeleryExecutor"` (a Postgres `database_url` and a Redis
   `broker_url`, see `services.py`) also one Celery worker per name in `celery_workers`, each with its own
   host name, waited for until it is ready;
4. `logs/`: one log per component.
Anything started is stopped again if a later step fails.
"""

from __future__ import annotations

import logging
import shutil
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from eagle_datagen.objectstore.seaweedfs import SeaweedFS
from eagle_datagen.sources.recipe import load_recipe
from eagle_datagen.standin.sglang.config import SimConfig
from eagle_datagen.standin.sglang.runner import SimServerThread
from eagle_datagen_stack.airflow_env import (
    ADMIN,
    AIRFLOW,
    PROJECT,
    AirflowDeployment,
    aws_connection,
    sglang_connection,
)
from eagle_datagen_stack.api import AirflowApi
from eagle_datagen_stack.hostname import WORKER_HOSTNAME_VARIABLE
from eagle_datagen_stack.processes import Component, free_port, http_ok, wait_until
from eagle_datagen_stack.sglang_engine import EngineMissing, SGLangServer, SmgRouter, missing_engine, tiny_model_dir

log = logging.getLogger(__name__)

DEMO_RECIPE = PROJECT / "include" / "recipes" / "demo.yaml"
BUCKET = "eagle"
CORE_COMPONENTS = ("api-server", "dag-processor", "scheduler")


@dataclass
class StackOptions:
    home: Path
    recipe: Path = DEMO_RECIPE
    output_prefix: str = "datagen"
    sim: SimConfig = field(default_factory=lambda: SimConfig().with_profile("fast"))
    engine: str = "sim"  # "sim": serve-sim replicas; "sglang": real SGLang replicas behind the smg router
    replicas: int = 1
    api_port: int | None = None  # None: a free port
    executor: str = "LocalExecutor"
    database_url: str | None = None  # None: SQLite in the Airflow home
    broker_url: str | None = None  # CeleryExecutor: the broker (e.g. redis://127.0.0.1:6379/15)
    celery_workers: tuple[str, ...] = ()  # CeleryExecutor: a worker per name, reporting it as its host name
    worker_concurrency: int = 2  # task processes per Celery worker
    parallelism: int = 4
    pool_slots: int = 4  # shards generating at once
    schedule: str | None = "none"  # EAGLE_DATAGEN_SCHEDULE: "none" (trigger by hand) or a cron expression
    paused_at_creation: bool = False
    draft_vocab_size: int | None = None  # the forms' default (EAGLE_DATAGEN_DRAFT_VOCAB_SIZE)
    components: tuple[str, ...] = CORE_COMPONENTS
    settings: dict[str, str] = field(default_factory=dict)
    fresh: bool = True  # empty `home` first; False keeps the DB and the stored data of an earlier start
    startup_timeout_s: float = 240.0

    def __post_init__(self) -> None:
        if self.engine not in ("sim", "sglang"):
            raise ValueError(f"unknown engine {self.engine!r}: use 'sim' (serve-sim) or 'sglang' (the real engine)")


def celery_component(worker: str) -> str:
    return f"celery-worker-{worker}"


class LocalStack:
    def __init__(self, options: StackOptions) -> None:
        self.options = options
        self.home = options.home.resolve()
        self.s3: SeaweedFS | None = None
        self.sims: list[SimServerThread] = []
        self.engines: list[SGLangServer] = []
        self.router: SmgRouter | None = None
        self.airflow: AirflowDeployment | None = None
        self.components: dict[str, Component] = {}
        self.api: AirflowApi | None = None
        self._exit = ExitStack()

    @property
    def output(self) -> str:
        return f"s3://{BUCKET}/{self.options.output_prefix}"

    @property
    def sglang_urls(self) -> list[str]:
        if self.router is not None:
            return [self.router.url]
        return [sim.url for sim in self.sims]

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    def expected_dag_ids(self) -> set[str]:
        recipe = load_recipe(self.options.recipe)
        return {f"eagle_datagen__{c}" for c in recipe.categories} | {"eagle_datagen_release"}

    def start(self) -> LocalStack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        opts = self.options
        if opts.fresh:
            shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True, exist_ok=True)
        log.info("object store: SeaweedFS in %s", self.home / "seaweedfs")
        self.s3 = self._exit.enter_context(SeaweedFS(self.home / "seaweedfs", buckets=[BUCKET]))
        if opts.engine == "sglang":
            self._start_real_engine()
        else:
            for _ in range(opts.replicas):
                self.sims.append(self._exit.enter_context(SimServerThread(opts.sim)))
            log.info("stand-in SGLang: %s", ", ".join(self.sglang_urls))
        self.airflow = self.deployment()
        password = self.airflow.admin_password()
        log.info("airflow db migrate (%s)", self.airflow.home)
        self.airflow.cli("db", "migrate")
        for name in opts.components:
            self.start_component(name)
        for name in opts.celery_workers:
            self.start_celery_worker(name)
        alive = list(self.components.values())
        wait_until(
            lambda: http_ok(f"{self.airflow.api_url}/api/v2/monitor/health"),
            opts.startup_timeout_s,
            "the Airflow api-server answering",
            alive,
        )
        self.api = AirflowApi(self.airflow.api_url, ADMIN, password)
        self.api.set_pool("sglang", opts.pool_slots, "shards generating at once")
        expected = self.expected_dag_ids()
        wait_until(
            lambda: expected <= self.api.dag_ids(), opts.startup_timeout_s, "the DAGs of the recipe parsed", alive
        )
        for name in opts.celery_workers:
            worker = self.components[celery_component(name)]
            node = f"{name}@"  # Celery logs "<node> ready." once it consumes tasks
            wait_until(
                lambda w=worker, n=node: any(n in line and " ready." in line for line in w.log_text().splitlines()),
                opts.startup_timeout_s,
                f"Celery worker {name} ready",
                alive,
            )
        log.info("Airflow is up at %s with %d DAGs", self.airflow.api_url, len(expected))

    def _start_real_engine(self) -> None:
        reason = missing_engine()
        if reason:
            raise EngineMissing(reason)
        replicas = range(self.options.replicas)
        self.engines = [SGLangServer(tiny_model_dir(), self.logs, name=f"sglang-{i}") for i in replicas]
        for server in self.engines:
            self._exit.callback(server.stop)
        log.info("%d real SGLang replicas starting side by side (25-65 s each on a CPU)", len(self.engines))
        with ThreadPoolExecutor(len(self.engines)) as pool:
            list(pool.map(SGLangServer.start, self.engines))  # the first failure is raised here
        self.router = self._exit.enter_context(SmgRouter([s.url for s in self.engines], self.logs))
        log.info("real SGLang: %s behind smg at %s", ", ".join(s.url for s in self.engines), self.router.url)

    def deployment(self) -> AirflowDeployment:
        opts = self.options
        assert self.s3 is not None
        settings = {
            "EAGLE_DATAGEN_RECIPE": str(opts.recipe.resolve()),
            "EAGLE_DATAGEN_OUTPUT": self.output,
            "EAGLE_DATAGEN_SCHEDULE": opts.schedule or "none",
            "HF_HUB_OFFLINE": "1",
            **({"EAGLE_DATAGEN_DRAFT_VOCAB_SIZE": str(opts.draft_vocab_size)} if opts.draft_vocab_size else {}),
            **opts.settings,
        }
        return AirflowDeployment(
            home=self.home / "airflow",
            api_port=opts.api_port or free_port(),
            executor=opts.executor,
            database_url=opts.database_url,
            broker_url=opts.broker_url,
            parallelism=opts.parallelism,
            connections={
                "sglang_default": sglang_connection(
                    self.sglang_urls, trust_remote_code=True
                ),  # the stand-in is remote code
                "aws_default": aws_connection(self.s3.endpoint_url, self.s3.access_key, self.s3.secret_key),
            },
            settings=settings,
            paused_at_creation=opts.paused_at_creation,
        )

    def start_component(self, name: str, args: list[str] | None = None, env: dict[str, str] | None = None) -> Component:
        """Start an Airflow component (or any command given as `args`) with the deployment's environment
        (plus `env`)."""
        assert self.airflow is not None
        component = self.airflow.component(name, self.logs, args, env).start()
        self.components[name] = component
        self._exit.callback(component.stop)
        log.info("started %s (pid %s)", name, component.pid)
        return component

    def start_celery_worker(self, name: str, concurrency: int | None = None) -> Component:
        """A Celery worker (`airflow celery worker`) that Airflow records as host `name`; its component is
        `celery-worker-<name>`. Its log server stays off (it would bind every interface): task logs are
        files under the Airflow home, which the api-server reads directly on this machine."""
        args = [
            AIRFLOW,
            "celery",
            "worker",
            "--skip-serve-logs",
            "--celery-hostname",
            f"{name}@%h",  # Celery's node name: distinct per worker on one machine
            "--concurrency",
            str(concurrency or self.options.worker_concurrency),
        ]
        return self.start_component(celery_component(name), args, {WORKER_HOSTNAME_VARIABLE: name})

    def check_alive(self) -> None:
        for component in self.components.values():
            component.check_alive()

    def stop(self) -> None:
        self._exit.close()  # components in reverse start order, then the stand-ins, then SeaweedFS
        self.components.clear()
        self.sims.clear()
        self.engines.clear()
        self.router = None

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
