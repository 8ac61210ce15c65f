"""Plug-in subcommands (``wheeld.core.commands``), and a wheeld that ships no simulator.

``simulate`` and ``demo`` come from the wheeld-simulators distribution
(``simulators/``); ``pip install wheeld`` must not bring them, nor anything
of ``wheeld_simulators``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from setuptools import find_namespace_packages  # type: ignore[import-untyped]

from wheeld.cli import main as wheeld

ROOT = Path(__file__).parent.parent
GROUP = "wheeld.commands"


def add_hello(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """A plug-in command, as another distribution would write one."""
    hello = commands.add_parser("hello", help="say hello")
    hello.set_defaults(func=lambda args: 7)


def _only(*entries: importlib.metadata.EntryPoint) -> Callable[..., object]:
    def entry_points(**selection: str) -> list[importlib.metadata.EntryPoint]:
        assert selection == {"group": GROUP}
        return list(entries)

    return entry_points


def _entry(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=GROUP)


def _help(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    with pytest.raises(SystemExit) as exit_:
        wheeld(["--help"])
    assert exit_.value.code == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_wheeld_alone_lists_no_simulate_or_demo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points", _only())
    out, err = _help(capsys)
    assert "replay" in out and "check-config" in out
    assert not re.search(r"\b(simulate|demo)\b", out), out
    assert err == ""


@pytest.mark.parametrize("argv", [["simulate"], ["demo", "--seconds", "5"]])
def test_simulate_without_the_simulators_says_where_it_comes_from(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found on the first day: argparse's "invalid choice" was all wheeld said."""
    monkeypatch.setattr(importlib.metadata, "entry_points", _only())
    assert wheeld(argv) == 2
    assert capsys.readouterr().err == (
        f"wheeld {argv[0]}: comes with the wheeld-simulators distribution, which is not"
        " installed: pip install ./simulators (in wheeld's source tree) adds it\n"
    )


def test_the_simulators_distribution_adds_simulate_and_demo(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, _ = _help(capsys)
    assert re.search(r"^\s+simulate\s", out, re.MULTILINE), out
    assert re.search(r"^\s+demo\s", out, re.MULTILINE), out


def test_a_plug_in_command_runs_its_func(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        importlib.metadata, "entry_points", _only(_entry("hello", f"{__name__}:add_hello"))
    )
    assert wheeld(["hello"]) == 7


@pytest.mark.parametrize(
    "broken",
    [
        "no_such_module_for_wheeld:add_parser",  # not importable
        f"{__name__}:no_such_function",  # no such attribute
        "json:loads",  # not an add_parser: loads(subparsers) raises TypeError
        f"{__name__}:add_hello",  # a second `hello`: argparse refuses the duplicate
    ],
)
def test_a_broken_plug_in_is_one_line_and_wheeld_goes_on(
    broken: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        _only(_entry("a-hello", f"{__name__}:add_hello"), _entry("broken", broken)),
    )
    out, err = _help(capsys)
    assert "hello" in out and "replay" in out
    assert len(err.splitlines()) == 1 and "'broken'" in err, err
    assert wheeld(["hello"]) == 7


def test_wheeld_distribution_ships_no_simulator() -> None:
    """What `pip install .` puts in the wheel: setuptools' discovery, as configured."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = project["tool"]["setuptools"]["packages"]["find"]
    packages = find_namespace_packages(
        str(ROOT), include=find.get("include", ["*"]), exclude=find.get("exclude", ())
    )
    assert "wheeld" in packages and "wheeld.drivers" in packages
    assert [p for p in packages if not p.startswith("wheeld.") and p != "wheeld"] == []
    assert GROUP not in project["project"].get("entry-points", {})
    assert not any("amqtt" in dep for dep in project["project"]["dependencies"])
    assert "demo" not in project["project"].get("optional-dependencies", {})
    sources = list((ROOT / "wheeld").rglob("*.py"))
    importers = [str(p) for p in sources if "wheeld_simulators" in p.read_text()]
    assert importers == [], "wheeld must run without wheeld-simulators"


def test_simulators_distribution_registers_its_commands() -> None:
    project = tomllib.loads((ROOT / "simulators" / "pyproject.toml").read_text())
    assert project["project"]["name"] == "wheeld-simulators"
    assert "wheeld" in project["project"]["dependencies"]
    assert set(project["project"]["entry-points"][GROUP]) == {"simulate", "demo"}


def test_a_built_in_command_looks_for_no_plug_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Looking for plug-ins imports every plug-in's distribution: not before ``run``."""
    from wheeld import cli

    def looked(commands: object) -> None:
        raise AssertionError("plug-ins looked for")

    monkeypatch.setattr(cli, "_add_plugin_commands", looked)
    config = tmp_path / "wheeld.toml"
    config.write_text('[table]\nid = "T1"\n')
    assert wheeld(["check-config", str(config)]) in (0, 1)
    monkeypatch.undo()
    monkeypatch.setattr(
        importlib.metadata, "entry_points", _only(_entry("hello", f"{__name__}:add_hello"))
    )
    assert wheeld(["hello"]) == 7  # a plug-in's command is still found
    capsys.readouterr()
