"""The engine package's shape: every module imports on its own in a fresh interpreter, the module-level
import graph has no cycle, no module is over 300 lines, and no tracker number ships in its text."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import strata_engine

ROOT = Path(strata_engine.__file__).parent
MAX_LINES = 300
KNOWN_LONG: set[str] = set()  # modules allowed over MAX_LINES for now, each with the change that splits it
TRACKER = re.compile(r"\bissues?[ -]*#?\s*\d+|#\d{3,}\b", re.IGNORECASE)


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def module_level_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """strata_engine modules imported when `name` is imported (not inside functions or TYPE_CHECKING)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()

    def visit(body):
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body + node.orelse + getattr(node, "finalbody", []) + [h for x in getattr(node, "handlers", []) for h in x.body])
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("strata_engine"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                if not base.startswith("strata_engine"):
                    continue
                for alias in node.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)

    visit(ast.parse(path.read_text()).body)
    return {m for m in found if m in known and m != name}


def test_the_import_graph_has_no_cycle():
    mods = modules()
    graph = {name: module_level_imports(name, path, set(mods)) for name, path in mods.items()}
    assert graph["strata_engine.scheduler.scheduler"] >= {"strata_engine.scheduler.plans"}  # the parser sees imports
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                walk(nxt, stack + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])


@pytest.mark.slow  # one interpreter per module: a minute or two
def test_every_module_imports_alone_in_a_fresh_interpreter():
    script = ("import importlib, subprocess, sys\n"
              "bad = []\n"
              "for name in sys.argv[1:]:\n"
              "    r = subprocess.run([sys.executable, '-c', f'import {name}'], capture_output=True, text=True)\n"
              "    if r.returncode:\n"
              "        bad.append(name + ': ' + r.stderr.strip().splitlines()[-1])\n"
              "print('\\n'.join(bad))\n"
              "sys.exit(1 if bad else 0)\n")
    names = [n for n in modules() if not n.endswith("__main__")]
    result = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_module_is_over_300_lines():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert set(long) <= KNOWN_LONG, f"over {MAX_LINES} lines: {long}"


def test_no_tracker_numbers_in_shipped_text():
    hits = []
    for path in sorted(ROOT.rglob("*")):
        if path.suffix in (".py", ".json", ".md", ".txt", ".toml"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if TRACKER.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "name the behaviour, not the tracker number:\n" + "\n".join(hits)
