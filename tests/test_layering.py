"""The library's layering, read from the source with `ast` (nothing is imported).

Checked over every module of albert_tf/, data_prep/ and pipelines/, with the imports inside
functions counted too: (a) no import cycle, (b) no module imports one of a higher layer, (c) the
modules that data-prep workers and light CLIs load import neither TensorFlow nor Keras when they
are imported, directly or through the repo modules (and packages) they load. Each check is also
run on a small made-up graph, so that a check that can no longer fail is noticed.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("albert_tf", "data_prep", "pipelines")
# Lowest first; the modules of one layer may import each other. The fine-tuning loop sits under
# the tasks (GLUE now), which implement its `Task` protocol: the loop never names a benchmark.
LAYERS = (
    (
        "albert_tf.config",
        "albert_tf.io",
        "albert_tf.log_filters",
        "albert_tf.output_dirs",
        "albert_tf.tolerance",
        "albert_tf.records",
        "albert_tf.settings",
        "albert_tf.stopping",
        "albert_tf.registration",
    ),
    ("albert_tf.text",),
    ("albert_tf.modeling",),
    ("albert_tf.checkpoints",),
    ("albert_tf.training",),
    ("albert_tf.finetuning",),
    ("albert_tf.tasks",),
    ("albert_tf.export",),
    ("data_prep",),
    ("pipelines",),
)
# `albert_tf/__init__.py` only names modules as strings, in its lazy table: no layer of its own.
LAZY_ROOT = "albert_tf"
TENSORFLOW_FREE = (
    "albert_tf.records",
    "albert_tf.config",
    "albert_tf.io",
    "albert_tf.log_filters",
    "albert_tf.output_dirs",
    "albert_tf.settings",
    "albert_tf.stopping",
    "albert_tf.registration",
    "albert_tf.training.pretraining_options",
    "albert_tf.text.ngrams",
    "albert_tf.text.pairs",
    "albert_tf.text.tokenization",
    "albert_tf.text.client_sentencepiece",
    "data_prep",
)
HEAVY = ("tensorflow", "keras", "keras_hub", "tensorflow_text")


@dataclasses.dataclass
class Imports:
    """What one module imports: repo modules anywhere in it, and what runs when it is imported."""

    internal: set[str] = dataclasses.field(default_factory=set)
    internal_at_import: set[str] = dataclasses.field(default_factory=set)
    heavy_at_import: set[str] = dataclasses.field(default_factory=set)
    unknown: set[str] = dataclasses.field(default_factory=set)


def module_sources(root: pathlib.Path = ROOT) -> dict[str, str]:
    """{dotted module name: source} of every module of `PACKAGES` (a package is its __init__)."""
    sources = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            sources[".".join(parts)] = path.read_text(encoding="utf-8")
    return sources


def lazy_table(source: str) -> dict[str, str]:
    """The `_LAZY` {name: module} table of `albert_tf/__init__.py`."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "_LAZY" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    return {}


def defined_names(tree: ast.Module) -> set[str] | None:
    """Names a module defines at its top level (None: any name, through a module `__getattr__`)."""
    names, stack = set(), list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            names.update((a.asname or a.name).partition(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            stack.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt))
            if isinstance(node, ast.Try):
                stack.extend(s for h in node.handlers for s in h.body)
    return None if "__getattr__" in names else names


def _import_nodes(tree: ast.AST, at_import: bool):
    """Import statements of a module; with `at_import` only those run when it is imported
    (function bodies are left out; class bodies and module-level blocks run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if at_import and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            stack.append(child)


def _targets(node, module: str, is_package: bool, modules, lazy, defined) -> list[str]:
    """Dotted names `node` imports: modules where the name is one, else the module holding the
    name; a name its module does not define is given as `module.name` (not a module: unknown)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    targets = []
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:
            targets.append(f"{base}.{alias.name}")
        elif base == LAZY_ROOT and alias.name in lazy:
            targets.append(lazy[alias.name])  # `from albert_tf import AlbertModel`: its module
        elif base in defined and defined[base] is not None and alias.name not in defined[base]:
            targets.append(f"{base}.{alias.name}")
        else:
            targets.append(base)
    return targets


def import_graph(sources: dict[str, str]) -> dict[str, Imports]:
    """{module: Imports} of every module in `sources` ({dotted name: source})."""
    lazy = lazy_table(sources.get(LAZY_ROOT, ""))
    modules = set(sources)
    trees = {module: ast.parse(source, filename=module) for module, source in sources.items()}
    defined = {module: defined_names(tree) for module, tree in trees.items()}
    defined[LAZY_ROOT] = None  # its names are the lazy table's, resolved above
    graph = {}
    for module, tree in trees.items():
        is_package = any(m.startswith(module + ".") for m in modules)
        imports = Imports()
        for at_import in (False, True):
            internal = imports.internal_at_import if at_import else imports.internal
            for node in _import_nodes(tree, at_import):
                for target in _targets(node, module, is_package, modules, lazy, defined):
                    top = target.partition(".")[0]
                    if top in PACKAGES:
                        if target not in modules:
                            imports.unknown.add(target)
                        elif target != module:
                            internal.add(target)
                    elif top in HEAVY and at_import:
                        imports.heavy_at_import.add(target)
        graph[module] = imports
    return graph


def layer_of(module: str) -> int | None:
    """Index in `LAYERS` of the longest prefix naming `module` or a package holding it."""
    best, best_length = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def cycles(graph: dict[str, Imports]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module].internal):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def upward_imports(graph: dict[str, Imports]) -> list[tuple[str, str]]:
    """(module, imported module) pairs where the import goes to a higher layer."""
    return sorted(
        (module, target)
        for module, imports in graph.items()
        if module != LAZY_ROOT
        for target in imports.internal
        if target != LAZY_ROOT and layer_of(module) < layer_of(target)
    )


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def heavy_at_import(graph: dict[str, Imports], module: str) -> dict[str, set[str]]:
    """{repo module: TensorFlow/Keras modules it imports} over everything importing `module`
    loads: its packages' __init__s and the repo modules they and it import, transitively."""
    seen, todo, heavy = set(), [module], {}
    while todo:
        current = todo.pop()
        if current in seen or current not in graph:
            continue
        seen.add(current)
        if graph[current].heavy_at_import:
            heavy[current] = graph[current].heavy_at_import
        todo.extend(graph[current].internal_at_import)
        todo.extend(_parents(current))
    return heavy


def _tensorflow_free(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in TENSORFLOW_FREE)


GRAPH = import_graph(module_sources())


def test_every_repo_import_names_an_existing_module():
    unknown = {m: sorted(i.unknown) for m, i in GRAPH.items() if i.unknown}
    assert not unknown


def test_every_module_has_a_layer():
    assert {
        "albert_tf.records",
        "albert_tf.modeling.heads.classifier",
        "albert_tf.finetuning.task",
        "albert_tf.tasks.glue.finetune",
        "data_prep.pipeline",
        "data_prep.units",
        "pipelines.pretrain",
    } <= set(GRAPH)
    assert [m for m in GRAPH if m != LAZY_ROOT and layer_of(m) is None] == []


def test_no_import_cycle():
    assert cycles(GRAPH) == []


def test_no_layer_imports_a_higher_one():
    assert upward_imports(GRAPH) == []


def test_data_stage_modules_import_neither_tensorflow_nor_keras():
    checked = [m for m in GRAPH if _tensorflow_free(m)]
    assert {
        "albert_tf.records",
        "albert_tf.config",
        "albert_tf.text.tokenization",
        "data_prep.pipeline",
        "data_prep.units",
        "data_prep.local_runner",
        "data_prep.writer",
    } <= set(checked)
    assert {m: heavy_at_import(GRAPH, m) for m in checked if heavy_at_import(GRAPH, m)} == {}


def test_the_checks_catch_a_made_up_cycle_upward_import_and_tensorflow_import():
    graph = import_graph(
        {
            "albert_tf": '_LAZY = {"AlbertModel": "albert_tf.modeling.model"}\n',
            "albert_tf.records": "FEATURE_NAMES = ()\n\n\n"
            "def f():\n    from albert_tf import AlbertModel\n",
            "albert_tf.modeling": "",
            "albert_tf.modeling.model": "import keras\nfrom albert_tf import records\n",
            "albert_tf.text": "",
            "albert_tf.text.tokenization": "from albert_tf.modeling import model\n",
            "data_prep": "",
            "data_prep.pipeline": "from albert_tf.records import FEATURE_NAMES\n"
            "from albert_tf.text import tokenization\nimport albert_tf.gone\n"
            "from albert_tf.records import GONE\n",
        }
    )
    assert cycles(graph) == [["albert_tf.modeling.model", "albert_tf.records"]]
    assert upward_imports(graph) == [
        ("albert_tf.records", "albert_tf.modeling.model"),
        ("albert_tf.text.tokenization", "albert_tf.modeling.model"),
    ]
    # The import inside a function runs only when called: records itself stays TensorFlow-free.
    assert heavy_at_import(graph, "albert_tf.records") == {}
    assert heavy_at_import(graph, "data_prep.pipeline") == {"albert_tf.modeling.model": {"keras"}}
    assert graph["data_prep.pipeline"].unknown == {"albert_tf.gone", "albert_tf.records.GONE"}
