"""docs/architecture.md names every module under wheeld/: a new one must say where it sits."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _modules() -> list[Path]:
    return sorted(
        path.relative_to(ROOT)
        for path in (ROOT / "wheeld").rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    )


def _named(module: Path, text: str) -> bool:
    """Named by its path, or (in a package's row) by its file name beside the package's path."""
    if f"`{module.as_posix()}`" in text:
        return True
    package = f"`{module.parent.as_posix()}/`"
    rows = [line for line in text.splitlines() if package in line]
    if any(f"`{module.name}`" in row for row in rows):
        return True
    # A package described in a paragraph of its own: the package and the file name in it.
    paragraphs = re.split(r"\n\s*\n", text)
    return any(
        f"{module.parent.as_posix()}/" in paragraph and f"`{module.name}`" in paragraph
        for paragraph in paragraphs
    )


def test_every_module_is_in_the_architecture() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    missing = [module.as_posix() for module in _modules() if not _named(module, text)]
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


def test_the_check_sees_a_module_that_is_not_named() -> None:
    assert not _named(Path("wheeld/nowhere.py"), "`wheeld/somewhere.py`")
    assert _named(Path("wheeld/shell/journal/codec.py"), "| `wheeld/shell/journal/` | `codec.py` |")
