"""The packages' shape: the engine's layer arrows (docs/ARCHITECTURE.md) are what the imports do, no
package has an import cycle (imports inside functions count: a cycle hidden there is still one), every
module imports on its own in a fresh interpreter, no module is over the line bound, and no tracker number ships
in its text."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import strata_bench
import strata_engine
import strata_verify

ROOT = Path(strata_engine.__file__).parent
# One noun per module is the rule (docs/ARCHITECTURE.md); this bound only catches a module that has clearly
# become two. Lines are counted as `ruff format` writes them (tests/test_format.py).
MAX_LINES = 600
KNOWN_LONG: set[str] = set()  # modules allowed over MAX_LINES for now, each with the change that splits it
TRACKER = re.compile(r"\bissues?[ -]*#?\s*\d+|(?<![\"'])#\d{3,}\b", re.IGNORECASE)  # not a "#264653" colour


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    base = ROOT.parent
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def module_level_imports(
    name: str, path: Path, known: set[str], *, everywhere: bool = False, prefix: str = "strata_engine"
) -> set[str]:
    """Modules under `prefix` that `name` imports: at module level (not inside functions or TYPE_CHECKING),
    or with everywhere=True also inside functions and TYPE_CHECKING blocks (what the layer arrows mean)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()

    def visit(body):
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) and not everywhere:
                continue
            if everywhere and isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.With, ast.For, ast.While)
            ):
                visit(node.body + getattr(node, "orelse", []))
            elif isinstance(node, (ast.If, ast.Try)):
                visit(
                    node.body
                    + node.orelse
                    + getattr(node, "finalbody", [])
                    + [h for x in getattr(node, "handlers", []) for h in x.body]
                )
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith(prefix))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                if not base.startswith(prefix):
                    continue
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)

    visit(ast.parse(path.read_text()).body)
    return {m for m in found if m in known and m != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph, as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def walk(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt] if nxt in stack else [node, nxt]
            if nxt not in state and (cycle := walk(nxt, stack + [nxt])):
                return cycle
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := walk(name, [name])):
            return cycle
    return None


def package_graph(package) -> dict[str, set[str]]:
    """Every import between a package's modules, inside functions and TYPE_CHECKING blocks included."""
    root = Path(package.__file__).parent
    mods = modules(root)
    return {
        name: module_level_imports(name, path, set(mods), everywhere=True, prefix=package.__name__)
        for name, path in mods.items()
    }


def test_the_import_graph_has_no_cycle():
    mods = modules()
    graph = {name: module_level_imports(name, path, set(mods)) for name, path in mods.items()}
    assert graph["strata_engine.scheduler.scheduler"] >= {"strata_engine.scheduler.plans"}  # the parser sees imports
    assert (cycle := find_cycle(graph)) is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("package", [strata_engine, strata_bench, strata_verify], ids=lambda p: p.__name__)
def test_no_cycle_even_through_imports_inside_functions(package):
    cycle = find_cycle(package_graph(package))
    assert cycle is None, (
        f"import cycle in {package.__name__} (an import inside a function hides it from Python, not from the design): "
        + " -> ".join(cycle)
    )


# The engine's layers, lowest first (docs/ARCHITECTURE.md): a module may import its own layer and any lower one;
# layers of equal rank (the model and the scheduler) do not import each other. `base` is what every layer names.
LAYERS: dict[str, tuple[int, tuple[str, ...]]] = {
    "base": (
        0,
        (
            "tokens",
            "errors",
            "params",
            "knobs",
            "config",
            "scheduler_config",
            "runtime_config",
            "kernel_switches",
            "events",
            "context_length",
            "finish",
            "mkl_mode",
            "heap",
        ),
    ),
    "model": (1, ("model",)),
    "scheduler": (1, ("scheduler",)),
    "runtime": (2, ("runtime",)),
    "executors": (3, ("executors",)),
    "core": (4, ("engine", "engine_info", "backends", "resolved", "layout", "machine_profile", "tuning", "outputs")),
    "server": (5, ("server",)),
    "entry": (6, ("cli", "__main__", "")),  # "" = the package's own __init__
}


def layer_of(module: str) -> str:
    rest = module.removeprefix("strata_engine").removeprefix(".")
    head = rest.split(".", 1)[0]
    for name, (_, heads) in LAYERS.items():
        if head in heads:
            return name
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and to docs/ARCHITECTURE.md")


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import that points up a layer or across to a layer of equal rank, as 'a (layer) -> b (layer)'."""
    bad = []
    for module, imported in sorted(graph.items()):
        mine = layer_of(module)
        for other in sorted(imported):
            theirs = layer_of(other)
            if theirs != mine and LAYERS[theirs][0] >= LAYERS[mine][0]:
                bad.append(f"{module} ({mine}) -> {other} ({theirs})")
    return bad


def test_the_layer_arrows_are_what_the_imports_do():
    graph = package_graph(strata_engine)
    assert graph["strata_engine.engine"] >= {"strata_engine.runtime.sampler"}  # imports inside functions are seen
    bad = layer_violations(graph)
    assert not bad, "imports against the layer arrows of docs/ARCHITECTURE.md:\n" + "\n".join(bad)


def test_the_layer_check_catches_an_arrow_up_and_one_across():
    graph = package_graph(strata_engine)
    graph["strata_engine.model.transformer"] = graph["strata_engine.model.transformer"] | {
        "strata_engine.runtime.pipeline"
    }
    graph["strata_engine.scheduler.plans"] = graph["strata_engine.scheduler.plans"] | {"strata_engine.model.rows"}
    assert layer_violations(graph) == [
        "strata_engine.model.transformer (model) -> strata_engine.runtime.pipeline (runtime)",
        "strata_engine.scheduler.plans (scheduler) -> strata_engine.model.rows (model)",
    ]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def absolute_imports(path: Path) -> list[str]:
    """Every absolute module name `path` imports, at module level or inside a function."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
    return names


def test_the_scheduler_and_the_config_groups_import_no_torch():
    """scheduler/ is pure Python, and so are the config groups (config.py, runtime_config.py: the torch
    runtime's knobs are plain values): none of them imports torch, at module level or inside a function."""
    pure = {n: p for n, p in modules().items() if n.startswith("strata_engine.scheduler")}
    pure |= {n: ROOT / f"{n.rsplit('.', 1)[1]}.py" for n in ("strata_engine.config", "strata_engine.runtime_config")}
    bad = []
    for name, path in pure.items():
        bad += [f"{name} imports {n}" for n in absolute_imports(path) if n.split(".")[0] == "torch"]
    assert len(pure) > 10 and not bad, "\n".join(bad)


def test_the_model_imports_nothing_native():
    """model/ is the plain model: the native ops, their one loader and their C++ are the runtime's
    (runtime/native/), which sets the model's hooks from outside. The layer check refuses model/ importing
    them; and no model module builds or reads C++ itself (torch.utils.cpp_extension, a .cpp or .h file)."""
    graph = package_graph(strata_engine)
    assert "strata_engine.runtime.native.build" in graph  # the loader is where the check below looks for it
    for native in ("strata_engine.runtime.native.build", "strata_engine.runtime.native.chunk_attention"):
        moved = {**graph, "strata_engine.model.weights": graph["strata_engine.model.weights"] | {native}}
        assert f"strata_engine.model.weights (model) -> {native} (runtime)" in layer_violations(moved)
    bad = []
    for name, path in modules(ROOT / "model").items():
        for node in ast.walk(ast.parse(path.read_text())):
            imported = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module or ''}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            bad += [f"{name} imports {n}" for n in imported if "cpp_extension" in n or ".native" in n]
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith((".cpp", ".h")):
                bad.append(f"{name} names the C++ file {node.value}")
    assert not bad, "model/ holds native code (it belongs in runtime/native/):\n" + "\n".join(bad)


def test_the_shared_client_and_the_engine_stay_below_the_tools():
    """The engine imports neither tool; strata_bench.engines (the client both tools share) imports nothing else of
    strata_bench; the bench never imports the gate."""
    bad = []
    for package, forbidden in ((strata_engine, ("strata_bench", "strata_verify")), (strata_bench, ("strata_verify",))):
        for name, path in modules(Path(package.__file__).parent).items():
            bad += [f"{name} imports {n}" for n in absolute_imports(path) if n.split(".")[0] in forbidden]
    for name, imported in package_graph(strata_bench).items():
        if name.startswith("strata_bench.engines"):
            bad += [
                f"{name} imports {m}, above the shared client"
                for m in imported
                if not m.startswith("strata_bench.engines")
            ]
    assert not bad, "\n".join(bad)


@pytest.mark.slow  # one interpreter per module: a minute or two
def test_every_module_imports_alone_in_a_fresh_interpreter():
    script = (
        "import os, subprocess, sys\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "def one(name):\n"
        "    r = subprocess.run([sys.executable, '-c', f'import {name}'], capture_output=True, text=True)\n"
        "    return name + ': ' + r.stderr.strip().splitlines()[-1] if r.returncode else None\n"
        "with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:\n"  # each its own interpreter
        "    bad = [b for b in pool.map(one, sys.argv[1:]) if b]\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    names = [n for n in modules() if not n.endswith("__main__")]
    result = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr


PACKAGES = [Path(p.__file__).parent for p in (strata_engine, strata_bench, strata_verify)]


def test_no_family_of_modules_is_a_subpackage_in_disguise():
    """Three or more modules of one folder named `<noun>_*.py` (or `<noun>.py` beside them) are one noun's
    parts: give them their folder, as `engines/`, `load/`, `executors/sim/` and `runtime/stage_ranks/` are."""
    families = {}
    for root in PACKAGES:
        for path in root.rglob("*.py"):
            families.setdefault((path.parent, path.stem.split("_")[0]), []).append(path.stem)
    bad = {
        f"{folder.relative_to(ROOT.parent)}/{noun}_*": sorted(stems)
        for (folder, noun), stems in families.items()
        if len(stems) >= 3 and sum("_" in stem for stem in stems) >= 2 and noun not in ("", "test")
    }
    assert not bad, f"name families that want a subpackage: {bad}"


def test_no_module_is_over_the_line_bound():
    long = {
        str(p.relative_to(ROOT.parent)): n
        for root in PACKAGES
        for p in root.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert set(long) <= KNOWN_LONG, f"over {MAX_LINES} lines: {long}"


def test_no_tracker_numbers_in_shipped_text():
    hits = []
    for path in sorted(p for root in PACKAGES for p in root.rglob("*")):
        if path.suffix in (".py", ".json", ".md", ".txt", ".toml"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if TRACKER.search(line):
                    hits.append(f"{path.relative_to(ROOT.parent)}:{number}: {line.strip()}")
        if TRACKER.search(path.name.replace("issue", "issue ")):
            hits.append(f"{path.relative_to(ROOT.parent)}: the file's name")
    assert not hits, "name the behaviour, not the tracker number:\n" + "\n".join(hits)
