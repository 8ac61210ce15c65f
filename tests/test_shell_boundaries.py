"""What the shell may touch of the table and of the clock, held by reading its source.

The shell (and ``replay``, and the command line) reads a table through
``TablePipeline.view`` (``wheeld/table/view.py``), never the pipeline's parts;
and the shell's one wall clock is ``HostClock`` (``wheeld/shell/clock.py``),
which notices a stepped clock: every other module is handed its time.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
#: The modules outside ``wheeld/table`` that drive a pipeline.
READERS = [
    *sorted((ROOT / "wheeld" / "shell").rglob("*.py")),
    *sorted((ROOT / "wheeld" / "audit").rglob("*.py")),
    ROOT / "wheeld" / "cli.py",
]
#: The pipeline's own parts: what ``TableView`` reads for the shell.
PARTS = frozenset(
    {"engine", "decoder", "session", "record", "announce", "floors", "operator", "lines", "chain"}
)


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def parts_read(source: str) -> list[str]:
    """Each ``<pipeline>.<part>`` in ``source``, and any ``.engine`` or ``.decoder`` read
    at all (a method of that name called is another thing: a journal's, a driver's)."""
    tree = ast.parse(source)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        on_pipeline = _name(node.value).endswith("pipeline") and node.attr in PARTS
        read = node.attr in ("engine", "decoder") and id(node) not in called
        if on_pipeline or read:
            found.append(f"line {node.lineno}: .{node.attr}")
    return found


def wall_clock_reads(source: str) -> list[str]:
    """Each ``time.time()`` (or ``time()`` imported from ``time``) called in ``source``."""
    tree = ast.parse(source)
    bare = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "time"
        for alias in node.names
        if alias.name == "time"
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute) and func.attr == "time" and _name(func.value) == "time"
        ) or (isinstance(func, ast.Name) and func.id in bare):
            found.append(f"line {node.lineno}")
    return found


def test_the_shell_reads_a_table_only_through_its_view() -> None:
    leaks = {
        str(path.relative_to(ROOT)): found
        for path in READERS
        if (found := parts_read(path.read_text(encoding="utf-8")))
    }
    assert not leaks, f"read TablePipeline.view instead of the pipeline's parts: {leaks}"


def test_the_shell_reads_the_wall_clock_only_in_its_clock() -> None:
    clock = ROOT / "wheeld" / "shell" / "clock.py"
    reads = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "wheeld" / "shell").rglob("*.py"))
        if path != clock and (found := wall_clock_reads(path.read_text(encoding="utf-8")))
    }
    assert not reads, f"take the time from HostClock (handed in), not time.time(): {reads}"


def test_the_checks_see_what_they_forbid() -> None:
    assert parts_read("state = self._pipeline.engine.state") == ["line 1: .engine"]
    assert parts_read("c = pipeline.chain\nn = parts.pipeline.view.pockets") == ["line 1: .chain"]
    assert parts_read("counts = decoder.counters\nx = table.decoder") == ["line 2: .decoder"]
    assert parts_read("state = journal.engine()\nd = driver.decoder()") == []
    assert wall_clock_reads("import time\nat = time.time()\nm = time.monotonic()") == ["line 2"]
    assert wall_clock_reads("from time import time as now\nat = now()") == ["line 2"]
    assert wall_clock_reads("clock = time.time\nat = clock()") == []
