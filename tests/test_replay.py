"""`wheeld replay`: golden captures, determinism, and errors as one clear line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.captures.regenerate import golden_pairs
from tests.captures.scenarios import SCENARIOS
from wheeld.cli import main as wheeld
from wheeld.testing.golden import replay_output

ROOT = Path(__file__).resolve().parents[1]

PAIRS = golden_pairs()


@pytest.mark.parametrize(("capture", "golden"), PAIRS, ids=[p[0].stem for p in PAIRS])
def test_capture_replays_to_its_golden_output(capture: Path, golden: Path) -> None:
    assert golden.exists(), f"no golden for {capture}: run python -m tests.captures.regenerate"
    assert replay_output(capture) == golden.read_text()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scripted_captures_match_their_scenarios(name: str) -> None:
    """The committed captures are what the scenario scripts produce."""
    path = Path(__file__).parent / "captures" / "wrp" / f"{name}.cap"
    text = SCENARIOS[name]().capture([f"scenario: {name} (tests/captures/scenarios.py)"])
    assert path.read_text() == text


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wheeld", *args], capture_output=True, text=True, check=False
    )


def test_replay_twice_is_byte_identical() -> None:
    capture = str(Path(__file__).parent / "captures" / "wrp" / "normal-games.cap")
    first, second = _run("replay", capture), _run("replay", capture)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout and first.stdout


def test_payloads_carry_the_fixed_fields() -> None:
    capture = Path(__file__).parent / "captures" / "wrp" / "normal-games.cap"
    lines = [json.loads(line) for line in replay_output(capture).splitlines()]
    for payload in lines:
        assert {"event", "game_id", "table", "ts"} <= payload.keys()
        assert payload["ts"].endswith("Z")
    result = next(p for p in lines if p["event"] == "result")
    assert result == {
        **result,
        "number": "17",
        "color": "black",
        "revolutions": 12,
        "rotor_direction": "cw",
        "ball_direction": "ccw",
    }
    assert lines[0]["game_id"] == 1


def test_replay_uses_configured_rules_and_table(tmp_path: Path) -> None:
    config = tmp_path / "wheeld.toml"
    config.write_text('[table]\nid = "R7"\n[rules]\nmin_ball_revolutions = 13\n')
    capture = Path(__file__).parent / "captures" / "wrp" / "normal-games.cap"
    out = _run("replay", "--config", str(config), str(capture))
    assert out.returncode == 0, out.stderr
    ends = [json.loads(line) for line in out.stdout.splitlines()]
    assert {p["table"] for p in ends} == {"R7"}
    assert next(p["reason"] for p in ends if p["event"] == "no_spin") == "insufficient_revolutions"


def test_pockets_option_overrides_the_wheel(tmp_path: Path) -> None:
    capture = Path(__file__).parent / "captures" / "wrp" / "double-zero.cap"
    out = _run("replay", "--pockets", "37", str(capture))
    first_end = next(json.loads(x) for x in out.stdout.splitlines() if '"no_spin"' in x)
    assert first_end["reason"] == "invalid_pocket"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "cannot read capture"),
        ("# wheeld-capture 1\nthis is not a line\n", ":2: not a capture line"),
    ],
)
def test_an_unreadable_capture_is_one_clear_line(
    tmp_path: Path, content: str | None, needle: str
) -> None:
    path = tmp_path / "bad.cap"
    if content is not None:
        path.write_text(content)
    out = _run("replay", str(path))
    assert out.returncode != 0
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_a_binary_capture_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "bin.cap"
    path.write_bytes(b"\x00\xff\xfe\x80garbage\n")
    out = _run("replay", str(path))
    assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1


def test_an_unknown_driver_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.cap"
    path.write_text("# wheeld-capture 1\n")
    out = _run("replay", "--driver", "acme", str(path))
    assert out.returncode == 2 and "unknown driver 'acme'" in out.stderr


def test_a_bad_config_is_refused_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[rules]\nmin_ball_revolutions = 2\n")
    capture = tmp_path / "x.cap"
    capture.write_text("# wheeld-capture 1\n")
    assert wheeld(["replay", "--config", str(config), str(capture)]) == 1
    out = _run("replay", "--config", str(config), str(capture))
    assert "rules.min_ball_revolutions" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_clock_step_at_an_ss2_launch_keeps_the_game(tmp_path: Path) -> None:
    """The driver times the SS2 by the host's clock: a recorded step must not hide a launch."""
    studio = ROOT / "drivers" / "cammegh" / "tests" / "captures" / "studio-games-2025.cap"
    lines = studio.read_text().splitlines(keepends=True)
    launch = next(i for i, line in enumerate(lines) if " < *X;3;042;" in line)
    stepped = [*lines[:launch], "# clock-step: +20.000\n"]
    for line in lines[launch:]:
        at, _, rest = line.partition(" ")
        stepped.append(f"{float(at) + 20:.3f} {rest}" if at[:1].isdigit() else line)
    capture = tmp_path / "stepped.cap"
    capture.write_text("".join(stepped))
    ends = [
        json.loads(line)
        for line in replay_output(capture).splitlines()
        if '"spin":42' in line and ('"result"' in line or '"no_spin"' in line)
    ]
    assert [(end["event"], end.get("number")) for end in ends] == [("result", "35")]


def test_a_hello_with_a_huge_pocket_count_ends_the_game_signed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wheel's hello mid-game naming 10^50 pockets was a traceback (its signed alarm)."""
    from wheeld.drivers.wrp import encode

    frames = [
        encode("HEL", 0, 0, "37", "M", "1", "S"),
        encode("ROT", 1, 100, "CW", "3000"),
        encode("BAL", 2, 200, "CCW", "0"),
        encode("HEL", 0, 300, "9" * 50, "M", "1", "S"),
    ]
    capture = tmp_path / "huge-hello.cap"
    capture.write_text(
        "# wheeld-capture 1\n# driver: wrp\n"
        + "".join(f"{1758005089 + i}.000 < {f.decode().strip()}\n" for i, f in enumerate(frames))
    )
    key = Path(__file__).parent / "keys" / "test-signing.key"
    assert wheeld(["replay", "--key", str(key), str(capture)]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["event"], e.get("reason")) for e in events] == [
        ("spinning", None),
        ("no_spin", "frame_loss"),
    ]


def test_a_capture_with_a_byte_order_mark_replays_as_without(tmp_path: Path) -> None:
    """It was 'not a wheeld capture (the first line must be ...)' over a right first line."""
    capture = Path(__file__).parent / "captures" / "wrp" / "normal-games.cap"
    marked = tmp_path / "normal-games.cap"
    marked.write_bytes(b"\xef\xbb\xbf" + capture.read_bytes())
    plain = [json.loads(line) for line in replay_output(capture).splitlines()]
    again = [json.loads(line) for line in replay_output(marked).splitlines()]
    # The epoch is made from the file's bytes: another file, another epoch.
    assert [{**p, "epoch": None} for p in again] == [{**p, "epoch": None} for p in plain]
    assert plain
