"""What is running: the software's version and digest, the drivers, the configuration's
fingerprint, the retained <base>/info payload and `wheeld --version`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import rfc8785

from wheeld.config import Config, load
from wheeld.core.signing import Signer, signature_problem
from wheeld.shell import identity

INSTALLED = Path(identity.__file__).resolve().parents[1]
HEX64 = re.compile(r"[0-9a-f]{64}")


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the installed package, to change without touching the real one."""
    copy = tmp_path / "wheeld"
    shutil.copytree(INSTALLED, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_version_is_the_installed_distributions() -> None:
    assert identity.software_version() == version("wheeld")


def test_the_digest_is_stable_and_covers_exactly_the_package_files(package_copy: Path) -> None:
    first = identity.package_digest(package_copy)
    assert HEX64.fullmatch(first)
    assert identity.package_digest(package_copy) == first
    # Python's own byte-code is not the package: it comes and goes at will.
    (package_copy / "__pycache__").mkdir(exist_ok=True)
    (package_copy / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0junk")
    assert identity.package_digest(package_copy) == first


@pytest.mark.parametrize(
    "change",
    ["edit a module", "edit package data", "add a file", "rename a file"],
)
def test_any_change_to_a_package_file_changes_the_digest(package_copy: Path, change: str) -> None:
    before = identity.package_digest(package_copy)
    if change == "edit a module":
        engine = package_copy / "core" / "engine.py"
        engine.write_bytes(engine.read_bytes() + b"\n")
    elif change == "edit package data":
        (package_copy / "followers" / "marquee" / "static" / "marquee.css").write_text("body {}\n")
    elif change == "add a file":
        (package_copy / "drivers" / "backdoor.py").write_text("")
    else:
        (package_copy / "core" / "rules.py").rename(package_copy / "core" / "rules2.py")
    assert identity.package_digest(package_copy) != before


def test_the_digest_is_what_coreutils_computes(package_copy: Path) -> None:
    """An auditor recomputes it with the command the module documents."""
    if not (shutil.which("find") and shutil.which("sha256sum") and shutil.which("xargs")):
        pytest.skip("needs find, xargs and sha256sum")
    command = (
        "find . -type f -not -path '*/__pycache__/*' -printf '%P\\n'"
        " | LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum"
    )
    done = subprocess.run(
        ["sh", "-c", command], cwd=package_copy, capture_output=True, text=True, check=True
    )
    assert done.stdout.split()[0] == identity.package_digest(package_copy)


def test_the_installed_digest_is_read_once_and_kept() -> None:
    """Its cost is a figure of benchmarks.daemon (READY), not a timing asserted here."""
    first = identity.package_digest()
    assert identity.package_digest() is first
    assert first == identity.package_digest(INSTALLED)


def test_the_installed_drivers_name_their_distributions() -> None:
    drivers = {found.name: found for found in identity.installed_drivers()}
    wrp = drivers["wrp"]
    assert (wrp.distribution, wrp.version) == ("wheeld", version("wheeld"))
    assert wrp.sha256 == identity.package_digest()  # WRP/1 is part of wheeld itself
    for found in drivers.values():
        assert found.problem is None
        assert found.sha256 is not None and HEX64.fullmatch(found.sha256)
        assert found.distribution is not None
        assert found.version == version(found.distribution)


def _config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "wheeld.toml"
    path.write_text(text)
    return load(path, environ={})


def _canonical(config: Config) -> str:
    return rfc8785.dumps(identity.config_public(config)).decode("utf-8")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command-line tool")
def test_no_secret_reaches_the_fingerprinted_form(tmp_path: Path) -> None:
    from tests.tls import make_authority

    # A key goes with its certificate (alone it is refused), and both must load.
    client = make_authority(tmp_path, "client")
    key_material = client.key.read_text().splitlines()[1]
    (tmp_path / "mqtt.pass").write_text("from-a-file-9c2\n")
    tls = '[mqtt.tls]\ncert_file = "client.crt"\nkey_file = "client.key"\n'
    inline = _config(tmp_path, f'[mqtt]\nusername = "wheeld"\npassword = "hunter2-7d1"\n{tls}')
    from_file = _config(tmp_path, f'[mqtt]\npassword_file = "mqtt.pass"\n{tls}')
    assert from_file.mqtt.password == "from-a-file-9c2"  # what the fingerprint must not show
    for config in (inline, from_file):
        text = _canonical(config)
        for secret in ("hunter2-7d1", "from-a-file-9c2", key_material, "PRIVATE KEY"):
            assert secret not in text
        assert str(tmp_path / "client.key") in text  # paths are not secrets
        assert identity.config_public(config)["mqtt"]["password"] == identity.SECRET
    assert "mqtt.pass" in _canonical(from_file)
    assert identity.config_public(Config())["mqtt"]["password"] is None


def test_the_fingerprint_follows_the_configuration_in_force(tmp_path: Path) -> None:
    base = _config(tmp_path, '[mqtt]\npassword = "one"\n')
    fingerprint = identity.config_fingerprint(base)
    assert HEX64.fullmatch(fingerprint)
    assert identity.config_fingerprint(base) == fingerprint
    # A rotated password is the same configuration; a changed rule is not.
    assert identity.config_fingerprint(_config(tmp_path, '[mqtt]\npassword = "two"\n')) == (
        fingerprint
    )
    changed = _config(tmp_path, '[mqtt]\npassword = "one"\n[rules]\nsettle_ms = 1200\n')
    assert identity.config_fingerprint(changed) != fingerprint
    # Defaults are in force too: spelling one out changes nothing.
    spelled = _config(tmp_path, '[mqtt]\npassword = "one"\n[rules]\nsettle_ms = 1000\n')
    assert identity.config_fingerprint(spelled) == fingerprint


def test_an_environment_override_is_part_of_the_configuration_in_force(tmp_path: Path) -> None:
    path = tmp_path / "wheeld.toml"
    path.write_text("")
    plain = identity.config_fingerprint(load(path, environ={}))
    overridden = load(path, environ={"WHEELD_RULES__SETTLE_MS": "1500"})
    assert identity.config_fingerprint(overridden) != plain


def test_the_drivers_section_is_fingerprinted_with_its_defaults(tmp_path: Path) -> None:
    listening = _config(tmp_path, '[wheel]\ndriver = "cammegh-ss2"\n')
    section = identity.config_public(listening)["wheel"]
    assert isinstance(section.get("control"), dict)  # the defaults in force, spelled out
    tuned = _config(tmp_path, '[wheel]\ndriver = "cammegh-ss2"\n[wheel.control]\npoll_s = 2.5\n')
    assert identity.config_fingerprint(tuned) != identity.config_fingerprint(listening)


def test_a_number_json_cannot_hold_still_has_a_fingerprint() -> None:
    # The configuration refuses one now (table.max_bet must be finite), but the fingerprint
    # must not fail on a value that slipped past (a copy, a plug-in's model): set unchecked.
    base = Config()
    config = base.model_copy(
        update={"table": base.table.model_copy(update={"max_bet": float("inf")})}
    )
    assert identity.config_public(config)["table"]["max_bet"] == "Infinity"
    assert HEX64.fullmatch(identity.config_fingerprint(config))


EPOCH = "AAAAAAAAAAAAAAAA"


def test_the_info_payload(tmp_path: Path) -> None:
    signer = Signer.generate()
    pem = signer.public_pem().decode("ascii")
    config = _config(tmp_path, '[table]\nid = "T7"\n[wheel]\ndriver = "cammegh-ss2"\n')
    hello = {"model": "SS2", "firmware": "4.1", "serial": "0042", "pockets": 37, "other": 1}
    info = identity.info_payload(
        config, wheel=hello, kid=signer.kid, public_key_pem=pem, now=1.5, epoch=EPOCH
    )
    assert info == {
        "table": "T7",
        "epoch": EPOCH,
        "software": {
            "name": "wheeld",
            "version": version("wheeld"),
            "sha256": identity.package_digest(),
        },
        "drivers": {found.name: found.as_dict() for found in identity.installed_drivers()},
        "driver": "cammegh-ss2",
        "wheel": {"model": "SS2", "firmware": "4.1", "serial": "0042", "pockets": 37},
        "signing": {"kid": signer.kid, "public_key": pem},
        "config_sha256": identity.config_fingerprint(config),
        "ts": "1970-01-01T00:00:01.500Z",
        "schema_version": 1,
    }
    assert set(info["drivers"]) >= {"wrp", "cammegh-ss2"}
    # JSON as it is, and signable as alarms are.
    assert json.loads(json.dumps(info)) == info
    assert signature_problem(signer.sign(info), signer.public_key) is None


def test_the_info_payload_before_the_wheel_has_spoken_and_unsigned() -> None:
    info = identity.info_payload(
        Config(), wheel={}, kid=None, public_key_pem=None, now=0.0, epoch=EPOCH
    )
    assert info["wheel"] == dict.fromkeys(identity.WHEEL_KEYS)
    assert info["signing"] is None
    assert info["driver"] == "wrp"
    with pytest.raises(ValueError, match="both or neither"):
        identity.info_payload(
            Config(), wheel={}, kid="abc", public_key_pem=None, now=0.0, epoch=EPOCH
        )


def test_wheeld_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wheeld", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    first, *drivers = done.stdout.splitlines()
    assert first == f"wheeld {version('wheeld')} (sha256 {identity.package_digest()})"
    assert f"driver wrp: wheeld {version('wheeld')} (sha256 {identity.package_digest()})" in (
        drivers
    )
    assert len(drivers) == len(identity.installed_drivers())
