"""A sweep's Optuna study: the sampler, the pruner and their storage in Strata's database.

Optuna's tables keep their own alembic version table, so they live apart from Strata's: in
the schema `optuna` of the same PostgreSQL database (the search path of Optuna's own
connections), or on SQLite in `optuna.db` beside `strata.db`. Every call here is blocking
(Optuna's storage is synchronous): the sweep runner makes them on a worker thread, and imports
this module (and Optuna) when it first meets a sweep.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.pruners import (
    BasePruner,
    HyperbandPruner,
    MedianPruner,
    NopPruner,
    SuccessiveHalvingPruner,
)
from optuna.samplers import BaseSampler, GridSampler, RandomSampler, TPESampler
from optuna.storages import RDBStorage
from optuna.trial import Trial, TrialState
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from backend.sweeps.spec import Categorical, FloatRange, SweepSpec, grid_values
from backend.sweeps.states import TrialStatus

OPTUNA_SCHEMA = "optuna"  # as the migration that creates it names it
_RUNG = re.compile(r"completed_rung_(\d+)")
_RUNNING = (TrialState.RUNNING,)
# How a trial's end is told to Optuna.
_ENDED = {
    TrialStatus.succeeded: TrialState.COMPLETE,
    TrialStatus.pruned: TrialState.PRUNED,
    TrialStatus.failed: TrialState.FAIL,
    TrialStatus.stopped: TrialState.FAIL,
}

log = logging.getLogger(__name__)
_opening = threading.Lock()  # one storage made at a time in this process

optuna.logging.set_verbosity(optuna.logging.WARNING)


def storage_url(database_url: str) -> tuple[str, dict[str, Any]]:
    """Optuna's storage URL and engine arguments for Strata's (async) database URL."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        database = url.database or ""
        if database in ("", ":memory:"):
            return "sqlite:///:memory:", {}
        return f"sqlite:///{Path(database).with_name('optuna.db')}", {
            "connect_args": {"timeout": 30}
        }
    # asyncpg's `ssl=` is libpq's `sslmode=`; its other arguments mean nothing to psycopg.
    query = {"sslmode": url.query["ssl"]} if "ssl" in url.query else {}
    sync = url.set(drivername="postgresql+psycopg", query=query)
    return sync.render_as_string(hide_password=False), {
        "connect_args": {"options": f"-c search_path={OPTUNA_SCHEMA}"},
        "pool_pre_ping": True,
    }


def open_storage(database_url: str, *, tries: int = 3) -> RDBStorage:
    """Optuna's storage, its tables made on first use. Two servers (or a server and a test)
    opening it at once may both try to make them: the one that loses tries again."""
    url, engine_kwargs = storage_url(database_url)
    for attempt in range(tries):
        try:
            with _opening:
                return RDBStorage(url, engine_kwargs=engine_kwargs)
        except SQLAlchemyError:
            if attempt == tries - 1:
                raise
            log.info("Optuna's storage was being made by another process; trying again")
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def distributions(spec: SweepSpec) -> dict[str, BaseDistribution]:
    made: dict[str, BaseDistribution] = {}
    for name, parameter in spec.parameters.items():
        if isinstance(parameter, Categorical):
            made[name] = CategoricalDistribution(parameter.choices)
        elif isinstance(parameter, FloatRange):
            made[name] = FloatDistribution(
                parameter.low, parameter.high, log=parameter.log, step=parameter.step
            )
        else:
            made[name] = IntDistribution(
                parameter.low, parameter.high, log=parameter.log, step=parameter.step
            )
    return made


def make_sampler(spec: SweepSpec) -> BaseSampler:
    seed = spec.sampler.seed
    if spec.sampler.type == "random":
        return RandomSampler(seed=seed)
    if spec.sampler.type == "grid":
        space = {name: grid_values(p) for name, p in spec.parameters.items()}
        return GridSampler(space, seed=seed)
    return TPESampler(seed=seed)


def make_pruner(spec: SweepSpec) -> BasePruner:
    stopping = spec.early_stopping
    if stopping.type == "asha":
        return SuccessiveHalvingPruner(
            min_resource=stopping.min_resource, reduction_factor=stopping.reduction_factor
        )
    if stopping.type == "hyperband":
        return HyperbandPruner(
            min_resource=stopping.min_resource,
            max_resource=stopping.max_resource or stopping.min_resource,
            reduction_factor=stopping.reduction_factor,
        )
    if stopping.type == "median":
        return MedianPruner(
            n_startup_trials=stopping.startup_trials, n_warmup_steps=stopping.min_resource - 1
        )
    return NopPruner()


@dataclass(frozen=True)
class Asked:
    number: int
    params: dict[str, Any]


class SweepStudy:
    """One sweep's study, created on first use and loaded again after a restart (the sampler
    and the pruner read every trial from the storage)."""

    def __init__(self, *, storage: RDBStorage, name: str, spec: SweepSpec) -> None:
        self.spec = spec
        self.storage = storage
        self.study = optuna.create_study(
            storage=storage,
            study_name=name,
            sampler=make_sampler(spec),
            pruner=make_pruner(spec),
            direction=spec.objective.direction,
            load_if_exists=True,
        )
        self._distributions = distributions(spec)
        self._study_id = storage.get_study_id_from_name(name)

    def ask(self) -> Asked:
        trial = self.study.ask(self._distributions)
        return Asked(number=trial.number, params=dict(trial.params))

    def counted(self) -> int:
        """Trials asked for so far, in any state: what the budget counts."""
        return len(self.study.get_trials(deepcopy=False))

    def running(self) -> set[int]:
        """The trials Optuna holds as running (asked for, not told how they ended)."""
        return {t.number for t in self.study.get_trials(deepcopy=False, states=_RUNNING)}

    def params(self, number: int) -> dict[str, Any]:
        return dict(self._frozen(number).params)

    def report(self, number: int, resource: int, value: float, *, judge: bool = True) -> bool:
        """Report an intermediate value; whether the pruner stops the trial there (never
        when not asked to `judge`: a trial whose job already ended is not pruned)."""
        trial = Trial(self.study, self._trial_id(number))
        trial.report(value, resource)
        return judge and trial.should_prune()

    def tell(self, number: int, status: TrialStatus, value: float | None = None) -> None:
        """Record how the trial ended (once: a trial already ended is left as it is)."""
        if self._frozen(number).state.is_finished():
            return
        state = _ENDED[status]
        if state is TrialState.COMPLETE and value is None:
            state = TrialState.FAIL
        self.study.tell(number, value if state is TrialState.COMPLETE else None, state=state)

    def prune_rule(self, number: int) -> str:
        """The rule that stopped the trial, for its reason: "ASHA rung 1", "median"..."""
        stopping = self.spec.early_stopping
        if stopping.type == "median":
            return "worse than the median of completed trials"
        rungs = [
            int(m.group(1)) for key in self._frozen(number).system_attrs if (m := _RUNG.search(key))
        ]
        rung = max(rungs, default=0)
        return f"{'ASHA' if stopping.type == 'asha' else 'Hyperband'} rung {rung}"

    def _trial_id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)

    def _frozen(self, number: int) -> optuna.trial.FrozenTrial:
        return self.storage.get_trial(self._trial_id(number))
