"""What building the daemon costs on its way to READY: modules and file reads it does not need."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from wheeld.testing.rig import free_port, write_config

_BUILT = """
import json, sys
from pathlib import Path
from wheeld.config import load
from wheeld.shell import identity
from wheeld.shell.daemon import Daemon
daemon = Daemon(load(Path(sys.argv[1])))
daemon.journal.close()
pools = ("multiprocessing", "concurrent.futures.process")
print(json.dumps({
    "modules": sorted(m for m in pools if m in sys.modules),
    "digests_read": identity._installed_digest.cache_info().currsize,
}))
"""


def test_building_the_daemon_neither_reads_the_package_nor_imports_an_exports_pool(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path / "c.toml", port=tmp_path / "nope", broker=free_port(), state=tmp_path / "state"
    )
    done = subprocess.run(
        [sys.executable, "-c", _BUILT, str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    built = json.loads(done.stdout)
    # multiprocessing is for `wheeld export`'s worker processes; a recall reads in a thread.
    assert built["modules"] == []
    # The package's digest is read for <base>/info, after READY (tests/test_jobs.py).
    assert built["digests_read"] == 0
