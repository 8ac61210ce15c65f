"""The configuration reference and the example are written from the models, and kept so."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from wheeld import config_reference
from wheeld.config_reference import EXAMPLE, REFERENCE, example, sections, with_reference


def test_docs_configuration_md_is_written_from_the_models() -> None:
    assert REFERENCE.read_text() == with_reference(REFERENCE.read_text()), (
        "docs/configuration.md is stale: run python -m wheeld.config_reference"
    )


def test_the_example_is_written_from_the_models() -> None:
    assert EXAMPLE.read_text() == example(), (
        "config/wheeld.toml is stale: run python -m wheeld.config_reference"
    )


def test_every_key_says_what_it_is_for() -> None:
    for section in sections():
        assert section.summary, f"[{section.name}] has no docstring"
        for key, field in section.fields():
            assert field.description, f"{section.name}.{key} has no description"


def test_the_example_shows_every_section_and_every_key() -> None:
    shown: dict[str, set[str]] = {}
    section = ""
    for line in EXAMPLE.read_text().splitlines():
        header = re.match(r"(# )?\[([a-z_.]+)\]", line)
        key = re.match(r"(# )?([a-z_]+) =", line)
        if header:
            section = header[2]
            shown[section] = set()
        elif key:
            shown[section].add(key[2])
    assert shown == {s.name: {key for key, _ in s.fields()} for s in sections()}
    # Set: what each table must look at, so every other default holds as it is.
    set_keys = tomllib.loads(EXAMPLE.read_text())
    assert set_keys == {
        "table": {"id": "T1"},
        "wheel": {"port": "/dev/ttyUSB0"},
        "mqtt": {"host": "127.0.0.1", "tls": {}},
        "state": {},
        "log": {},
        "marquee": {},
        "signing": {"key_file": "signing.key"},
        "rules": {},
        "alerts": {},
        "metrics": {},
    }


def test_the_check_says_when_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "wheeld.toml"
    stale.write_text("[table]\n")
    monkeypatch.setattr(config_reference, "EXAMPLE", stale)
    assert config_reference.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
