# The Airflow image of an eagle-datagen deployment (docker-compose.yaml): the official Airflow image with
# the project's pinned requirements and the project itself, laid out as an Airflow project
# (/opt/airflow/dags, /opt/airflow/plugins, /opt/airflow/include). Its Airflow version and Python are the
# ones requirements.txt pins and CI tests with (tests/deploy/ checks that they agree).
FROM apache/airflow:3.3.2-python3.11

# The pins first, so that a change to the code alone reuses this layer.
COPY --chown=airflow:0 requirements.txt constraints.txt /opt/airflow/requirements/
RUN pip install --no-cache-dir "apache-airflow==3.3.2" \
        -r /opt/airflow/requirements/requirements.txt -c /opt/airflow/requirements/constraints.txt

COPY --chown=airflow:0 pyproject.toml README.md /opt/airflow/project/
COPY --chown=airflow:0 include /opt/airflow/project/include
RUN pip install --no-cache-dir --no-deps /opt/airflow/project

COPY --chown=airflow:0 dags /opt/airflow/dags
COPY --chown=airflow:0 plugins /opt/airflow/plugins
COPY --chown=airflow:0 include/recipes /opt/airflow/include/recipes
COPY --chown=airflow:0 include/data /opt/airflow/include/data

# Mount points of the named volumes: a new volume takes over this ownership. The stand-in tokenizer is
# built into the cache on first use (about a second).
RUN mkdir -p /opt/airflow/auth /opt/airflow/cache && chmod g+rwx /opt/airflow/auth /opt/airflow/cache
ENV EAGLE_DATAGEN_CACHE=/opt/airflow/cache \
    EAGLE_DATAGEN_RECIPE=/opt/airflow/include/recipes/demo.yaml \
    HF_HUB_OFFLINE=1
