# Strata in one image: the server (API and dashboard), the agent, the TensorFlow runtime and the
# examples. docker-compose.yml runs it as the server and as each agent.
#
#   docker build -t strata .          # online: node builds the dashboard, pip installs from PyPI
#
# Offline (air-gapped hosts; also how CI builds it), with the two base images already loaded:
#
#   make ui                                       # the dashboard, built on the host
#   .venv/bin/pip download -d wheelhouse -c requirements.lock . setuptools==84.2.1 pip==26.3
#   docker build --build-arg WHEELHOUSE=wheelhouse \
#                --build-arg UI_PREBUILT=1 --build-arg NODE_IMAGE=python:3.11-slim-bookworm .
#
# Only the classic builder's features are used (no RUN --mount, no heredocs), so the legacy
# builder, BuildKit, `docker compose` and `docker-compose` 1.29 all build it. The classic
# builder builds every stage, so with UI_PREBUILT=1 the ui stage must start from an image that
# is there already (any with a shell), not from node.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG NODE_IMAGE=node:22-bookworm-slim

# ---- the dashboard: npm ci && npm run build → frontend/dist (or the one built on the host) ----
FROM ${NODE_IMAGE} AS ui
ARG UI_PREBUILT=0
WORKDIR /src/frontend
COPY frontend/ ./
RUN if [ "$UI_PREBUILT" = 1 ]; then \
        test -f dist/index.html \
        || { echo "UI_PREBUILT=1 needs frontend/dist/index.html: run make ui first" >&2; exit 1; }; \
    else \
        rm -rf dist node_modules \
        && npm ci --no-audit --no-fund --loglevel=error \
        && npm run build; \
    fi

# ---- the Python environment: the project and its runtime dependencies in /opt/strata ----
FROM ${PYTHON_IMAGE} AS python
# A folder of the build context holding every wheel (pip download); empty means PyPI.
ARG WHEELHOUSE=
ARG PIP_VERSION=26.3
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY . .
# One layer: the sources, the wheelhouse and pip's build files stay in this stage. No dev
# dependencies (the lock file only constrains versions). Instead of compiling every module
# (--no-compile), importing what the server, the agent and a training task load writes the
# bytecode they need and proves that the install works. TensorFlow's C++ headers (430 MB)
# only serve to compile custom ops.
RUN set -eu; \
    if [ -n "$WHEELHOUSE" ]; then \
        test -d "$WHEELHOUSE" || { echo "WHEELHOUSE=$WHEELHOUSE is not a folder of the build context" >&2; exit 1; }; \
        export PIP_NO_INDEX=1 PIP_FIND_LINKS="/src/$WHEELHOUSE"; \
    fi; \
    python3 -m venv /opt/strata; \
    /opt/strata/bin/pip install --quiet --no-compile "pip==$PIP_VERSION"; \
    /opt/strata/bin/pip install --quiet --no-compile -c requirements.lock .; \
    rm -rf /opt/strata/lib/python3*/site-packages/tensorflow/include; \
    cd /; \
    TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=3 /opt/strata/bin/python -c \
        "import backend.app, backend.cli, agents.host.agent, agents.runtime.server, tensorflow, tf_keras, sklearn.datasets"; \
    /opt/strata/bin/strata --help > /dev/null

# ---- the image ----
FROM ${PYTHON_IMAGE}
# A non-root user; /var/lib/strata holds the server's data, the folder server replicas share
# (STRATA_SHARED_DIR), the shared checkpoint volume and the secrets (a named volume takes a
# folder's owner and mode when it is first mounted there).
# The server's secrets folder stays traversable: PostgreSQL reads the database password from
# it as its own user. The agents' one is theirs alone.
RUN groupadd --gid 10001 strata \
    && useradd --uid 10001 --gid strata --no-create-home --home-dir /var/lib/strata \
        --shell /usr/sbin/nologin strata \
    && mkdir -p /var/lib/strata/data /var/lib/strata/shared /var/lib/strata/checkpoints \
        /var/lib/strata/secrets /var/lib/strata/agent-secrets /var/lib/strata/agent /app \
    && chmod 755 /var/lib/strata/secrets \
    && chmod 700 /var/lib/strata/agent-secrets /var/lib/strata/agent \
    && chown -R strata:strata /var/lib/strata
# The agents' workspace: jobs' working_dir (.) resolves here, so `python examples/digits.py`
# runs the examples that `strata submit examples/...` names.
COPY examples /app/examples
COPY --from=ui /src/frontend/dist /opt/strata-ui
ENV PATH=/opt/strata/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    STRATA_UI_DIR=/opt/strata-ui \
    STRATA_HOST=0.0.0.0 \
    STRATA_PORT=8000 \
    STRATA_DATA_DIR=/var/lib/strata/data \
    STRATA_CHECKPOINT_ROOT=/var/lib/strata/checkpoints
WORKDIR /app
EXPOSE 8000
USER strata
CMD ["strata", "server"]
# Last, after the instructions that only set metadata: the classic builder runs each of them
# in a container of the whole filesystem so far, which the vfs storage driver copies.
COPY --from=python /opt/strata /opt/strata
