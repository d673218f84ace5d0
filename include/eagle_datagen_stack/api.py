"""A small client of Airflow 3's REST API (`/api/v2`), logged in as the simple auth manager's admin.

Only what the local stack, the demo and the system tests need: health, DAGs, pools, triggering runs,
and reading runs and task instances.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import requests

from eagle_datagen_stack.processes import Component, wait_until

FINISHED = ("success", "failed")


class AirflowApiError(RuntimeError):
    pass


class AirflowApi:
    def __init__(self, base_url: str, username: str, password: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.password = password
        self.timeout_s = timeout_s
        self.session = requests.Session()
        self._token: str | None = None

    def _login(self) -> None:
        answer = self.session.post(
            f"{self.base_url}/auth/token",
            json={"username": self.username, "password": self.password},
            timeout=self.timeout_s,
        )
        if answer.status_code not in (200, 201):
            raise AirflowApiError(f"login as {self.username!r} refused: HTTP {answer.status_code} {answer.text[:300]}")
        self._token = answer.json()["access_token"]
        self.session.headers["Authorization"] = f"Bearer {self._token}"

    def request(self, method: str, path: str, ok: tuple[int, ...] = (200,), **kwargs: Any) -> requests.Response:
        if self._token is None:
            self._login()
        url = f"{self.base_url}/api/v2/{path.lstrip('/')}"
        answer = self.session.request(method, url, timeout=self.timeout_s, **kwargs)
        if answer.status_code == 401:  # the token expired: log in again once
            self._login()
            answer = self.session.request(method, url, timeout=self.timeout_s, **kwargs)
        if answer.status_code not in ok:
            raise AirflowApiError(f"{method} {path}: HTTP {answer.status_code} {answer.text[:500]}")
        return answer

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        return self.request("GET", path, params=params).json()

    # --- DAGs and pools ---------------------------------------------------------------------------------

    def dag_ids(self) -> set[str]:
        return {d["dag_id"] for d in self.get("dags", limit=1000)["dags"]}

    def unpause(self, dag_id: str) -> None:
        self.request("PATCH", f"dags/{dag_id}", json={"is_paused": False})

    def set_pool(self, name: str, slots: int, description: str) -> None:
        body = {"name": name, "slots": slots, "description": description, "include_deferred": False}
        answer = self.request("POST", "pools", ok=(200, 201, 409), json=body)
        if answer.status_code == 409:  # kept from an earlier start of the same home
            self.request("PATCH", f"pools/{name}", json=body)

    # --- runs ---------------------------------------------------------------------------------------------

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None, run_id: str | None = None) -> str:
        body: dict[str, Any] = {"logical_date": None, "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        return self.request("POST", f"dags/{dag_id}/dagRuns", json=body).json()["dag_run_id"]

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.get(f"dags/{dag_id}/dagRuns/{run_id}")

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float, alive: Sequence[Component] = ()) -> str:
        """The run's final state ("success" or "failed"), polled every second; fails at once when one of
        `alive` dies, and with a TimeoutError after `timeout_s`."""

        def finished() -> str | None:
            state = self.dag_run(dag_id, run_id)["state"]
            return state if state in FINISHED else None

        return wait_until(finished, timeout_s, f"{dag_id} run {run_id} finished", alive, every_s=1)  # type: ignore[return-value]

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self.get(f"dags/{dag_id}/dagRuns", limit=1000, order_by="run_after")["dag_runs"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self.get(f"dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=1000)["task_instances"]

    def task_instance_tries(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[dict[str, Any]]:
        """Every try of one task instance (its hostname, state, try_number), oldest first."""
        path = f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
        tries = self.get(f"{path}/{map_index}/tries" if map_index >= 0 else f"{path}/tries")["task_instances"]
        return sorted(tries, key=lambda t: t["try_number"])
