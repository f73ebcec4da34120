"""Which Keras a model belongs to: tf_keras (`import tf_keras`) or Keras 3 (`import keras`).

Both can live in one process: TensorFlow's `tf.keras` is tf_keras here (TF_USE_LEGACY_KERAS=1,
see `agents.environment.prefer_tf_keras`), while a script's `import keras` is Keras 3. Their
callbacks and checkpoint helpers do not mix, so the runtime asks the model, by the module its
class comes from, without importing either package.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Any


class KerasFlavor(StrEnum):
    tf_keras = "tf_keras"
    keras3 = "keras3"


def keras_flavor(model: Any) -> KerasFlavor:
    """The Keras that built `model` (a subclass of either package's Model counts as it)."""
    for cls in type(model).__mro__:
        module = cls.__module__ or ""
        if module == "keras" or module.startswith("keras."):
            return KerasFlavor.keras3
        if module == "tf_keras" or module.startswith("tf_keras."):
            return KerasFlavor.tf_keras
    return KerasFlavor.tf_keras  # tf.keras under TF_USE_LEGACY_KERAS, or something Keras-like


# What Keras 3 cannot do, by the strategy's class name: the strategy and why (ARCHITECTURE §4).
_KERAS3_CANNOT = {
    "MultiWorkerMirroredStrategy": "multi_worker_mirrored",
    "CollectiveAllReduceStrategy": "multi_worker_mirrored",
    "ParameterServerStrategy": "parameter_server",
}
_WHY = {
    "multi_worker_mirrored": "its fit fails on values split across workers "
    "(keras-team/keras#20585), and importing it configures TensorFlow before the strategy can",
    "parameter_server": "it has no parameter-server training (no ClusterCoordinator in its fit)",
}


def keras3_cannot(strategy: str) -> str:
    """The refusal for a Keras 3 script under `strategy` (multi_worker_mirrored or
    parameter_server): what is wrong and what to do instead."""
    return (
        f"this script uses Keras 3 (`import keras`), which cannot train under the {strategy} "
        f"strategy: {_WHY.get(strategy, 'it is not supported there')}. Use tf_keras for this "
        f"strategy (`import tf_keras as keras`; the tf_keras package matches TensorFlow's "
        f"version), or run the job under the mirrored strategy, where Keras 3 works"
    )


def keras3_imported() -> bool:
    """Whether this process has imported Keras 3 (tf.keras under Strata is tf_keras, which
    never imports the `keras` package)."""
    module = sys.modules.get("keras")
    return str(getattr(module, "__version__", "")).startswith("3.")


def keras3_script_refusal(strategy: str) -> str | None:
    """Why this script cannot train under `strategy`, judged when it asks for the Keras
    callbacks (before `fit` starts): under multi_worker_mirrored and parameter_server a script
    that imported Keras 3 is taken for a Keras 3 script (a tf_keras script never imports it).
    Under parameter_server Keras 3's fit fails on its input before any callback sees the
    model, so `KerasGuard` would come too late there."""
    if strategy in _WHY and keras3_imported():
        return keras3_cannot(strategy)
    return None


def keras3_refusal(model: Any) -> str | None:
    """Why `model` cannot train under its strategy, or None when it can."""
    if keras_flavor(model) is not KerasFlavor.keras3:
        return None
    strategy = getattr(model, "distribute_strategy", None)
    for cls in type(strategy).__mro__:
        name = _KERAS3_CANNOT.get(cls.__name__)
        if name is not None:
            return keras3_cannot(name)
    return None


def keras_guard() -> Any:
    """A callback that stops the task for good (`agents.runtime.refusal`) as soon as `fit`
    hands it a Keras 3 model under a strategy Keras 3 cannot train with: at once, instead of
    a crash deep inside Keras that a restart would only repeat."""
    import tf_keras

    from agents.runtime.refusal import refuse

    class KerasGuard(tf_keras.callbacks.Callback):  # type: ignore[misc]
        def set_model(self, model: Any) -> None:
            super().set_model(model)
            reason = keras3_refusal(model)
            if reason is not None:
                refuse(reason)

    return KerasGuard()
