"""The distributions: the sdist is the whole project (its tests run from it), the
wheel is the wheeld package alone, both under the MIT licence in LICENSE.

Built as `pip` would, but without network: with the virtualenv's own setuptools
(`--no-isolation`), the wheel from the unpacked sdist, so the sdist is shown to build.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

#: What the sdist must carry besides the wheeld package: everything under these.
PROJECT_DIRS = (
    "tests",
    "systemd",
    "config",
    "docs",
    "benchmarks",
    "tools",
    "simulators",
    "drivers",
)
#: Build and run leftovers that never belong in a distribution.
LEFTOVERS = ("__pycache__", ".pyc", ".sqlite3", ".hypothesis", "fuzz-failures")


def _project_files() -> list[str]:
    """The files under PROJECT_DIRS as the repository has them (git's list when there is one)."""
    git = shutil.which("git")
    if git is not None and (ROOT / ".git").exists():
        listing = subprocess.run(
            [git, "ls-files", "-z", "--", *PROJECT_DIRS],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        return sorted(name for name in listing.split("\0") if name and (ROOT / name).is_file())
    files = []
    for top in PROJECT_DIRS:
        for path in (ROOT / top).rglob("*"):
            name = path.relative_to(ROOT).as_posix()
            if path.is_file() and ".egg-info" not in name and not _leftover(name):
                files.append(name)
    return sorted(files)


def _leftover(name: str) -> bool:
    return any(part in name for part in LEFTOVERS)


#: What is not the project in a working tree: build it from a copy without these.
NOT_THE_PROJECT = shutil.ignore_patterns(
    ".git",
    ".venv",
    "venv",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    "build",
    "dist",
    "artifacts",
    "fuzz-failures",
    "*.sqlite3*",
)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # From a copy: setuptools rewrites <project>/wheeld.egg-info as it builds, and
    # with the checkout on sys.path other tests running beside this one read the
    # drivers' entry points from there.
    source = tmp_path_factory.mktemp("checkout") / "wheeld"
    shutil.copytree(ROOT, source, ignore=NOT_THE_PROJECT, symlinks=True)
    out = tmp_path_factory.mktemp("sdist")
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])",
            str(out),
        ],
        cwd=source,
        capture_output=True,
        check=True,
        timeout=120,
    )
    (archive,) = out.glob("wheeld-*.tar.gz")
    return archive


@pytest.fixture(scope="module")
def sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as archive:
        top = sdist.name.removesuffix(".tar.gz") + "/"
        return {member.name.removeprefix(top) for member in archive.getmembers() if member.isfile()}


@pytest.fixture(scope="module")
def wheel(sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    unpacked = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as archive:
        archive.extractall(unpacked, filter="data")
    (source,) = unpacked.iterdir()
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        capture_output=True,
        check=True,
        timeout=180,
    )
    (built,) = out.glob("wheeld-*.whl")
    return built


def test_sdist_carries_the_whole_project(sdist_names: set[str]) -> None:
    expected = _project_files()
    assert "tests/keys/test-signing.key" in expected  # the list is the real one
    assert any(name.startswith("tests/captures/") for name in expected)
    missing = [name for name in expected if name not in sdist_names]
    assert not missing, missing
    for name in ("LICENSE", "README.md", "pyproject.toml", "MANIFEST.in", "wheeld/cli.py"):
        assert name in sdist_names, name


def test_sdist_has_no_leftovers(sdist_names: set[str]) -> None:
    # setuptools' own wheeld.egg-info is the one egg-info an sdist carries.
    stray = [
        name
        for name in sdist_names
        if _leftover(name) or (".egg-info/" in name and not name.startswith("wheeld.egg-info/"))
    ]
    assert not stray, stray


def test_sdist_metadata_names_the_licence(sdist: Path) -> None:
    with tarfile.open(sdist) as archive:
        member = archive.extractfile(sdist.name.removesuffix(".tar.gz") + "/PKG-INFO")
        assert member is not None
        metadata = email.parser.BytesParser().parse(member)
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert "Copyright (c) 2026 the wheeld authors" in (ROOT / "LICENSE").read_text()


def test_wheel_holds_wheeld_alone(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    dist_info = wheel.name.split("-py3")[0] + ".dist-info"
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"wheeld", dist_info}, tops
    assert f"{dist_info}/licenses/LICENSE" in names
    # What the daemon reads at run time comes with it; no test, simulator or driver code.
    assert "wheeld/py.typed" in names
    assert any(name.startswith("wheeld/followers/marquee/static/") for name in names)
    assert not [name for name in names if _leftover(name)]


def test_version_is_printed() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "wheeld", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    version = importlib.metadata.version("wheeld")
    assert out.stdout.startswith(f"wheeld {version} (sha256 "), out.stdout
