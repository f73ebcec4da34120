"""Exporting the trained model when `fit` ends: the spec's `export` (STRATA_EXPORT, JSON, see
`agents.options.ExportOptions`).

What is written, in the job's checkpoint dir (``<dir>`` is `export.dir`, "export" by default):

* a tf_keras model, format auto or saved_model: a SavedModel in ``<dir>/`` (without the
  optimizer), which `tf.saved_model.load` and `tf_keras.models.load_model` read;
* a Keras 3 model, format auto or keras (or any model with format keras): ``<dir>.keras``
  (``<dir>`` itself when it ends with .keras), which its Keras' `load_model` reads;
* a Keras 3 model, format saved_model: an inference SavedModel (`model.export`).

The export is written to a temporary name beside its place and renamed there, so a reader
never sees half of one; an earlier export of the same name is replaced. It is reported like a
checkpoint (trigger "export", its format, the Keras that wrote it) and retention never deletes
it.

Who writes: under parameter_server the coordinator (it runs `fit`; the files come from its
CPU); under mirrored the task; under multi_worker_mirrored every worker must take part (a
save may need collectives), so the chief writes the real one and the others write to a
temporary dir that they delete, as checkpoints do. An export that fails stops the task for
good (`agents.runtime.refusal`): training is over, and the job must not look successful
without the model it was asked for.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from agents.options import KERAS_SUFFIX, ExportOptions
from agents.runtime import values as tfvalues
from agents.runtime.cluster import local_cpu, task_environment
from agents.runtime.flavor import KerasFlavor, keras_flavor
from agents.runtime.progress import training_progress
from agents.runtime.values import sanitize_name

if TYPE_CHECKING:
    from agents.protocol import CheckpointSaved
    from agents.runtime.sink import MetricSink

log = logging.getLogger("strata.runtime")

Format = Literal["saved_model", "keras"]
MAX_METRICS = 200


def export_options(raw: str | None = None) -> ExportOptions | None:
    """The job's export (STRATA_EXPORT, or `raw`); None when the job asked for none.

    The server validated it; a value this runtime cannot read is reported and ignored (the
    job then trains without exporting, and says so in its log).
    """
    if raw is None:
        raw = task_environment().export
    if raw is None:
        return None
    try:
        return ExportOptions.model_validate_json(raw)
    except ValueError as exc:
        log.warning("strata: ignoring STRATA_EXPORT=%r, no export: %s", raw, exc)
        return None


def export_format(options: ExportOptions, flavor: KerasFlavor) -> Format:
    """What `auto` means for this model: a SavedModel for tf_keras, .keras for Keras 3."""
    if options.format == "auto":
        return "keras" if flavor is KerasFlavor.keras3 else "saved_model"
    return options.format


def export_name(options: ExportOptions, fmt: Format) -> str:
    """The export's name in the checkpoint dir (what the API lists)."""
    if fmt == "keras" and not options.dir.endswith(KERAS_SUFFIX):
        return options.dir + KERAS_SUFFIX
    return options.dir


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for folder, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    return total


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def write_model(
    model: Any, path: str, fmt: Format, flavor: KerasFlavor, kind: str, strategy: Any = None
) -> None:
    """Writes `model` to `path` in `fmt` (no rename, no report); `strategy` is the model's,
    under parameter_server."""
    import tensorflow as tf

    if fmt == "keras":
        model.save(path)  # either Keras: the .keras format, chosen by the suffix
        return
    if flavor is KerasFlavor.keras3:
        model.export(path, format="tf_saved_model")
        return
    options = None
    if kind == "parameter_server":
        # Every file from the coordinator: the ps hosts need not see the dir.
        options = tf.saved_model.SaveOptions(experimental_io_device=local_cpu(strategy))
    model.save(path, save_format="tf", include_optimizer=False, options=options)


class Exporter:
    """The callback's logic: remembers the latest epoch and writes the export at the end."""

    def __init__(self, directory: str, options: ExportOptions, sink: MetricSink | None = None):
        self.directory = directory
        self.options = options
        self._sink = sink
        self._epochs_done: int | None = None
        self._metrics: dict[str, float] = {}

    @property
    def sink(self) -> MetricSink:
        if self._sink is None:
            from agents.runtime.process_sink import get_sender

            self._sink = get_sender()
        return self._sink

    def epoch_end(self, epoch: int, logs: Mapping[str, Any] | None) -> None:
        self._epochs_done = epoch + 1
        numbers = tfvalues.scalars(dict(logs or {}))
        self._metrics = {
            sanitize_name(name): value for name, value in list(numbers.items())[:MAX_METRICS]
        }

    def export(self, model: Any) -> CheckpointSaved | None:
        """Writes the export (the chief reports it and gets the report back); None elsewhere."""
        import tensorflow as tf

        from agents.protocol import CheckpointSaved

        strategy = getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
        kind, chief = "single", True
        if isinstance(strategy, tf.distribute.ParameterServerStrategy):
            kind = "parameter_server"
        elif isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            kind = "multi_worker_mirrored"
            chief = bool(strategy.extended.should_checkpoint)
        flavor = keras_flavor(model)
        fmt = export_format(self.options, flavor)
        name = export_name(self.options, fmt)
        os.makedirs(self.directory, exist_ok=True)
        if not chief:
            # Take part in the save, then throw it away.
            task = task_environment().task
            label = f"{task.role}_{task.index}" if task is not None else str(os.getpid())
            temp_dir = os.path.join(self.directory, f"workertemp_{label}_export")
            try:
                write_model(model, os.path.join(temp_dir, name), fmt, flavor, kind, strategy)
            finally:
                shutil.rmtree(temp_dir, ignore_errors=True)
            return None

        final = os.path.join(self.directory, name)
        temp = os.path.join(self.directory, f".{name}.writing-{os.getpid()}")
        if fmt == "keras":
            temp += KERAS_SUFFIX  # Keras picks the format by the suffix
        _remove(temp)
        try:
            write_model(model, temp, fmt, flavor, kind, strategy)
            _remove(final)
            os.replace(temp, final)
        finally:
            _remove(temp)
        step = tfvalues.to_float(getattr(getattr(model, "optimizer", None), "iterations", None))
        saved = CheckpointSaved(
            name=name,
            step=max(0, int(step)) if step is not None else 0,
            epoch=self._epochs_done,
            size_bytes=_size(final),
            wall_time=time.time(),
            trigger="export",
            format=fmt,
            keras=flavor.value,
            metrics=dict(self._metrics),
        )
        print(f"strata: exported the model to {final} ({fmt})", flush=True)
        self.sink.report_checkpoint(saved)
        return saved


def export_callback(sink: MetricSink | None = None) -> Any | None:
    """`StrataExport` for the job's export, or None when there is none (or no checkpoint dir:
    a script run by hand)."""
    chosen = export_options()
    where = task_environment().checkpoint_dir
    if chosen is None or where is None:
        return None
    import tf_keras

    options: ExportOptions = chosen
    directory: str = where

    from agents.runtime.refusal import refuse

    class StrataExport(tf_keras.callbacks.Callback):  # type: ignore[misc]
        """Exports the trained model when `fit` ends (see `agents.runtime.export`)."""

        def __init__(self) -> None:
            super().__init__()
            self._supports_tf_logs = True  # no batch hooks; epoch logs are converted here
            self.exporter = Exporter(directory, options, sink)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            try:
                self.exporter.epoch_end(epoch, logs)
            except Exception as exc:  # the metrics of a report must never stop training
                log.warning("strata: export: on_epoch_end failed: %r", exc)

        def on_train_end(self, logs: Any = None) -> None:
            try:
                with training_progress().busy("exporting"):
                    self.exporter.export(self.model)
            except Exception as exc:
                refuse(
                    f"training finished, but the model could not be exported to "
                    f"{os.path.join(directory, options.dir)} ({options.format}): {exc!r}"
                )

    return StrataExport()
