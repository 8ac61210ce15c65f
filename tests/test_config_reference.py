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


#: A commented line of the example: a section's header or a key's.
_COMMENTED = re.compile(r"# (\[[a-z_.]+\]|[a-z_]+ = )")
#: Keys whose example cannot pass alone: a file to be found, or another way to say
#: what the example already sets.
_NOT_ALONE = {
    "mqtt.servers": "instead of mqtt.host, which the example sets",
    "mqtt.password_file": "names a file",
    "mqtt.tls.ca_file": "names a file",
    "mqtt.tls.cert_file": "names a file",
    "mqtt.tls.key_file": "names a file",
}


def _uncommented(line: str) -> str:
    return line[2:] if _COMMENTED.match(line) else line


def test_every_commented_line_of_the_example_is_toml_once_uncommented() -> None:
    """Found on the first day: `# base_topic =` and three more were no TOML uncommented."""
    lines = EXAMPLE.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if _COMMENTED.match(line):
            try:
                tomllib.loads(line[2:])
            except tomllib.TOMLDecodeError as exc:
                pytest.fail(f"config/wheeld.toml:{number}: {line!r} uncommented: {exc}")
    tomllib.loads("\n".join(_uncommented(line) for line in lines))


def _one_uncommented() -> list[tuple[str, list[str]]]:
    """Each commented key of the example, uncommented alone (its driver's section and
    driver too): its dotted name and the file's lines."""
    lines = EXAMPLE.read_text().splitlines()
    cases: list[tuple[str, list[str]]] = []
    section, header, driver = "", 0, None
    for number, line in enumerate(lines):
        found = re.match(r"(# )?\[([a-z_.]+)\](?:  # wheel.driver = (\"[a-z0-9-]+\"))?", line)
        if found:
            section, header, driver = found[2], number, found[3]
            continue
        key = re.match(r"# ([a-z_]+) = ", line)
        if not key:
            continue
        edited = list(lines)
        edited[number] = line[2:]
        edited[header] = _uncommented(edited[header])
        if driver is not None:
            chosen = next(n for n, text in enumerate(edited) if text.startswith("# driver = "))
            edited[chosen] = f"driver = {driver}"
        cases.append((f"{section}.{key[1]}", edited))
    return cases


@pytest.mark.parametrize(
    ("key", "lines"), _one_uncommented(), ids=lambda case: case if isinstance(case, str) else ""
)
def test_each_commented_key_of_the_example_passes_uncommented(
    key: str, lines: list[str], tmp_path: Path
) -> None:
    """Uncommented alone, each example value is one the configuration takes."""
    from wheeld.config import ConfigError, load

    if key in _NOT_ALONE:
        pytest.skip(_NOT_ALONE[key])
    path = tmp_path / "wheeld.toml"
    path.write_text("\n".join(lines) + "\n")
    try:
        load(path, environ={}, signing_key=False)
    except ConfigError as exc:
        pytest.fail(f"{key} uncommented: {exc}")
