"""The library's Keras classes, registered as soon as Keras and TensorFlow are both loaded.

`keras.saving.load_model` finds a class saved in a `.keras` file only once the class's module has
registered it (Keras imports modules by itself only from its own packages), so a user's
`import albert_tf` alone would not let Keras read the library's files. Importing the model modules
up front would load TensorFlow into every process that imports `albert_tf` (data-prep workers
among them), so `register_when_keras_loads` waits: it imports `albert_tf.modeling` right after the
later of `keras` and `tensorflow` finishes loading (each imports the other on its way, so neither
alone is a moment when both are whole), or at once when both already are. The export stage's
classes get stand-ins that import their module when a file needs them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

_WATCHED = ("keras", "tensorflow")
# The export stage's Keras classes, by registered name: registered as stand-ins that import
# their module when a file needs them (importing the export stage here, while a module below it
# may still be loading, would import that module half-made).
_EXPORT_CLASSES = {"albert_tf>AlbertTextQuestionAnswerer": "albert_tf.export.qa.keras_model"}


def _loaded(name: str) -> bool:
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    return module is not None and not getattr(spec, "_initializing", False)


def _register(executed: str | None = None) -> None:
    """Imports the model modules if both watched modules are loaded (`executed`: the one whose
    code just ran, which the import system still marks as loading)."""
    if not all(name == executed or _loaded(name) for name in _WATCHED):
        return
    try:
        importlib.import_module("albert_tf.modeling")
        import keras

        registered = keras.saving.get_custom_objects()
        for name, module in _EXPORT_CLASSES.items():
            registered.setdefault(name, _stand_in(name, module))
    except Exception as error:  # never make `import keras` fail for the sake of this
        warnings.warn(
            f"albert_tf could not register its Keras classes ({type(error).__name__}: {error}); "
            "import albert_tf.modeling before loading its .keras files",
            stacklevel=2,
        )


def _stand_in(name: str, module: str) -> type:
    """A class Keras deserializes `name` ("package>Class") with: it imports `module`, whose own
    class then replaces it in the registry, and builds that class from the config."""

    class StandIn:
        @classmethod
        def from_config(cls, config):
            real = getattr(importlib.import_module(module), name.split(">")[-1])
            return real.from_config(config)

    return StandIn


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds `keras` and `tensorflow` as the other finders do, and makes their loaders call
    `_register` once the module is executed."""

    def find_spec(self, name, path=None, target=None):
        if name not in _WATCHED or name in self.busy:
            return None
        self.busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _register(executed=name)

        spec.loader.exec_module = exec_module
        return spec

    busy: set[str] = set()


def register_when_keras_loads() -> None:
    """Registers the library's Keras classes now if Keras and TensorFlow are loaded, else right
    after they load."""
    if all(_loaded(name) for name in _WATCHED):
        _register()
    elif not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
