"""A Docker engine, offline base images and a compose project, for tests/e2e/test_compose.py.

Nothing here pulls from an image registry: the base images the Dockerfile and the compose file
name (Python, PostgreSQL, HAProxy) are made locally from a Debian bookworm rootfs (mmdebstrap
from the Debian mirror) when the engine does not have them, and Python packages come from a
wheelhouse (`pip download`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.support.postgres import free_port
from tests.support.strict import missing_dependency

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
DEBIAN_MIRROR = os.environ.get("STRATA_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# The rootfs tarball is kept between runs (it only changes with the package list).
CACHE_DIR = Path(
    os.environ.get("STRATA_TEST_CACHE_DIR", Path.home() / ".cache" / "strata" / "e2e-compose")
)
# One rootfs stands in for the three base images: bookworm's python3 is 3.11, its PostgreSQL
# is 15, its HAProxy 2.6.
ROOTFS_PACKAGES = ("python3", "python3-venv", "postgresql-15", "haproxy")
STANDIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Tools the test installs with apt-get when they are missing: tool -> Debian package.
SYSTEM_TOOLS = {
    "dockerd": "docker.io",
    "docker-compose": "docker-compose",
    "mmdebstrap": "mmdebstrap",
}
# dockerd configurations, tried in order until one starts and runs a container. The defaults
# (overlay2, a bridge with iptables) work on this CI machine; sandboxes that refuse overlay
# mounts or netfilter still run vfs without iptables: compose's bridge network then still
# joins the containers (with its DNS) and the userland proxy still publishes the port.
DOCKERD_VARIANTS: tuple[tuple[str, ...], ...] = (
    (),
    ("--storage-driver=vfs",),
    ("--storage-driver=vfs", "--iptables=false", "--ip-masq=false"),
)

POSTGRES_ENTRYPOINT = r"""#!/bin/sh
# Stand-in for the official postgres image's entrypoint: the same variables, the same data dir.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
    POSTGRES_PASSWORD=$(cat "$POSTGRES_PASSWORD_FILE")
fi
if [ "${1:-postgres}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?the postgres image needs POSTGRES_PASSWORD}"
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        # Like the real image: a socket-only server while initialising.
        pg_ctl --pgdata="$PGDATA" --options="-c listen_addresses=''" --wait start >/dev/null
        createdb --username="$POSTGRES_USER" "$POSTGRES_DB"
        pg_ctl --pgdata="$PGDATA" --mode=fast --wait stop >/dev/null
    fi
    echo "postgres stand-in: initialised $PGDATA for $POSTGRES_USER/$POSTGRES_DB"
fi
if [ "${1:-postgres}" = postgres ]; then
    exec postgres -D "$PGDATA"
fi
exec "$@"
"""


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
    check: bool = True,
    log: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command; its output goes to `log` (appended) and, on failure, into the error."""
    try:
        done = subprocess.run(
            [str(arg) for arg in argv],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{' '.join(map(str, argv))} ran past {timeout}s") from exc
    if log is not None:
        with log.open("a") as handle:
            handle.write(f"$ {' '.join(map(str, argv))}\n{done.stdout}{done.stderr}\n")
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, argv))} exited with {done.returncode}:\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")


def ensure_system_tools() -> None:
    """docker.io, docker-compose (v1) and mmdebstrap from Debian, installed when missing."""
    missing = sorted({package for tool, package in SYSTEM_TOOLS.items() if not _which(tool)})
    if not missing:
        return
    if os.geteuid() != 0:
        missing_dependency(f"{', '.join(missing)} missing and not root to apt-get install them")
    if not shutil.which("apt-get"):
        missing_dependency(f"{', '.join(missing)} missing and no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
    done = run(install, env=env, check=False, timeout=600)
    if done.returncode != 0:  # stale package lists: update once, then try again
        run(["apt-get", "update", "-qq"], env=env, check=False, timeout=300)
        done = run(install, env=env, check=False, timeout=600)
    if done.returncode != 0:
        missing_dependency(f"apt-get install {' '.join(missing)} failed: {done.stderr[-500:]}")


@dataclass
class Engine:
    """A Docker engine: one this test started (and removes), or one that was running."""

    env: dict[str, str]
    client: str
    owned: bool
    description: str
    log: Path

    def docker(self, *args: str | Path, timeout: float = 600, check: bool = True) -> str:
        return run(
            [self.client, *args], env=self.env, timeout=timeout, check=check, log=self.log
        ).stdout

    def has_image(self, name: str) -> bool:
        found = run([self.client, "image", "inspect", name], env=self.env, check=False)
        return found.returncode == 0

    def image_ids(self) -> set[str]:
        return set(self.docker("images", "--all", "--quiet", "--no-trunc").split())


def _client_env() -> dict[str, str]:
    # Nothing of this process's Strata settings leaks into the compose project: it makes its
    # own secrets, and ComposeProject.variables is all it is given.
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("STRATA_", "POSTGRES_", "COMPOSE_"))
    }


def _answers(client: str, env: dict[str, str]) -> bool:
    return run([client, "info"], env=env, check=False, timeout=30).returncode == 0


def _smoke_image(engine: Engine, workdir: Path) -> str | None:
    """A one-file image (the static tini that docker.io ships) that proves containers run."""
    tini = Path("/usr/bin/tini-static")
    if not tini.exists():
        return None
    archive = workdir / "smoke.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tini, arcname="tini")
    tag = f"strata-e2e-smoke:{secrets.token_hex(4)}"
    engine.docker("import", archive, tag, timeout=60)
    return tag


@contextlib.contextmanager
def docker_engine(workdir: Path) -> Iterator[Engine]:
    """The running engine if there is one; otherwise a dockerd of our own, stopped afterwards."""
    client = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else _which("docker")
    if client is None:
        missing_dependency("no docker client (apt-get install docker.io)")
    log = workdir / "docker-commands.log"
    env = _client_env()
    if _answers(client, env):
        yield Engine(env, client, owned=False, description="the running engine", log=log)
        return
    dockerd = _which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        missing_dependency("no Docker engine running, and none can be started (root + dockerd)")
    # On disk (/tmp may be RAM), with a short path: containerd's socket lives under the exec
    # root, and a unix socket's path has at most 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="strata-docker-", dir="/var/tmp"))
    env = {**env, "DOCKER_HOST": f"unix://{root}/docker.sock"}
    failures: list[str] = []
    process: subprocess.Popen[bytes] | None = None
    try:
        for variant in DOCKERD_VARIANTS:
            daemon_log = root / f"dockerd-{len(failures)}.log"
            with daemon_log.open("wb") as output:
                process = subprocess.Popen(
                    [
                        dockerd,
                        f"--data-root={root}/data",
                        f"--exec-root={root}/exec",
                        f"--pidfile={root}/docker.pid",
                        f"--host=unix://{root}/docker.sock",
                        "--containerd-namespace=strata-e2e",
                        "--containerd-plugins-namespace=strata-e2e-plugins",
                        *variant,
                    ],
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            engine = Engine(
                env,
                client,
                owned=True,
                description=f"dockerd {' '.join(variant) or '(defaults)'}",
                log=log,
            )
            problem = _start_problem(engine, process, workdir)
            if problem is None:
                break
            failures.append(f"{engine.description}: {problem}\n{daemon_log.read_text()[-1500:]}")
            _stop_daemon(process)
            process = None
            shutil.rmtree(root / "data", ignore_errors=True)
        else:
            missing_dependency("dockerd does not run containers here:\n" + "\n".join(failures))
        yield engine
    finally:
        if process is not None:
            _stop_daemon(process)
        _remove_tree(root)


def _start_problem(engine: Engine, process: subprocess.Popen[bytes], workdir: Path) -> str | None:
    deadline = time.monotonic() + 60
    while not _answers(engine.client, engine.env):
        if process.poll() is not None:
            return f"exited with {process.returncode}"
        if time.monotonic() > deadline:
            return "not answering after 60s"
        time.sleep(0.5)
    try:
        smoke = _smoke_image(engine, workdir)
        if smoke is not None:  # a container on a bridge network, started and removed
            engine.docker("run", "--rm", smoke, "/tini", "--version", timeout=60)
            engine.docker("rmi", smoke, timeout=60)
    except AssertionError as exc:
        return str(exc)
    return None


def _stop_daemon(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _remove_tree(root: Path) -> None:
    # Mounts a killed daemon left behind would make rmtree fail half-way: unmount them first.
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


def default_image(text: str, pattern: str) -> str:
    found = re.search(pattern, text)
    assert found, f"no default image matching {pattern!r}"
    return found[1]


def stand_in_rootfs(log: Path) -> Path:
    """A Debian bookworm rootfs tarball for the stand-ins, cached by its recipe.

    python3.11 with venv support, PostgreSQL 15 with the official image's entrypoint
    interface (POSTGRES_USER, POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE, POSTGRES_DB,
    PGDATA=/var/lib/postgresql/data), and Debian's HAProxy 2.6 (its `haproxy` user).
    """
    recipe = hashlib.sha256(POSTGRES_ENTRYPOINT.encode())
    entrypoint = CACHE_DIR / f"entrypoint-{recipe.hexdigest()[:16]}" / "docker-entrypoint.sh"
    entrypoint.parent.mkdir(parents=True, exist_ok=True)
    entrypoint.write_text(POSTGRES_ENTRYPOINT)
    prepare = (
        "chmod 755 /usr/local/bin/docker-entrypoint.sh"
        " && mkdir -p /var/lib/postgresql/data /var/run/postgresql"
        " && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql"
        " && chmod 700 /var/lib/postgresql/data"
    )
    argv = [
        "mmdebstrap",
        "--variant=apt",
        "--format=tar",
        f"--include={','.join(ROOTFS_PACKAGES)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        f"--customize-hook=copy-in {entrypoint} /usr/local/bin",
        f'--customize-hook=chroot "$1" sh -c "{prepare}"',
        "--skip=cleanup/run",  # keep /run/postgresql, where the server puts its socket
        "bookworm",
    ]
    recipe.update(" ".join([*argv, DEBIAN_MIRROR]).encode())
    target = CACHE_DIR / f"bookworm-{recipe.hexdigest()[:16]}.tar"
    if target.exists():
        return target
    partial = target.with_name(f"{target.stem}.partial-{os.getpid()}.tar")
    try:
        run([*argv, partial, DEBIAN_MIRROR], timeout=900, log=log)
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)
    for stale in CACHE_DIR.glob("bookworm-*.tar"):  # earlier recipes: 450 MB each
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


@dataclass
class BaseImages:
    """The base images the build and the compose file name, made here when the engine lacks them."""

    python: str
    postgres: str
    haproxy: str
    created: list[str] = field(default_factory=list)

    @classmethod
    def named(cls) -> BaseImages:
        """The defaults a user gets: the Dockerfile's PYTHON_IMAGE, the compose file's db and
        its load balancer (`server`)."""
        compose = (REPO / "docker-compose.yml").read_text()
        return cls(
            python=default_image((REPO / "Dockerfile").read_text(), r"ARG PYTHON_IMAGE=(\S+)"),
            postgres=default_image(compose, r"\$\{STRATA_POSTGRES_IMAGE:-([^}]+)\}"),
            haproxy=default_image(compose, r"\$\{STRATA_HAPROXY_IMAGE:-([^}]+)\}"),
        )

    def all(self) -> tuple[str, str, str]:
        return (self.python, self.postgres, self.haproxy)


def ensure_base_images(engine: Engine, rootfs: Path | None) -> BaseImages:
    """The stand-ins are `docker import`s of the one rootfs (its layer is stored once)."""
    images = BaseImages.named()
    stand_ins = {
        images.python: [f"ENV PATH={STANDIN_PATH}", "ENV LANG=C.UTF-8", 'CMD ["python3"]'],
        images.postgres: [
            f"ENV PATH=/usr/lib/postgresql/15/bin:{STANDIN_PATH}",
            "ENV LANG=C.UTF-8",
            "ENV PGDATA=/var/lib/postgresql/data",
            "USER postgres",
            "EXPOSE 5432",
            'ENTRYPOINT ["docker-entrypoint.sh"]',
            'CMD ["postgres"]',
        ],
        # The official haproxy image's interface: its config file, its user, and `haproxy -W
        # -db` (master-worker, in the foreground) with that file when no command is given.
        images.haproxy: [
            f"ENV PATH={STANDIN_PATH}",
            "ENV LANG=C.UTF-8",
            "USER haproxy",
            'ENTRYPOINT ["haproxy", "-W", "-db"]',
            'CMD ["-f", "/usr/local/etc/haproxy/haproxy.cfg"]',
        ],
    }
    for name, changes in stand_ins.items():
        if engine.has_image(name):
            continue  # the real one, or whatever the user has under that name: left alone
        assert rootfs is not None
        options = [option for change in changes for option in ("--change", change)]
        engine.docker("import", *options, rootfs, name, timeout=300)
        images.created.append(name)
    return images


def copy_checkout(dest: Path) -> Path:
    """The checkout as a user would clone it (what .gitignore leaves out stays out)."""
    shutil.copytree(
        REPO,
        dest,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "node_modules",
            "__pycache__",
            ".mypy_cache",
            ".ruff_cache",
            ".pytest_cache",
            "*.egg-info",
            "test-artifacts",
            ".env",
            "build",
        ),
        symlinks=True,
    )
    return dest


def download_wheelhouse(checkout: Path, folder: str, log: Path) -> None:
    """Every wheel the image installs, for this platform (pip's cache makes a rerun fast)."""
    build_requires = tomllib.loads((checkout / "pyproject.toml").read_text())["build-system"][
        "requires"
    ]
    pip_version = default_image((checkout / "Dockerfile").read_text(), r"ARG PIP_VERSION=(\S+)")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--dest",
            checkout / folder,
            "--constraint",
            "requirements.lock",
            ".",
            *build_requires,
            f"pip=={pip_version}",
        ],
        cwd=checkout,
        timeout=900,
        log=log,
    )


@dataclass
class ComposeProject:
    engine: Engine
    directory: Path
    name: str
    log: Path
    # What a user may set in .env or the shell (docker-compose.yml's ${...}); no secrets here.
    variables: dict[str, str]

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> str:
        return run(
            ["docker-compose", "-p", self.name, *args],
            env={**self.engine.env, **self.variables},
            cwd=self.directory,
            timeout=timeout,
            check=check,
            log=self.log,
        ).stdout

    def container(self, service: str) -> str:
        ids = self.compose("ps", "-q", service, timeout=60).split()
        assert len(ids) == 1, f"{service}: containers {ids}"
        return ids[0]

    def exec(self, service: str, *argv: str) -> str:
        return self.compose("exec", "-T", service, *argv, timeout=120)

    def logs(self, service: str) -> str:
        """The container's output (`docker logs` hands its stderr back on stderr)."""
        done = run(
            [self.engine.client, "logs", self.container(service)], env=self.engine.env, timeout=60
        )
        return done.stdout + done.stderr

    def diagnostics(self) -> str:
        """What a failure report needs: the containers' states and their last lines."""
        states = self.compose("ps", timeout=60, check=False)
        return states + self.compose("logs", "--no-color", "--tail=80", timeout=120, check=False)


@dataclass
class ComposeCluster:
    """The compose cluster, up, reached through the load balancer's published port."""

    project: ComposeProject
    checkout: Path
    url: str
    secrets: dict[str, str]  # the files the secrets service made, by name
    image: str
    http: httpx.Client
    timings: dict[str, float]

    @property
    def api_token(self) -> str:
        return self.secrets["api-token"]

    def job(self, job_id: int) -> dict[str, Any]:
        job: dict[str, Any] = self.http.get(f"/jobs/{job_id}").json()
        return job

    def events(self, job_id: int) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.http.get(f"/jobs/{job_id}/events").json()
        return events

    def logs(self, job_id: int, task: str, attempt: int | None = None) -> list[str]:
        params: dict[str, int] = {"limit": 10000}
        if attempt is not None:
            params["attempt"] = attempt
        page = self.http.get(f"/jobs/{job_id}/tasks/{task}/logs", params=params).json()
        lines: list[str] = page["lines"]
        return lines

    def hosts(self) -> dict[str, dict[str, Any]]:
        return {host["name"]: host for host in self.http.get("/hosts").json()}

    def wait_for(
        self, job_id: int, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if predicate(job):
                return job
            if job["status"] in ("failed", "cancelled") or time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} not {what} within {timeout}s: {job['status']} "
                    f"({job['reason']}), tasks "
                    f"{[(t['name'], t['status'], t['host'], t['attempt']) for t in job['tasks']]}"
                    f"\nevents: {[e['message'] for e in self.events(job_id)]}"
                )
            time.sleep(1)

    def wait_hosts(self, names: Iterable[str], status: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        wanted = set(names)
        while True:
            hosts = self.hosts()
            if all(name in hosts and hosts[name]["status"] == status for name in wanted):
                return
            if time.monotonic() > deadline:
                seen = {name: host["status"] for name, host in hosts.items()}
                raise AssertionError(f"hosts {sorted(wanted)} not {status} in {timeout}s: {seen}")
            time.sleep(0.5)


@contextlib.contextmanager
def timed(timings: dict[str, float], step: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        timings[step] = round(time.monotonic() - started, 1)


def _wait_healthy(url: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(f"{url}/healthz", timeout=5)
            if answer.status_code == 200:
                health: dict[str, Any] = answer.json()
                return health
            last = answer.status_code
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(f"{url}/healthz did not answer 200 within {timeout}s (last: {last!r})")


@contextlib.contextmanager
def compose_cluster(workdir: Path, agents: Sequence[str]) -> Iterator[ComposeCluster]:
    """Offline images, `docker-compose up -d`, and everything removed again afterwards.

    Images: the base images the Dockerfile and docker-compose.yml name (made from a bookworm
    rootfs when the engine lacks them), then the Strata image through the wheelhouse and the
    dashboard built on the host. Only this project's containers, volumes and network, and the
    images made here, are touched.
    """
    timings: dict[str, float] = {}
    started = time.monotonic()
    log = workdir / "commands.log"
    if not (REPO / "frontend" / "dist" / "index.html").exists():
        missing_dependency("the dashboard is not built (make ui): the image takes it prebuilt")
    with timed(timings, "install tools"):
        ensure_system_tools()
    checkout = copy_checkout(workdir / "checkout")
    description = "no engine"
    with contextlib.ExitStack() as stack:

        def report() -> None:  # the last thing to run, after down and the images' removal
            timings["total"] = round(time.monotonic() - started, 1)
            print(f"compose e2e on {description}, timings (s): {timings}")

        stack.callback(report)
        with timed(timings, "engine"):
            engine = stack.enter_context(docker_engine(workdir))
        description = engine.description
        name = f"strata-e2e-{secrets.token_hex(4)}"
        image = f"{name}:local"
        created_images: list[str] = []

        def remove_images() -> None:
            for ref in reversed(created_images):
                engine.docker("rmi", "--force", ref, check=False, timeout=120)

        stack.callback(remove_images)
        with ThreadPoolExecutor(max_workers=2) as pool:
            wheels = pool.submit(
                lambda: _timed_call(
                    timings, "pip download", download_wheelhouse, checkout, "wheelhouse", log
                )
            )
            named = BaseImages.named()
            need_rootfs = not all(map(engine.has_image, named.all()))
            rootfs = (
                _timed_call(timings, "rootfs (mmdebstrap)", stand_in_rootfs, log)
                if need_rootfs
                else None
            )
            with timed(timings, "base images"):
                bases = ensure_base_images(engine, rootfs)
            created_images.extend(bases.created)
            wheels.result()
        port = free_port()
        project = ComposeProject(
            engine,
            checkout,
            name,
            workdir / "compose.log",
            {"STRATA_PUBLISH_PORT": str(port), "STRATA_IMAGE": image},
        )
        before = engine.image_ids()
        try:
            with timed(timings, "build"):
                project.compose(
                    "build",
                    "--force-rm",
                    "--build-arg",
                    "WHEELHOUSE=wheelhouse",
                    "--build-arg",
                    "UI_PREBUILT=1",
                    "--build-arg",
                    f"NODE_IMAGE={bases.python}",
                    "server-1",  # the image server-2 and the agents run too
                    timeout=1200,
                )
        finally:  # the stages' images too, not only the tagged one
            created_images.extend(sorted(engine.image_ids() - before))
            created_images.append(image)
            shutil.rmtree(checkout / "wheelhouse")  # 700 MB that pytest would keep around

        def down() -> None:
            with timed(timings, "down -v"):
                project.compose(
                    "down",
                    "--volumes",
                    "--remove-orphans",
                    "--timeout",
                    "10",
                    timeout=300,
                    check=False,
                )

        stack.callback(down)
        url = f"http://127.0.0.1:{port}"
        try:
            with timed(timings, "up -d"):
                project.compose("up", "-d", timeout=600)
                _wait_healthy(url, 120)
                # As the compose file's header tells a user: the login is in the secrets
                # service's output, made on this first `up` (there is no .env).
                api_token = login_token(project.compose("logs", "--no-color", "secrets"), url)
                http = stack.enter_context(
                    httpx.Client(
                        base_url=url, headers={"Authorization": f"Bearer {api_token}"}, timeout=30
                    )
                )
                stored = {
                    file: project.exec("server-1", "cat", f"/var/lib/strata/secrets/{file}").strip()
                    for file in ("api-token", "agent-token", "database-password")
                }
                assert stored["api-token"] == api_token, "the login shown is not the stored token"
                cluster = ComposeCluster(project, checkout, url, stored, image, http, timings)
                cluster.wait_hosts(agents, "online", 180)
        except BaseException:
            print(f"compose diagnostics:\n{project.diagnostics()[-20000:]}")
            raise
        yield cluster


def login_token(secrets_output: str, url: str) -> str:
    """The API token from the lines `strata init-secrets --public-url` prints."""
    found = re.search(r"export STRATA_TOKEN=(\S+)", secrets_output)
    assert found, f"no STRATA_TOKEN in the secrets service's output:\n{secrets_output}"
    assert f"export STRATA_SERVER={url}" in secrets_output, secrets_output
    assert f"Dashboard:   {url}/ui/?token={found[1]}" in secrets_output, secrets_output
    return found[1]


def _timed_call(timings: dict[str, float], step: str, func: Callable[..., T], *args: Any) -> T:
    with timed(timings, step):
        return func(*args)


# What a team's own training image holds: Python, TensorFlow and the data set's library, and
# no Strata (the agent lends its runtime). The same wheels as the agents, from the lock file.
TENSORFLOW_IMAGE_PACKAGES = ("tensorflow", "tf-keras", "scikit-learn")


@contextlib.contextmanager
def tensorflow_image(engine: Engine, workdir: Path) -> Iterator[str]:
    """An image with TensorFlow and without Strata, made offline: the bookworm stand-in rootfs
    and the wheels `pip download` fetched for this platform, installed in a container that is
    then committed (no build context: the 650 MB wheelhouse is mounted, not copied). The image
    is removed afterwards."""
    log = workdir / "commands.log"
    wheels = workdir / "wheels"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--dest",
            wheels,
            "--constraint",
            REPO / "requirements.lock",
            *TENSORFLOW_IMAGE_PACKAGES,
        ],
        timeout=900,
        log=log,
    )
    tag = f"strata-e2e-tf-{secrets.token_hex(4)}"
    base = f"{tag}-base:local"
    engine.docker(
        "import", "--change", f"ENV PATH={STANDIN_PATH}", stand_in_rootfs(log), base, timeout=300
    )
    builder = f"{tag}-builder"
    try:
        engine.docker(
            "run",
            "--name",
            builder,
            "--network",
            "none",
            "--volume",
            f"{wheels}:/wheels:ro",
            base,
            "sh",
            "-c",
            "python3 -m venv /opt/tf && /opt/tf/bin/pip install --quiet --no-index"
            f" --no-compile --find-links /wheels {' '.join(TENSORFLOW_IMAGE_PACKAGES)}"
            " && rm -rf /opt/tf/lib/python3*/site-packages/tensorflow/include",
            timeout=900,
        )
        engine.docker(
            "commit",
            "--change",
            f"ENV PATH=/opt/tf/bin:{STANDIN_PATH}",
            "--change",
            "ENV LANG=C.UTF-8",
            "--change",
            'CMD ["python"]',
            builder,
            f"{tag}:local",
            timeout=300,
        )
    finally:
        engine.docker("rm", "--force", builder, check=False, timeout=120)
        engine.docker("rmi", "--force", base, check=False, timeout=120)
        shutil.rmtree(wheels, ignore_errors=True)
    try:
        yield f"{tag}:local"
    finally:
        engine.docker("rmi", "--force", f"{tag}:local", check=False, timeout=120)
