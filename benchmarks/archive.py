"""The archive at a casino's size: 100 tables into one ``wheeld archive``, and a report out of
10 million messages.

Part 1, the stream: one mosquitto, one ``wheeld archive`` process (a PostgreSQL
database of its own: on the machine's server on 127.0.0.1:5432 when it
answers, fsync on as installed; else a cluster started here). ``--tables``
simulated tables (default 100), each signing and chaining its games as wheeld
does, play at a real table's pace (a game every ``--period`` seconds, default
45: spinning, no_more_bets, result, and the table's stats) for ``--seconds``
(default 60), their games spread over the period; then a burst: every table
sends ``--burst`` messages (default 300) at once. Measured: messages per second
sustained through the burst (the last message published to the last one
committed), the commit latency (a batch's transaction) p50/p99/max as the
archive reports it when it stops, its peak RSS (VmHWM), and that every message
was kept once.

Part 2, the report: ``--messages`` (default 10,000,000) game messages of 100
tables (3,600 a table a day) written straight into a fresh archive database
(the indexes made after the load, as the migrations define them), then
``wheeld archive report`` for one table and one day, timed (first and best of
5), and one game's lookup. The target: under a second.

    python -m benchmarks.archive [--tables 100] [--seconds 60] [--burst 300]
                                 [--messages 10000000] [--skip-stream] [--skip-report]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import psycopg
from paho.mqtt.enums import CallbackAPIVersion

from tests.archive_rig import ArchiveProcess, Databases, PgCluster, machine_server
from wheeld.core.signing import ChainState, Signer, chain
from wheeld.testing.rig import Broker, wait_for


def machine() -> str:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{platform.node()}: {os.cpu_count()} cores ({cpu}), Python {platform.python_version()},"
        f" {platform.platform()}"
    )


def databases() -> tuple[Databases, PgCluster | None, str]:
    server = machine_server()
    if server is not None:
        return server, None, "the machine's PostgreSQL (127.0.0.1:5432, as installed)"
    cluster = PgCluster()
    return Databases(cluster.dsn(), cluster.dsn), cluster, "a cluster started here (fsync off)"


class Table:
    def __init__(self, number: int, port: int) -> None:
        self.id = f"B{number:03d}"
        self.signer = Signer.generate()
        self.state = ChainState()
        self.game = 0
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"bench-{self.id}")
        self.client.max_inflight_messages_set(1000)
        self.client.max_queued_messages_set(0)
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()

    def messages(self, games: int) -> list[tuple[str, str]]:
        out = []
        for _ in range(games):
            self.game += 1
            for event, extra in (
                ("spinning", {"rotor_direction": "cw", "ball_direction": "ccw"}),
                ("no_more_bets", {}),
                ("result", {"number": str(self.game % 37), "color": "red", "revolutions": 9}),
            ):
                body = {
                    "event": event,
                    "game_id": self.game,
                    "table": self.id,
                    "ts": "2026-06-01T12:00:00.000Z",
                    "schema_version": 1,
                    "epoch": "bench",
                    **extra,
                }
                signed, self.state = chain(body, self.state, self.signer)
                out.append((f"wheeld/{self.id}/game", json.dumps(signed, separators=(",", ":"))))
            stats = {"table": self.id, "games": self.game, "schema_version": 1}
            out.append((f"wheeld/{self.id}/stats", json.dumps(stats)))
        return out

    def send(self, messages: list[tuple[str, str]]) -> None:
        for topic, payload in messages:
            self.client.publish(topic, payload, qos=1)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def kept(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM table_stats)"
        ).fetchone()
        return int(row[0]) if row else 0


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stream(args: argparse.Namespace, work: Path, dsn: str) -> dict[str, Any]:
    broker = Broker(work)
    with broker.conf.open("a") as conf:
        # The archive's session must hold a burst while the archive commits (docs/archive.md).
        conf.write("max_queued_messages 1000000\nmax_queued_bytes 0\n")
    broker.start()
    archive = ArchiveProcess(work, dsn=dsn, brokers=[broker.port], trust_on_first_use=False)
    tables = [Table(n, broker.port) for n in range(1, args.tables + 1)]
    keys = work / "keys"
    keys.mkdir()
    lines = archive.config.read_text().splitlines()
    lines.insert(lines.index("[mqtt]"), "[archive.trusted_keys]")
    for table in tables:
        (keys / f"{table.id}.pub").write_bytes(table.signer.public_pem())
        lines.insert(lines.index("[mqtt]"), f'{table.id} = "{keys / table.id}.pub"')
    text = "\n".join(lines).replace('level = "debug"', 'level = "info"') + "\n"
    archive.config.write_text(text)
    archive.start()
    try:
        wait_for(lambda: archive.said("broker connected"), 60, "the archive's connection")
        assert archive.process is not None
        expected = 0
        # Paced: each table plays a game every period, the tables spread over it.
        games = max(1, int(args.seconds / args.period))
        paced = {t.id: t.messages(games) for t in tables}
        print(
            f"paced: {args.tables} tables, a game every {args.period:g} s each, {args.seconds:g} s",
            file=sys.stderr,
        )
        started = time.monotonic()
        order = sorted(
            (
                (g * args.period + i * args.period / len(tables), t, g)
                for i, t in enumerate(tables)
                for g in range(games)
            ),
            key=lambda item: item[0],
        )
        for due, table, game in order:
            delay = started + due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            table.send(paced[table.id][game * 4 : game * 4 + 4])
            expected += 4
        wait_for(lambda: kept(dsn) >= _stored(expected, tables, games), 120, "the paced games")
        # The burst: every table at once.
        burst_games = max(1, args.burst // 4)
        bursts = [t.messages(burst_games) for t in tables]
        before = kept(dsn)
        print(f"burst: {args.tables} x {burst_games * 4} messages", file=sys.stderr)
        sent_at = time.monotonic()
        senders = [
            threading.Thread(target=t.send, args=(m,)) for t, m in zip(tables, bursts, strict=True)
        ]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        game_messages = args.tables * burst_games * 3
        wait_for(lambda: kept(dsn) - before >= game_messages, 1800, "the burst committed")
        burst_s = time.monotonic() - sent_at
        rss = peak_rss_mib(archive.process.pid)
    finally:
        archive.stop()
        for table in tables:
            table.close()
        broker.stop()
    [stopped] = archive.said("archive stopped") or [{}]
    with psycopg.connect(dsn) as conn:
        total = conn.execute("SELECT count(*) FROM messages").fetchone()
        flagged = conn.execute(
            "SELECT count(*) FROM messages WHERE verdict <> 'verified'"
        ).fetchone()
        gaps = conn.execute("SELECT count(*) FROM gaps").fetchone()
    return {
        "messages_per_s": game_messages / burst_s,
        "burst_messages": game_messages,
        "burst_s": burst_s,
        "commit_ms_p50": stopped.get("commit_ms_p50"),
        "commit_ms_p99": stopped.get("commit_ms_p99"),
        "commit_ms_max": stopped.get("commit_ms_max"),
        "batches": stopped.get("batches"),
        "peak_rss_mib": rss,
        "kept": total[0] if total else None,
        "flagged": flagged[0] if flagged else None,
        "gaps": gaps[0] if gaps else None,
        "expected": args.tables * (games + burst_games) * 3,
    }


def _stored(expected: int, tables: list[Table], games: int) -> int:
    """Rows the paced phase leaves: its game messages and one stats row a table (a day)."""
    return len(tables) * games * 3 + len(tables)


LOAD = """
INSERT INTO messages (table_id, epoch, seq, game_id, event, kid, digest, prev, verdict,
    received_at, ts, day, number, reason, source, topic, payload)
SELECT %(table)s, 'bench', s, (s + 2) / 3,
       (ARRAY['spinning', 'no_more_bets', 'result'])[1 + (s - 1) %% 3],
       'kid-bench', md5(%(table)s || s::text) || md5(s::text), md5((s - 1)::text), 'verified',
       at, at, (at AT TIME ZONE 'UTC')::date,
       CASE WHEN s %% 3 = 0 THEN ((s * 7) %% 37)::text END, NULL, 'live',
       'wheeld/' || %(table)s || '/game',
       format('{"event":"result","game_id":%%s,"table":"%%s","ts":"%%s","schema_version":1,'
              '"number":"%%s","color":"red","revolutions":9,"rotor_direction":"cw",'
              '"ball_direction":"ccw","parity":"odd","half":"low","dozen":1,"column":2,'
              '"sectors":["tiers"],"epoch":"bench","seq":%%s,"prev":"%%s","kid":"kid-bench",'
              '"sig":"%%s"}', (s + 2) / 3, %(table)s, at, (s * 7) %% 37, s, md5(s::text),
              md5(s::text) || md5(%(table)s) || md5((s + 1)::text))
FROM generate_series(1, %(count)s) AS s,
     LATERAL (SELECT timestamptz '2025-01-01 00:00:00+00' + s * interval '24 seconds') AS t(at)
"""


def report(args: argparse.Namespace, dsn: str, work: Path) -> dict[str, Any]:
    from wheeld.archive.answers import game as game_of
    from wheeld.archive.answers import report as report_of
    from wheeld.archive.store import migrate
    from wheeld.config import load_archive

    async def prepare() -> None:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        await migrate(conn)
        await conn.close()

    asyncio.run(prepare())
    tables = 100
    per_table = args.messages // tables
    indexes: list[str] = []
    loaded = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The migrations' indexes, dropped for the load and made again after it.
        indexes = [
            row[0]
            for row in conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'messages'"
                " AND indexname NOT IN ('messages_pkey', 'messages_once')"
            )
        ]
        for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'messages'"
            " AND indexname NOT IN ('messages_pkey', 'messages_once')"
        ).fetchall():
            conn.execute(f"DROP INDEX {name}")
        conn.execute("ALTER TABLE messages DROP CONSTRAINT messages_once")
        for number in range(1, tables + 1):
            conn.execute(LOAD, {"table": f"B{number:03d}", "count": per_table})
            if number % 10 == 0:
                print(f"loaded {number * per_table:,} messages", file=sys.stderr)
        conn.execute(
            "ALTER TABLE messages ADD CONSTRAINT messages_once"
            " UNIQUE (table_id, epoch, seq, digest)"
        )
        for definition in indexes:
            conn.execute(definition)
        conn.execute("VACUUM ANALYZE messages")
        size = conn.execute(
            "SELECT pg_size_pretty(pg_database_size(current_database()))"
        ).fetchone()
        total = conn.execute("SELECT count(*) FROM messages").fetchone()
    load_s = time.monotonic() - loaded
    config_file = work / "report.toml"
    config_file.write_text(f'[archive]\ndsn = "{dsn}"\ntables = ["wheeld/+"]\n')
    config = load_archive(config_file, {}).archive
    day = date(2025, 1, 15)
    timings = []
    rows: list[dict[str, Any]] = []
    for _ in range(5):
        started = time.monotonic()
        rows = report_of(config, "B050", day, day)
        timings.append(time.monotonic() - started)
    started = time.monotonic()
    messages = game_of(config, "B050", max(1, per_table // 6))
    game_s = time.monotonic() - started
    return {
        "messages": total[0] if total else None,
        "database": size[0] if size else None,
        "load_s": load_s,
        "report_first_s": timings[0],
        "report_best_s": min(timings),
        "report_median_s": statistics.median(timings),
        "report_day": rows[0] if rows else None,
        "game_s": game_s,
        "game_messages": len(messages),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.archive", description=__doc__)
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--period", type=float, default=45.0)
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--skip-stream", action="store_true")
    parser.add_argument("--skip-report", action="store_true")
    args = parser.parse_args(argv)
    print(machine(), file=sys.stderr)
    made, cluster, where = databases()
    print(f"database: {where}", file=sys.stderr)
    results: dict[str, Any] = {"machine": machine(), "database": where}
    try:
        with tempfile.TemporaryDirectory(prefix="wheeld-bench-archive-") as tmp:
            work = Path(tmp)
            if not args.skip_stream:
                (work / "stream").mkdir()
                results["stream"] = stream(args, work / "stream", made.new())
                print(json.dumps(results["stream"]), file=sys.stderr)
            if not args.skip_report:
                results["report"] = report(args, made.new(), work)
    finally:
        made.drop_all()
        if cluster is not None:
            cluster.destroy()
    stream_ = results.get("stream")
    report_ = results.get("report")
    print("| target | result | met? |\n|---|---|---|")
    if stream_:
        print(
            f"| {args.tables} tables and a burst: messages/s sustained |"
            f" {stream_['messages_per_s']:,.0f}"
            f" game messages/s ({stream_['burst_messages']:,} in {stream_['burst_s']:.1f} s),"
            f" {stream_['kept']:,} kept of {stream_['expected']:,}, {stream_['gaps']} gaps |"
            f" {'yes' if stream_['kept'] == stream_['expected'] else 'no'} |"
        )
        print(
            f"| commit latency p99 | {stream_['commit_ms_p99']} ms (p50"
            f" {stream_['commit_ms_p50']} ms, max {stream_['commit_ms_max']} ms,"
            f" {stream_['batches']} batches) | - |"
        )
        print(f"| memory | peak RSS {stream_['peak_rss_mib']:.0f} MiB | - |")
    if report_:
        met = report_["report_first_s"] < 1
        print(
            f"| one table, one day, out of {report_['messages']:,} messages: under 1 s |"
            f" first {report_['report_first_s'] * 1000:.0f} ms, best"
            f" {report_['report_best_s'] * 1000:.0f} ms ({report_['database']}, loaded in"
            f" {report_['load_s']:.0f} s); a game: {report_['game_s'] * 1000:.0f} ms |"
            f" {'yes' if met else 'no'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
