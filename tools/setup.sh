#!/usr/bin/env bash
# Prepare a fresh Debian machine (Python 3.11) to run wheeld from this checkout:
# the Debian packages the tests and the demo need, and a virtual environment in .venv.
# Sourced by tools/test.sh and tools/demo.sh; safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)  # the unit tests
command -v chromium >/dev/null 2>&1 || missing+=(chromium)         # the marquee's browser tests
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)       # the chaos suite's clock steps
# The cluster tests (tests/cluster/): three nats-server nodes, three RabbitMQ nodes (Erlang
# comes with the package; the MQTT plugin is part of it, enabled in each test's own
# nodes through their RABBITMQ_ENABLED_PLUGINS_FILE, never in the machine's RabbitMQ).
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || missing+=(nats-server)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || missing+=(rabbitmq-server)
# The archive's tests (tests/test_archive_*.py) start PostgreSQL clusters of their own
# with the package's initdb and pg_ctl; the benchmark uses the machine's server.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]} from Debian" >&2
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The machine's PostgreSQL, started when it is installed but down (a fresh machine, a
# container without an init): best effort, the tests do not need it.
if command -v pg_lsclusters >/dev/null 2>&1; then
    pg_lsclusters --no-header 2>/dev/null | while read -r version cluster _ status _; do
        if [ "$status" = down ]; then
            sudo_if_needed pg_ctlcluster "$version" "$cluster" start >/dev/null 2>&1 \
                || echo "setup: PostgreSQL $version/$cluster would not start (the tests start their own)" >&2
        fi
    done
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
# wheeld, the simulators and demo (their own distribution, wheeld-simulators), and
# the Cammegh SS2 driver (its own distribution, wheeld-cammegh).
stamp=.venv/.installed-$(cat pyproject.toml simulators/pyproject.toml drivers/cammegh/pyproject.toml | sha1sum | cut -c1-12)
if [ ! -e "$stamp" ]; then
    echo "setup: installing wheeld, its driver and simulators into .venv (a minute or two, once)" >&2
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    # setuptools says "Editable installation ... Please be careful with folders in your
    # working directory" once per distribution: information, not a problem, and ten lines
    # each on a first run. Hidden by its own words; every other warning still shows.
    PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install -q \
        -e '.[test]' -e ./drivers/cammegh -e './simulators[cammegh]'
    rm -f .venv/.installed-* && touch "$stamp"
fi

# Where Python is told not to write bytecode (PYTHONDONTWRITEBYTECODE, as on the CI
# machine), every daemon, archive and command the tests start would compile this
# checkout from source again: about 0.13 s of CPU each, hundreds of times a suite.
# Compiled here once (a source changed since is compiled again: its timestamp).
# -q: only what does not compile is printed (and then setup fails, saying which).
.venv/bin/python -m compileall -q -j 0 wheeld drivers simulators tests benchmarks
