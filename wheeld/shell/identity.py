"""What is running: software, drivers, wheel, key and configuration, for ``<base>/info``.

A regulator asks which software decided a game (58 Pa. Code 605a.4), and a
consumer asks which key signs it. The retained ``<base>/info`` answers both
from here, and ``wheeld --version`` prints the software's part.

Every digest here is SHA-256 in lowercase hex, as ``sha256sum`` prints it, so
an auditor can recompute each one with stock tools:

- A package's digest is the SHA-256 of its ``sha256sum`` manifest: one line
  ``<hex>  <relative path>\\n`` per regular file under the package directory
  (``*.py`` and package data such as ``py.typed`` and the marquee's static
  files; ``__pycache__`` directories left out, since Python writes them at
  will), sorted by the path's bytes. From the package directory::

      find . -type f -not -path '*/__pycache__/*' -printf '%P\\n' \\
        | LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum

- The configuration's fingerprint is the SHA-256 of the RFC 8785 canonical
  JSON of the configuration in force (file, environment overrides and
  defaults), secrets replaced by ``"<secret>"`` (see :func:`config_public`).

Reading the package costs file reads, so the installed package's digest is
computed once, on first use.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel

    from wheeld.config import Config

DISTRIBUTION = "wheeld"
DRIVER_GROUP = "wheeld.drivers"
#: What a secret's value becomes in the fingerprinted form (``null`` stays ``null``).
SECRET = "<secret>"
#: The wheel's identity, as its hello gives it (``None`` until it has said).
WHEEL_KEYS = ("model", "firmware", "serial", "pockets")


def software_version() -> str:
    """The installed ``wheeld`` distribution's version ("unknown" from a bare source tree)."""
    # Here, not at the top: importlib.metadata costs a start tens of milliseconds that
    # READY does not need (the version is first asked for after it).
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def _package_files(root: Path) -> list[tuple[bytes, Path]]:
    """Every regular file under ``root`` but ``__pycache__``, by relative path (as bytes)."""
    if root.is_file():  # a driver that is a single module, not a package
        return [(os.fsencode(root.name), root)]
    found = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = [name for name in subdirectories if name != "__pycache__"]
        for name in names:
            path = Path(directory, name)
            if path.is_file():
                found.append((os.fsencode(path.relative_to(root).as_posix()), path))
    # By bytes, as `LC_ALL=C sort` orders the manifest.
    return sorted(found)


def _digest_of(root: Path) -> str:
    manifest = hashlib.sha256()
    for relative, path in _package_files(root):
        file_digest = hashlib.sha256(path.read_bytes()).hexdigest()
        manifest.update(file_digest.encode("ascii") + b"  " + relative + b"\n")
    return manifest.hexdigest()


@cache
def _installed_digest(root: Path) -> str:
    return _digest_of(root)


def _installed_root() -> Path:
    return Path(__file__).resolve().parents[1]  # wheeld/, not wheeld/shell/


def package_digest(root: Path | None = None) -> str:
    """SHA-256 (hex) over a package's files, as the module docstring says exactly.

    Without ``root``, the installed ``wheeld`` package, computed once and kept;
    with it, that directory (or single module file), read afresh. Raises OSError
    when a file cannot be read.
    """
    if root is None:
        return _installed_digest(_installed_root())
    return _digest_of(root)


@dataclass(frozen=True, slots=True)
class DriverIdentity:
    """An installed driver: the distribution that provides it, and its package's digest."""

    name: str
    distribution: str | None
    version: str | None
    #: None when its package cannot be found or read (``problem`` says why).
    sha256: str | None
    problem: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"distribution": self.distribution, "version": self.version, "sha256": self.sha256}


def _driver_root(module: str) -> Path | None:
    """The top-level package (or module file) of an entry point's module, not imported."""
    spec = find_spec(module.partition(".")[0])
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve()
    return Path(spec.origin).resolve() if spec.origin else None


@cache
def installed_drivers() -> tuple[DriverIdentity, ...]:
    """Every ``wheeld.drivers`` entry point, by name: who provides it and its code's digest.

    Read from the metadata and the files alone: no driver is imported, so a
    broken one is still named. The WRP/1 driver is in ``wheeld`` itself, so its
    digest is the software's.
    """
    from importlib.metadata import entry_points

    found = []
    for point in sorted(entry_points(group=DRIVER_GROUP), key=lambda point: point.name):
        dist = point.dist
        sha256 = problem = None
        try:
            root = _driver_root(point.module)
            if root is None:
                problem = f"module {point.module!r} not found"
            else:
                sha256 = package_digest(None if root == _installed_root() else root)
        except (ImportError, ValueError, OSError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        found.append(
            DriverIdentity(
                name=point.name,
                distribution=dist.name if dist is not None else None,
                version=dist.version if dist is not None else None,
                sha256=sha256,
                problem=problem,
            )
        )
    return tuple(found)


def software() -> dict[str, str | None]:
    """``{"name", "version", "sha256"}`` of the installed wheeld (sha256 None if unreadable)."""
    try:
        sha256: str | None = package_digest()
    except OSError:
        sha256 = None
    return {"name": DISTRIBUTION, "version": software_version(), "sha256": sha256}


def _public_model(model: BaseModel) -> dict[str, Any]:
    from pydantic import BaseModel

    data = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if not field.repr:  # the marked secrets, mqtt.password among them
            data[name] = None if value is None else SECRET
        elif isinstance(value, BaseModel):
            data[name] = _public_model(value)
    return data


def config_public(config: Config) -> dict[str, Any]:
    """The configuration in force as JSON data, with every secret's value replaced.

    A secret is a field declared ``repr=False`` (so neither a log nor this shows
    it): ``mqtt.password``, which also holds what ``mqtt.password_file`` named.
    Paths stay (``mqtt.password_file``, ``mqtt.tls.key_file``, a signing key's
    file): the files' contents are never part of the configuration. The wheel
    driver's own section appears as its settings model reads it, defaults
    included, its own secrets replaced the same way. Non-finite numbers
    (``min_bet = inf``), which JSON has no form for, become the strings
    ``"Infinity"``, ``"-Infinity"`` and ``"NaN"``.
    """
    from pydantic import ValidationError

    from wheeld.config import driver_settings
    from wheeld.drivers import UnknownDriver, driver_named

    data = _public_model(config)
    try:
        section = driver_named(config.wheel.driver).section
        settings = driver_settings(config)
    except (UnknownDriver, ValidationError):
        section = settings = None  # not in force: load() refuses such a configuration
    if section is not None and settings is not None:
        data["wheel"][section] = _public_model(settings)
    return dict(json.loads(json.dumps(data), parse_constant=str))


def config_fingerprint(config: Config) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical form of :func:`config_public`."""
    import rfc8785

    return hashlib.sha256(rfc8785.dumps(config_public(config))).hexdigest()


def info_payload(
    config: Config,
    *,
    wheel: Mapping[str, Any],
    kid: str | None,
    public_key_pem: str | None,
    now: float,
    epoch: str,
) -> dict[str, Any]:
    """The retained ``<base>/info`` payload, for the journal's ``epoch``.

    ``wheel`` is what the wheel's hello said (``model``, ``firmware``,
    ``serial``, ``pockets``; missing ones are null until it has said).
    ``signing`` is null when the daemon signs nothing, else the key's id and
    its public key (SubjectPublicKeyInfo PEM, as ``signing.pub`` holds it).
    """
    from wheeld.core.messages import SCHEMA_VERSION, iso_utc
    from wheeld.drivers import UnknownDriver, driver_named

    if (kid is None) != (public_key_pem is None):
        raise ValueError("kid and public_key_pem go together: give both or neither")
    try:
        driver = driver_named(config.wheel.driver).name
    except UnknownDriver:
        driver = config.wheel.driver
    return {
        "table": config.table.id,
        "epoch": epoch,
        "software": software(),
        "drivers": {found.name: found.as_dict() for found in installed_drivers()},
        "driver": driver,
        "wheel": {key: wheel.get(key) for key in WHEEL_KEYS},
        "signing": None if kid is None else {"kid": kid, "public_key": public_key_pem},
        "config_sha256": config_fingerprint(config),
        "ts": iso_utc(now),
        "schema_version": SCHEMA_VERSION,
    }


def version_text() -> str:
    """What ``wheeld --version`` prints: the software, then each installed driver."""
    try:
        sha256 = f"sha256 {package_digest()}"
    except OSError as exc:
        sha256 = f"sha256 unavailable: {exc.strerror or exc}"
    lines = [f"{DISTRIBUTION} {software_version()} ({sha256})"]
    for found in installed_drivers():
        provider = f"{found.distribution or '?'} {found.version or '?'}"
        detail = f"sha256 {found.sha256}" if found.sha256 else f"unavailable: {found.problem}"
        lines.append(f"driver {found.name}: {provider} ({detail})")
    return "\n".join(lines) + "\n"
