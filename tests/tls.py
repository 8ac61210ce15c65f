"""A mosquitto that takes only TLS and a password, with a throwaway CA made by openssl.

The broker is what a casino runs (``config/mosquitto-tls.conf.example``): one
TLS listener, no anonymous clients, a password file. Certificates are made
fresh per test, valid for a day, for ``127.0.0.1`` and ``localhost``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from wheeld.testing.rig import Broker

OPENSSL = shutil.which("openssl")
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd")

#: The one account the broker knows.
USERNAME = "wheeld-T9"
PASSWORD = "a passphrase, with spaces"

#: A small, fast key type every TLS stack here speaks.
_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def missing_tools() -> str | None:
    """Why TLS broker tests cannot run here, or None when they can."""
    if OPENSSL is None:
        return "the openssl command-line tool is not installed"
    if MOSQUITTO_PASSWD is None:
        return "mosquitto_passwd (Debian's mosquitto package) is not installed"
    return None


@dataclass(frozen=True)
class Authority:
    """A certificate authority: its certificate (what clients trust) and key."""

    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], check=True, capture_output=True)


def make_authority(directory: Path, name: str) -> Authority:
    """A self-signed CA in ``directory``, as ``<name>.crt`` and ``<name>.key``."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl(
        "req", "-x509", "-new", *_KEY, "-days", "1",
        "-keyout", str(key), "-out", str(cert),
        "-subj", f"/CN=wheeld test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return Authority(cert, key)


def make_server_certificate(authority: Authority, directory: Path) -> tuple[Path, Path]:
    """A broker certificate for 127.0.0.1 and localhost signed by ``authority``: (cert, key)."""
    cert, key = directory / "broker.crt", directory / "broker.key"
    _openssl(
        "req", "-x509", "-new", *_KEY, "-days", "1",
        "-CA", str(authority.cert), "-CAkey", str(authority.key),
        "-keyout", str(key), "-out", str(cert),
        "-subj", "/CN=localhost",
        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-addext", "basicConstraints=critical,CA:FALSE",
        "-addext", "keyUsage=critical,digitalSignature",
        "-addext", "extendedKeyUsage=serverAuth",
    )  # fmt: skip
    return cert, key


class TlsBroker(Broker):
    """A mosquitto on a free port with only a TLS listener and ``USERNAME``/``PASSWORD``.

    ``authority`` is the CA that signed its certificate (what clients trust).
    """

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.authority = make_authority(workdir, "ca")
        cert, key = make_server_certificate(self.authority, workdir)
        passwords = workdir / "mosquitto.passwd"
        assert MOSQUITTO_PASSWD is not None
        subprocess.run(
            [MOSQUITTO_PASSWD, "-b", "-c", str(passwords), USERNAME, PASSWORD],
            check=True,
            capture_output=True,
        )
        lines = [
            f"listener {self.port} 127.0.0.1",
            f"cafile {self.authority.cert}",
            f"certfile {cert}",
            f"keyfile {key}",
            "require_certificate false",
            "allow_anonymous false",
            f"password_file {passwords}",
            "persistence false",
        ]
        if os.geteuid() == 0:
            # Started as root, mosquitto becomes user "mosquitto", who cannot read
            # the key and password file in a test's private directory.
            lines.append("user root")
        self.conf.write_text("\n".join(lines) + "\n")

    def client(self, *, password: str = PASSWORD) -> paho.Client:
        """A connected paho client over TLS, trusting the broker's CA, its loop started."""
        client = paho.Client(CallbackAPIVersion.VERSION2)
        client.tls_set(ca_certs=str(self.authority.cert))
        client.username_pw_set(USERNAME, password)
        client.connect("127.0.0.1", self.port, keepalive=5)
        client.loop_start()
        return client
