"""Which Keras a model belongs to: tf_keras (`import tf_keras`) or Keras 3 (`import keras`).

Both can live in one process: TensorFlow's `tf.keras` is tf_keras here (TF_USE_LEGACY_KERAS=1,
see `agents.environment.prefer_tf_keras`), while a script's `import keras` is Keras 3. Their
callbacks and checkpoint helpers do not mix, so the runtime asks the model, by the module its
class comes from, without importing either package.
"""

from __future__ import annotations

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
