"""Signed, chained messages, checked by a consumer written from the specification alone.

``SpecConsumer`` knows only what interfaces.md says (RFC 8785 canonical form,
Ed25519, SHA-256, base64url without padding, ``seq``/``prev``/``kid``/``sig``):
it canonicalises with rfc8785 and verifies with cryptography directly, never
through ``wheeld.core.signing``, so a mistake there cannot hide here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests import test_daemon
from tests.captures.signed import (
    CAPTURES,
    TEST_KEY,
    TEST_PUBLIC_KEY,
    signed_pairs,
    signed_replay,
)
from tests.helpers import warmed_up
from tests.test_daemon import BASE, Table
from wheeld.cli import main as wheeld
from wheeld.config import load
from wheeld.core.signing import ChainState, Signer
from wheeld.drivers.wrp import WrpDecoder
from wheeld.shell.journal import JournalView
from wheeld.table.effects import Effects
from wheeld.table.pipeline import TablePipeline, TableSettings
from wheeld.testing.golden import replay_output
from wheeld.testing.rig import Broker, running, write_config

#: What ``wheeld keygen`` printed for the test key (tests/keys/test-signing.key).
TEST_KID = "XRAd_tv6TAjCae63D5Ih_A"
CHAIN_MEMBERS = ("seq", "prev", "kid", "sig")
#: The daemon tests' own mosquitto, one per test.
broker = test_daemon.broker


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class SpecConsumer:
    """Reads ``<base>/game`` payloads in arrival order and names every problem it sees."""

    def __init__(self, public_pem: bytes, kid: str | None = None) -> None:
        key = serialization.load_pem_public_key(public_pem)
        assert isinstance(key, Ed25519PublicKey)
        self.key = key
        self.kid = kid
        self.expected: int | None = None
        self.last: dict[str, Any] | None = None
        self.seen: dict[int, dict[str, Any]] = {}
        self.repeats = 0  # word-for-word repeats dropped (QoS 1, a successor saying it again)

    def signature_holds(self, payload: dict[str, Any]) -> bool:
        sig = payload.get("sig")
        if not isinstance(sig, str) or "=" in sig:
            return False
        if self.kid is not None and payload.get("kid") != self.kid:
            return False
        body = {k: v for k, v in payload.items() if k != "sig"}
        try:
            self.key.verify(
                base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)), rfc8785.dumps(body)
            )
        except InvalidSignature:
            return False
        return True

    def accept(self, payload: dict[str, Any]) -> list[str]:
        """The problems this message shows, given the ones before it."""
        seq = payload.get("seq")
        if not self.signature_holds(payload):
            return [f"seq {seq}: bad signature"]
        assert isinstance(seq, int)
        problems = []
        if seq in self.seen:
            if self.seen[seq] == payload:  # the same message again: dropped, as docs/mqtt.md says
                self.repeats += 1
                return []
            problems.append(f"seq {seq}: a second, different message")
        elif self.expected is not None and seq < self.expected:
            problems.append(f"seq {seq}: reordered")
        elif self.expected is not None and seq > self.expected:
            problems.append(f"seq {seq}: gap, {seq - self.expected} missing")
        elif self.last is not None:
            digest = b64url(hashlib.sha256(rfc8785.dumps(self.last)).digest())
            if payload["prev"] != digest:
                problems.append(f"seq {seq}: broken link")
        elif payload["prev"] is None and seq != 1:
            problems.append(f"seq {seq}: a first message that is not seq 1")
        self.seen.setdefault(seq, payload)
        if self.expected is None or seq >= self.expected:
            self.expected, self.last = seq + 1, payload
        return problems

    def check(self, payloads: list[dict[str, Any]]) -> list[str]:
        return [problem for payload in payloads for problem in self.accept(payload)]


def consumer() -> SpecConsumer:
    return SpecConsumer(TEST_PUBLIC_KEY.read_bytes(), TEST_KID)


def payloads_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def unsigned(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k not in CHAIN_MEMBERS}


# -- replay and the signed goldens ------------------------------------------------------


@pytest.mark.parametrize(("capture", "golden"), signed_pairs(), ids=lambda p: Path(p).stem)
def test_signed_replay_is_its_golden_output(capture: Path, golden: Path) -> None:
    assert golden.exists(), f"no signed golden for {capture}: python -m tests.captures.signed"
    assert signed_replay(capture) == golden.read_text()


@pytest.mark.parametrize(("capture", "golden"), signed_pairs(), ids=lambda p: Path(p).stem)
def test_signed_golden_is_the_unsigned_one_chained_and_verifies(
    capture: Path, golden: Path
) -> None:
    signed = payloads_of(golden.read_text())
    plain = payloads_of(capture.with_suffix(".expected.jsonl").read_text())
    assert [unsigned(p) for p in signed] == plain
    assert [p["seq"] for p in signed] == list(range(1, len(signed) + 1))
    assert signed[0]["prev"] is None
    assert consumer().check(signed) == []


def test_replay_signs_with_the_configured_key(tmp_path: Path) -> None:
    config = tmp_path / "wheeld.toml"
    config.write_text(f"[signing]\nkey_file = {json.dumps(str(TEST_KEY))}\n")
    capture, golden = signed_pairs()[0]
    with_config = signed_replay_with(["--config", str(config)], capture)
    assert with_config == golden.read_text()


def signed_replay_with(options: list[str], capture: Path) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert wheeld(["replay", *options, str(capture)]) == 0
    return out.getvalue()


def test_replay_signs_alarms_without_chaining_them() -> None:
    capture = CAPTURES / "wrp" / "garbage.cap"
    lines = payloads_of(signed_replay_with(["--topics", "--key", str(TEST_KEY)], capture))
    alarms = [line["payload"] for line in lines if line["topic"].endswith("/alarm")]
    assert alarms
    check = consumer()
    for alarm in alarms:
        assert "seq" not in alarm and "prev" not in alarm
        assert check.signature_holds(alarm)
    games = [line["payload"] for line in lines if line["topic"].endswith("/game")]
    assert check.check(games) == []
    results = [line["payload"] for line in lines if line["topic"].endswith("/result")]
    assert results and all(r in games for r in results)  # the same signed payload


def test_replay_without_a_key_stays_unsigned() -> None:
    capture, _ = signed_pairs()[0]
    assert replay_output(capture) == capture.with_suffix(".expected.jsonl").read_text()


def test_replay_with_a_bad_key_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("not a key\n")
    capture, _ = signed_pairs()[0]
    assert wheeld(["replay", "--key", str(bad), str(capture)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--key" in err and "not a PEM private key" in err


# -- the spec-only consumer catches tampering ----------------------------------------------


def _golden() -> list[dict[str, Any]]:
    return payloads_of(signed_pairs()[0][1].read_text())


def test_an_altered_message_is_detected() -> None:
    stream = _golden()
    result = next(p for p in stream if p["event"] == "result")
    result["number"] = "0" if result["number"] != "0" else "1"
    # Refused, so the next message also shows one missing.
    seq = result["seq"]
    assert consumer().check(stream) == [
        f"seq {seq}: bad signature",
        f"seq {seq + 1}: gap, 1 missing",
    ]


def test_a_dropped_message_is_detected() -> None:
    stream = _golden()
    del stream[4]
    assert consumer().check(stream) == ["seq 6: gap, 1 missing"]


def test_a_message_said_again_word_for_word_is_dropped_and_counted() -> None:
    stream = _golden()
    stream.insert(5, stream[4])
    check = consumer()
    assert check.check(stream) == []
    assert check.repeats == 1


def test_a_second_different_message_under_one_seq_is_detected() -> None:
    stream = _golden()
    other = Signer.from_file(TEST_KEY).sign(dict(stream[2], seq=stream[4]["seq"]))
    stream.insert(5, other)
    assert consumer().check(stream) == [f"seq {stream[4]['seq']}: a second, different message"]


def test_a_reordered_message_is_detected() -> None:
    stream = _golden()
    stream[4], stream[5] = stream[5], stream[4]
    assert consumer().check(stream) == ["seq 6: gap, 1 missing", "seq 5: reordered"]


def test_a_message_signed_with_another_key_is_detected() -> None:
    stream = _golden()
    forger = Signer.generate()
    forged = forger.sign({k: v for k, v in stream[2].items() if k not in ("kid", "sig")})
    forged["kid"] = TEST_KID  # even claiming the table's key id
    stream[2] = forged
    assert consumer().check(stream) == ["seq 3: bad signature", "seq 4: gap, 1 missing"]


# -- the pipeline: a journal that cannot keep a batch leaves no gap ------------------------


def test_a_journal_write_failure_leaves_no_seq_gap() -> None:
    wheel = warmed_up()
    pipeline = TablePipeline(
        TableSettings(table="T9", base_topic=BASE, driver="wrp"),
        WrpDecoder(),
        signer=Signer.from_file(TEST_KEY),
    )
    published: list[dict[str, Any]] = []

    def deliver(effects: Effects) -> None:
        published.extend(
            json.loads(m.payload) for m in effects.messages if m.topic == f"{BASE}/game"
        )

    def feed() -> Effects:
        out = Effects()
        for at, frame in wheel.lines[fed[0] :]:
            out.extend(pipeline.on_bytes(frame + b"\r\n", at))
        fed[0] = len(wheel.lines)
        return out

    fed = [0]
    deliver(pipeline.start(wheel.host_time()))
    deliver(pipeline.on_link_up(wheel.host_time()))
    wheel.game("17")
    deliver(feed())
    before = pipeline.chain
    wheel.reverse_rotor()
    wheel.pocket(None)
    wheel.advance(700)
    wheel.launch()
    lost = feed()  # game 2 opens: the journal refuses the batch, nothing is published
    assert any(m.topic == f"{BASE}/game" for m in lost.messages)
    deliver(pipeline.journal_write_failed(lost, "disk full", wheel.host_time()))
    assert pipeline.chain == before
    deliver(pipeline.journal_recovered(wheel.host_time() + 1))
    assert [(p["game_id"], p["event"]) for p in published][-1] == (2, "no_spin")
    assert [p["seq"] for p in published] == list(range(1, len(published) + 1))
    assert consumer().check(published) == []


def test_the_pipeline_continues_a_stored_chain() -> None:
    last = _golden()[-1]
    digest = b64url(hashlib.sha256(rfc8785.dumps(last)).digest())
    wheel = warmed_up()
    pipeline = TablePipeline(
        TableSettings(table="T9", base_topic=BASE, driver="wrp"),
        WrpDecoder(),
        signer=Signer.from_file(TEST_KEY),
        chain=ChainState(last["seq"] + 1, digest),
    )
    wheel.game("5")
    out = Effects()
    for at, frame in wheel.lines:
        out.extend(pipeline.on_bytes(frame + b"\r\n", at))
    games = [json.loads(m.payload) for m in out.messages if m.topic == f"{BASE}/game"]
    check = consumer()
    check.accept(last)
    assert check.check(games) == []
    assert games[0]["seq"] == last["seq"] + 1 and games[0]["prev"] == digest


# -- keys: keygen, the configuration, a daemon that refuses to start ---------------------------


def test_keygen_writes_a_key_pair_and_prints_its_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "keys"
    assert wheeld(["keygen", "--out", str(out)]) == 0
    kid = capsys.readouterr().out.strip()
    key, pub = out / "signing.key", out / "signing.pub"
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    signed = Signer.from_file(key).sign({"event": "spinning"})
    assert signed["kid"] == kid
    assert SpecConsumer(pub.read_bytes(), kid).signature_holds(signed)
    before = key.read_bytes()
    assert wheeld(["keygen", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not overwritten" in err
    assert key.read_bytes() == before


def test_keygen_into_a_file_says_it_is_not_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said '<file>/signing.key: a key is already there', sending one to look for a key."""
    out = tmp_path / "keys"
    out.write_text("a capture, say\n")
    assert wheeld(["keygen", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"wheeld keygen: {out}: not a directory\n"


@pytest.mark.parametrize(
    "args",
    [
        ["keygen", "--out", ""],
        ["recall", "--state-dir", ""],
        ["check-config", ""],
        ["export", "--state-dir", "x", "--out", ""],
        ["simulate", "--link", ""],
    ],
)
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    """Found by an attack: ``keygen --out ""`` (an unset shell variable) wrote the key
    pair into the current directory and said nothing; ``recall --state-dir ""`` read it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        wheeld(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err  # one line, as every error of wheeld's, not the usage too
    assert err.count("\n") == 1 and ": an empty path (see wheeld " in err, err
    assert list(tmp_path.iterdir()) == []


def test_the_key_is_a_secret_found_in_the_credentials_directory(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "signing.key").write_bytes(TEST_KEY.read_bytes())
    config = tmp_path / "wheeld.toml"
    config.write_text('[signing]\nkey_file = "signing.key"\n')
    loaded = load(config, {"CREDENTIALS_DIRECTORY": str(credentials)})
    assert loaded.signing.key_file == credentials / "signing.key"
    assert wheeld(["check-config", str(config)]) == 1  # not beside the file, no credentials


def _run_once(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wheeld", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _run_signing(tmp_path: Path, signing: str) -> subprocess.CompletedProcess[str]:
    """``wheeld run`` once with this ``[signing]``; its wheel's socket:// port takes
    connections, so the port is no problem of its own at start."""
    with socket.create_server(("127.0.0.1", 0)) as wheel:
        config = write_config(
            tmp_path / "c.toml",
            port=f"socket://127.0.0.1:{wheel.getsockname()[1]}",
            broker=1,
            state=tmp_path / "s",
            signing=signing,
        )
        return _run_once(config)


def test_run_without_a_key_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    done = _run_signing(tmp_path, signing="")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "signing.key_file: not set" in done.stderr and "signing.required" in done.stderr
    assert not (tmp_path / "s").exists()  # refused before touching anything


def test_run_with_an_unusable_key_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    done = _run_signing(tmp_path, signing=f"[signing]\nkey_file = {json.dumps(str(bad))}")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "signing.key_file" in done.stderr and "not a PEM private key" in done.stderr


# -- a live daemon: signed, chained across a SIGKILL, the key nowhere --------------------------


def _play(table: Table, *numbers: str, warm: bool = False) -> None:
    """Play these games; ``warm``: the wheel says hello and turns a while first."""
    if warm:
        table.wheel.hello()
        table.wheel.advance(3000)
    for number in numbers:
        table.wheel.game(number)
        table.wheel.reverse_rotor()
    table.flush()


def _secrets(key_file: Path) -> list[str]:
    """Every form the private key could leak in: its PEM body and its raw bytes."""
    pem = key_file.read_bytes().decode()
    body = "".join(line for line in pem.splitlines() if not line.startswith("-----"))
    der = base64.b64decode(body)
    raw = der[-32:]  # PKCS#8 Ed25519: the 32-byte seed closes the structure
    return [body, raw.hex(), base64.b64encode(raw).decode(), b64url(raw)]


def test_live_messages_verify_and_the_chain_survives_a_sigkill(
    tmp_path: Path, broker: Broker
) -> None:
    table = Table(tmp_path, broker)
    key_file, public = tmp_path / "signing.key", tmp_path / "signing.pub"
    kid = Signer.from_file(key_file).kid
    try:
        with running(table.daemon):
            table.ready()
            pid = table.daemon.process.pid if table.daemon.process else 0
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            _play(table, "17", "0", warm=True)
            table.wait_end(2)
            table.daemon.kill()
        table.sub.wait(
            f"{BASE}/status", lambda b: isinstance(b, dict) and b.get("state") == "offline"
        )
        before_restart = list(table.sub.on(f"{BASE}/game"))
        table.notify.received.clear()  # READY=1 must be the new process's

        with running(table.daemon):
            table.ready()
            table.wheel.set_rotor("cw")
            table.wheel.advance(10_000)
            _play(table, "9")
            table.wait_end(3)
            result = table.sub.wait(f"{BASE}/result", lambda p: p["game_id"] == 3)
            assert table.daemon.terminate() == 0

        games = table.sub.on(f"{BASE}/game")
        check = SpecConsumer(public.read_bytes(), kid)
        assert check.check(games) == []
        # A message the killed daemon sent but had not seen acknowledged goes out again
        # word for word (at least once): the consumer drops the repeat, as documented.
        games = [p for i, p in enumerate(games) if p not in games[:i]]
        assert [p["seq"] for p in games] == list(range(1, len(games) + 1))
        first_after = games[len(before_restart)]
        last_before = before_restart[-1]
        assert first_after["seq"] == last_before["seq"] + 1
        assert first_after["prev"] == b64url(hashlib.sha256(rfc8785.dumps(last_before)).digest())
        assert result in games  # <base>/result carries the very signed payload
        for alarm in table.sub.on(f"{BASE}/alarm"):
            assert check.signature_holds(alarm)

        everything = table.daemon.logs() + cmdline + json.dumps(table.sub.seen)
        for secret in _secrets(key_file):
            assert secret not in everything
        assert str(key_file) not in cmdline
        # And the journal the daemon kept verifies with the public key alone.
        state = str(tmp_path / "state")
        assert wheeld(["verify", "--key", str(public), "--state-dir", state]) == 0
    finally:
        table.close()


def test_unsigned_when_not_required_with_one_warning(tmp_path: Path, broker: Broker) -> None:
    table = Table(tmp_path, broker, signing="[signing]\nrequired = false")
    try:
        with running(table.daemon):
            table.ready()
            _play(table, "17", warm=True)
            spinning = table.sub.wait(f"{BASE}/game", lambda p: p["event"] == "spinning")
            assert not set(CHAIN_MEMBERS) & set(spinning)
            warnings = [
                r for r in table.daemon.log_lines() if "unsigned" in str(r.get("event", ""))
            ]
            assert len(warnings) == 1 and warnings[0]["level"] == "warning"
    finally:
        table.close()


def test_frames_reach_the_journal_with_their_games(tmp_path: Path, broker: Broker) -> None:
    """Every line both ways is kept (host time, direction, game), read back from SQLite."""
    table = Table(tmp_path, broker)
    started = time.time()
    try:
        with running(table.daemon):
            table.ready()
            _play(table, "17", warm=True)
            table.wait_end(1)
            sent = len(table.wheel.lines)
            assert table.daemon.terminate() == 0
        with JournalView(tmp_path / "state" / "journal.sqlite3") as view:
            blocks = list(view.blocks())
        rows = [(line.t_ms / 1000, line.dir, game) for block in blocks for line, game in block]
        received = [game for _, direction, game in rows if direction == "<"]
        assert len(received) == sent
        assert received[0] is None and 1 in received  # the hello came before any game
        assert any(direction == ">" for _, direction, _ in rows)  # the query on connect
        assert all(started - 0.001 <= t <= time.time() for t, _, _ in rows)  # host time, in ms
    finally:
        table.close()


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(_json)
@settings(max_examples=500)
def test_the_fast_canonical_form_is_rfc8785s(value: Any) -> None:
    """The standard library's sorted compact JSON stands in for rfc8785 only where equal."""
    import rfc8785

    from wheeld.core.signing import canonical

    try:
        expected: bytes | type[Exception] = rfc8785.dumps(value)
    except Exception as exc:  # an integer out of range, a lone surrogate
        expected = type(exc)
    try:
        got: bytes | type[Exception] = canonical(value)
    except Exception as exc:
        got = type(exc)
    assert got == expected


_SIGNER = Signer.generate()


@given(st.dictionaries(st.text(max_size=8), _json, max_size=6))
@example({"inner": {"sig": "sig-goes-here"}, "sig": "old"})  # the place is not told apart
@example({"a": 1, "kid": "x", "z": "\ud800"})  # a lone surrogate
@example({})
@settings(max_examples=300)
def test_a_signed_payloads_form_is_canonicalised_once_as_rfc8785_would(value: Any) -> None:
    """The chain's next ``prev`` digests the form ``sign_canonical`` hands back with the
    payload: rfc8785's of the signed payload, byte for byte (Ed25519 signs deterministically)."""
    try:
        expected: Any = _SIGNER.sign(value)
        expected = (expected, rfc8785.dumps(expected))
    except Exception as exc:  # an integer out of range, a lone surrogate
        expected = type(exc)
    try:
        got: Any = _SIGNER.sign_canonical(value)
    except Exception as exc:
        got = type(exc)
    assert got == expected


def test_the_chain_names_the_digest_of_the_signed_message() -> None:
    from wheeld.core.signing import chain, digest

    signed, state = chain({"event": "result", "number": "17", "é": "ü"}, ChainState(), _SIGNER)
    assert state == ChainState(2, digest(signed))
    later, _ = chain({"event": "spinning", "rpm": 2.5}, state, _SIGNER)  # a float: rfc8785's
    assert later["prev"] == digest(signed) and later["seq"] == 2
