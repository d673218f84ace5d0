"""The host name Airflow records for a task instance, per worker: `[core] hostname_callable`.

Airflow 3's task runner reports `conf.getimport("core", "hostname_callable")()` as the task instance's
`hostname` when the task starts and with every heartbeat. Two Celery workers on one machine share the OS
host name, so a deployment that runs several (the multi-worker test, a single big machine) points the
setting at `eagle_datagen_stack.hostname.worker_hostname` and gives each worker its own
`EAGLE_DATAGEN_WORKER_HOSTNAME`. Other components, and workers without the variable, report the machine's
fully qualified name as Airflow's default does. Nothing here imports Airflow.
"""

from __future__ import annotations

import os
import socket

WORKER_HOSTNAME_VARIABLE = "EAGLE_DATAGEN_WORKER_HOSTNAME"
HOSTNAME_CALLABLE = "eagle_datagen_stack.hostname.worker_hostname"


def worker_hostname() -> str:
    return os.environ.get(WORKER_HOSTNAME_VARIABLE, "").strip() or socket.getfqdn()
