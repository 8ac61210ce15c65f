"""``wheeld archive`` end to end: a real mosquitto (two for the failover), a real PostgreSQL
(a cluster the tests start, or a database of their own on the machine's server), a
scripted table that signs, chains and answers ``recall``, and the archive as a process."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.archive_rig import (
    ArchiveProcess,
    Databases,
    ScriptedTable,
    answer,
    archiving,
    count,
    own_cluster,
    query,
    run_cli,
)
from wheeld.archive.ledger import Ledger
from wheeld.archive.records import Outcome
from wheeld.archive.schema import ARCHIVE_LOCK
from wheeld.core.signing import Signer
from wheeld.testing.rig import Broker, Subscriber, free_port, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def table(broker: Broker) -> Iterator[ScriptedTable]:
    scripted = ScriptedTable(broker.port, table="T1")
    yield scripted
    scripted.close()


def keys_dir(tmp_path: Path, table: ScriptedTable) -> Path:
    path = tmp_path / "T1.pub"
    path.write_bytes(table.signer.public_pem())
    return path


def kept(dsn: str, verdict: str = "verified") -> list[int]:
    rows = query(dsn, "SELECT seq FROM messages WHERE verdict = %s ORDER BY seq", verdict)
    return [row[0] for row in rows]


def wait_kept(dsn: str, seqs: list[int], timeout: float = 30, what: str = "") -> None:
    wait_for(lambda: kept(dsn) == seqs, timeout, what or f"seqs {seqs} kept verified")


def archive_of(
    tmp_path: Path, dsn: str, brokers: list[int], table: ScriptedTable, **settings: Any
) -> ArchiveProcess:
    return ArchiveProcess(
        tmp_path,
        dsn=dsn,
        brokers=brokers,
        trusted_keys={"T1": keys_dir(tmp_path, table)},
        **settings,
    )


def commit_directly(dsn: str, outcome: Outcome, book: Ledger) -> None:
    """The schema made and one outcome committed, with no service running."""
    import asyncio

    from wheeld.archive import store

    async def keep() -> None:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:
            await store.migrate(conn)
            await store.commit(conn, outcome, book)
        finally:
            await conn.close()

    asyncio.run(keep())


def archived_alarms(dsn: str) -> list[dict[str, Any]]:
    rows = query(dsn, "SELECT payload FROM archive_alarms ORDER BY id")
    return [json.loads(row[0]) for row in rows]


def test_games_are_kept_verified_and_answered(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")
        table.publish_info()
        table.play("17")
        table.play("0")
        table.void("ball_out")
        table.send(
            {
                "alarm": "cover_open",
                "state": "set",
                "table": "T1",
                "ts": "2026-01-02T10:00:00.000Z",
            },
            topic="wheeld/T1/alarm",
        )
        table.send({"table": "T1", "games": 3}, topic="wheeld/T1/stats")
        wait_kept(dsn, list(range(1, 9)))
        wait_for(lambda: count(dsn, "SELECT count(*) FROM table_stats"), 10, "the stats kept")
    config = archive.config
    verified = run_cli("archive", "verify", "--config", config)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "T1 epoch" in verified.stdout and verified.stdout.strip().endswith("intact")
    report = answer(
        "archive",
        "report",
        "--config",
        config,
        "--table",
        "T1",
        "--from",
        "2026-01-02",
        "--to",
        "2026-01-02",
    )
    assert report.returncode == 0, report.stderr
    [day] = json.loads(report.stdout)["days"]
    assert (day["games"], day["results"], day["no_spins"]) == (3, 2, 1)
    assert day["numbers"] == {"17": 1, "0": 1} and day["no_spin_reasons"] == {"ball_out": 1}
    assert day["table_alarms"] == {"cover_open": 1}
    csv = answer(
        "archive",
        "report",
        "--config",
        config,
        "--table",
        "T1",
        "--from",
        "2026-01-02",
        "--to",
        "2026-01-03",
        "--format",
        "csv",
    )
    assert csv.stdout.splitlines()[1].startswith("T1,2026-01-02,3,2,1,8,")
    game = answer("archive", "game", "--config", config, "--table", "T1", "--game", "2")
    lines = [json.loads(line) for line in game.stdout.splitlines()]
    assert [(m["event"], m["verdict"]) for m in lines] == [
        ("spinning", "verified"),
        ("no_more_bets", "verified"),
        ("result", "verified"),
    ]
    assert lines[2]["payload"] == table.journal[5].payload  # kept as published
    assert query(dsn, "SELECT number FROM results ORDER BY game_id") == [("17",), ("0",)]
    assert query(dsn, "SELECT games, results, no_spins, flagged FROM daily_summary") == [
        (3, 2, 1, 0)
    ]
    missing = answer("archive", "game", "--config", config, "--table", "T1", "--game", "99")
    assert missing.returncode == 1
    assert (
        missing.stderr.strip()
        == "wheeld archive: no message of game 99 of table 'T1' in the archive"
    )


def test_a_bad_signature_is_kept_flagged_and_alarmed(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    alarms = Subscriber(broker.port, archive.alarm_topic)
    try:
        with archiving(archive):
            wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")
            first, second, third = table.play("17", publish=False)
            table.send(first)
            table.send({**second, "event": "no_spin"})  # altered on the way
            table.send(second)
            table.send(third)
            wait_kept(dsn, [1, 2, 3])
            alarm = alarms.wait(archive.alarm_topic, lambda a: a["alarm"] == "bad_signature")
        assert (alarm["table"], alarm["seq"], alarm["why"]) == ("T1", 2, "bad signature")
        assert kept(dsn, "bad_signature") == [2]
        verified = answer("archive", "verify", "--config", archive.config)
        assert verified.returncode == 0, verified.stdout
    finally:
        alarms.close()


def test_a_message_under_an_unknown_key_is_kept_flagged_and_alarmed(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    alarms = Subscriber(broker.port, archive.alarm_topic)
    stranger = ScriptedTable(broker.port, table="T1", signer=Signer.generate())
    try:
        with archiving(archive):
            wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")
            stranger.play("5")
            table.play("6")
            alarm = alarms.wait(archive.alarm_topic, lambda a: a["alarm"] == "unknown_key")
            wait_for(lambda: len(kept(dsn, "unknown_key")) == 3, 30, "three flagged")
            wait_kept(dsn, [1, 2, 3])
        assert alarm["kid"] == stranger.signer.kid
        today = datetime.now(UTC).date().isoformat()  # the archive's alarms: when raised
        report = answer(
            "archive",
            "report",
            "--config",
            archive.config,
            "--table",
            "T1",
            "--from",
            "2026-01-02",
            "--to",
            today,
        )
        days = json.loads(report.stdout)["days"]
        assert days[0]["flagged"] == {"unknown_key": 3} and days[0]["results"] == 1
        assert [d["archive_alarms"] for d in days if d["archive_alarms"]] == [{"unknown_key": 1}]
    finally:
        stranger.close()
        alarms.close()


def test_trust_on_first_use_pins_the_key_from_info(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    archive = ArchiveProcess(tmp_path, dsn=dsn, brokers=[broker.port], trust_on_first_use=True)
    with archiving(archive):
        wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")
        table.play("3")  # before the info: kept, judged once the key is pinned
        table.publish_info()
        table.play("4")
        wait_kept(dsn, list(range(1, 7)))
    assert query(dsn, "SELECT table_id, kid FROM pinned_keys") == [("T1", table.signer.kid)]


def test_a_message_delivered_twice_is_kept_once_even_across_a_crash(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")
        sent = table.play("8")
        for message in sent:
            table.send(message)  # each said again (a table's redelivery)
        wait_kept(dsn, [1, 2, 3])
        archive.kill()  # SIGKILL: what it had not acknowledged, the broker sends again
        more = table.play("9")
        table.send(more[0])
        archive.start()
        wait_kept(dsn, [1, 2, 3, 4, 5, 6])
    assert count(dsn, "SELECT count(*) FROM messages") == 6
    assert count(dsn, "SELECT count(*) FROM gaps") == 0


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
def test_a_gap_is_filled_by_recall(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str, protocol: str
) -> None:
    """MQTT 5 asks with a response topic, 3.1.1 with reply_to: either is answered."""
    archive = archive_of(tmp_path, dsn, [broker.port], table, protocol=protocol)
    with archiving(archive):
        wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")
        table.play("1")
        table.play("2", publish=False)  # lost on the way
        table.play("3", publish=False)
        table.play("4")
        wait_kept(dsn, list(range(1, 13)), timeout=60, what="the gap filled by recall")
        assert table.recalls and table.recalls[0]["reply_to"].startswith("wheeld-replies/")
        assert query(dsn, "SELECT DISTINCT source FROM messages WHERE seq BETWEEN 4 AND 9") == [
            ("recall",)
        ]
    assert count(dsn, "SELECT count(*) FROM gaps") == 0
    gaps = answer("archive", "gaps", "--config", archive.config)
    assert (gaps.returncode, gaps.stdout) == (0, "")
    assert answer("archive", "verify", "--config", archive.config).returncode == 0
    codes = [a["alarm"] for a in archived_alarms(dsn)]
    assert codes == ["gap", "gap_filled"]


def test_a_gap_the_table_cannot_fill_stays_listed(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    table.remembers = False  # its journal no longer holds them
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")
        table.play("1")
        table.play("2", publish=False)
        table.play("3")
        wait_for(lambda: query(dsn, "SELECT state FROM gaps") == [("unfillable",)], 60, "given up")
    gaps = answer("archive", "gaps", "--config", archive.config)
    assert gaps.returncode == 0
    assert gaps.stdout.startswith(
        f"T1 epoch {table.epoch}: seq 4-6 (3 missing, games 1-3): unfillable"
    )
    verified = answer("archive", "verify", "--config", archive.config)
    assert verified.returncode == 0 and "1 known problem" in verified.stdout


def test_nothing_is_lost_when_the_database_restarts_mid_stream(
    tmp_path: Path, broker: Broker, table: ScriptedTable
) -> None:
    cluster = own_cluster()
    if cluster is None:
        pytest.skip("no PostgreSQL cluster of the test's own to restart (initdb)")
    try:
        databases = Databases(cluster.dsn(), cluster.dsn)
        dsn = databases.new()
        archive = archive_of(tmp_path, dsn, [broker.port], table)
        with archiving(archive):
            wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")
            table.play("1")
            wait_kept(dsn, [1, 2, 3])
            cluster.stop()
            for number in ("2", "3", "4"):
                table.play(number)  # the archive holds these, unacknowledged
            wait_for(
                lambda: archive.said("database unavailable: holding messages unacknowledged"),
                30,
                "the archive to see the database go",
            )
            cluster.start()
            wait_kept(dsn, list(range(1, 13)), timeout=90, what="every message after the restart")
            wait_for(lambda: archive.said("database back"), 30, "the database back")
            # Held, unacknowledged, when the archive dies: the broker has them still.
            cluster.stop()
            table.play("5")
            wait_for(
                lambda: (
                    len(archive.said("database unavailable: holding messages unacknowledged")) == 2
                ),
                30,
                "the archive to see the database go again",
            )
            archive.kill()
            cluster.start()
            archive.start()
            wait_kept(dsn, list(range(1, 16)), timeout=90, what="what the killed archive held")
        assert count(dsn, "SELECT count(*) FROM messages") == 15
        assert count(dsn, "SELECT count(*) FROM gaps") == 0
    finally:
        cluster.destroy()


def test_nothing_is_lost_when_the_broker_fails_over_mid_stream(tmp_path: Path, dsn: str) -> None:
    primary_dir, standby_dir = tmp_path / "a", tmp_path / "b"
    primary_dir.mkdir()
    standby_dir.mkdir()
    primary, standby = Broker(primary_dir), Broker(standby_dir)
    primary.start()
    standby.start()
    table = ScriptedTable(primary.port, table="T1")
    try:
        archive = archive_of(tmp_path, dsn, [primary.port, standby.port], table)
        with archiving(archive):
            wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")
            table.play("1")
            wait_kept(dsn, [1, 2, 3])
            primary.stop()
            table.move_to(standby.port)
            table.play("2")  # said before the archive is there: missing, then recalled
            wait_for(lambda: len(archive.said("broker connected")) >= 2, 30, "the failover")
            table.play("3")
            wait_kept(dsn, list(range(1, 10)), timeout=90, what="every message after failover")
        assert count(dsn, "SELECT count(*) FROM gaps") == 0
        assert answer("archive", "verify", "--config", archive.config).returncode == 0
    finally:
        table.close()
        primary.stop()
        standby.stop()


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "archive.toml"
    config.write_text('[archive]\ndsn = "host=x"\ntables = ["wheeld/#"]\n')
    out = run_cli("archive", "--config", config)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
    assert "archive.tables: entry 1 ('wheeld/#')" in out.stderr
    port = free_port()  # nobody listens there
    config.write_text(
        f'[archive]\ndsn = "host=127.0.0.1 port={port} dbname=x user=x"\ntables = ["wheeld/+"]\n'
    )
    out = run_cli("archive", "--config", config)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("wheeld archive: archive.dsn: ")
    out = answer("archive", "gaps", "--config", config)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert answer("archive", "gaps").stderr.strip() == "wheeld archive: --config FILE is required"


def test_topics_that_cannot_work_are_refused(tmp_path: Path) -> None:
    """tables = ["+"] follows +/alarm: the archive's own alarms would come back as a
    table's, flagged and alarmed again, for ever. A client id is a level of the reply
    topic: a '+' there would follow every archive's replies."""
    config = tmp_path / "archive.toml"
    config.write_text('[archive]\ndsn = "host=x"\ntables = ["wheeld/+", "+"]\n')
    out = run_cli("archive", "--config", config)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert (
        "archive.alarm_topic: 'wheeld-archive/alarm' is one of the topics the archive follows"
        " (+/alarm): it would read its own alarms back" in out.stderr
    )
    config.write_text('[archive]\ndsn = "host=x"\ntables = ["wheeld/+"]\nclient_id = "a/+"\n')
    out = run_cli("archive", "--config", config)  # a level of its reply topic
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "archive.client_id: must be a non-empty MQTT topic level" in out.stderr


def test_what_the_database_refuses_is_told_apart_from_its_absence(dsn: str) -> None:
    """A batch the database will not take (not an outage) raises Unstorable: the service
    then keeps each message alone, and one still refused as rejected bytes."""
    import asyncio
    import dataclasses

    from tests.test_archive_ledger import Table, ledger, received
    from wheeld.archive import store
    from wheeld.archive.records import Outcome

    book = ledger()
    out = book.feed(received(Table().messages(1)[0]))
    broken = Outcome(games=[dataclasses.replace(out.games[0], day="not a day")])

    async def attempt() -> str:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:
            await store.migrate(conn)
            with pytest.raises(store.Unstorable) as refused:
                await store.commit(conn, broken, book)
            await store.commit(conn, out, book)  # the connection is still good
            return str(refused.value)
        finally:
            await conn.close()

    assert "date" in asyncio.run(attempt())
    assert kept(dsn) == [1]


def test_verify_finds_an_altered_message_among_thousands(tmp_path: Path, dsn: str) -> None:
    """Past a batch, signatures are checked in worker processes: the finding is the same."""
    from tests.test_archive_ledger import SIGNER, Table, ledger, received
    from wheeld.archive import answers
    from wheeld.config import load_archive

    book = ledger()
    batch = Outcome()
    for payload in Table().messages(1200):
        batch.extend(book.feed(received(payload)))

    commit_directly(dsn, batch, book)
    (tmp_path / "T1.pub").write_bytes(SIGNER.public_pem())
    config_file = tmp_path / "archive.toml"
    config_file.write_text(
        f'[archive]\ndsn = "{dsn}"\ntables = ["wheeld/+"]\n'
        f'[archive.trusted_keys]\nT1 = "{tmp_path / "T1.pub"}"\n'
    )
    config = load_archive(config_file, {}).archive
    [intact] = list(answers.verify(config))
    assert (intact.checked, intact.findings, intact.known) == (1200, [], 0)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE messages SET payload = (payload::jsonb || %s::jsonb)::text WHERE seq = 1000",
            ('{"number": "36"}',),
        )
    [altered] = list(answers.verify(config))
    assert len(altered.findings) == 1 and altered.findings[0].startswith("seq 1000")
    assert "bad signature" in altered.findings[0]
    out = answer("archive", "verify", "--config", config_file)
    assert out.returncode == 1 and out.stdout.strip().endswith("1 finding(s)")


# -- attacked --------------------------------------------------------------------------------


def connected(archive: ArchiveProcess) -> None:
    wait_for(lambda: archive.said("broker connected"), 30, "the archive's connection")


def test_a_forged_recall_reply_gives_no_gap_up(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    table.answers = False  # slow to answer: the forger is first
    archive = archive_of(tmp_path, dsn, [broker.port], table, recall_timeout_s=60.0)
    with archiving(archive):
        connected(archive)
        table.play("1")
        table.play("2", publish=False)
        table.play("3")
        wait_for(lambda: table.recalls, 30, "the recall asked")
        reply_topic = table.recalls[0]["reply_to"]
        for n in range(1, 20):  # whoever may write the reply topic guesses the id
            forged = {"ok": True, "games": [], "correlation_id": f"archive-{n}"}
            table.send(json.dumps(forged).encode(), topic=reply_topic)
        wait_for(lambda: archive.said("recall reply to no recall pending: ignored"), 30, "read")
        assert query(dsn, "SELECT state FROM gaps") == [("open",)]
        table.answer(table.recalls[0])  # the table's own answer, to the id it was given
        wait_kept(dsn, list(range(1, 10)), timeout=60, what="the gap filled by the table")


def test_a_message_under_another_base_does_not_move_the_tables_recalls(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        connected(archive)
        first = table.play("1")
        table.play("2", publish=False)
        table.play("3")
        # Someone with publish rights under another base, just after the table: a forged
        # message, a replay of a real one, an info: the recall must still go to the table.
        table.send({**first[0], "event": "no_spin"}, topic="wheeld/EVIL/game")
        table.send(first[1], topic="wheeld/EVIL/game")
        table.send(
            {"table": "T1", "ts": "2026-01-02T10:00:00.000Z", "schema_version": 1},
            topic="wheeld/EVIL/info",
        )
        wait_kept(dsn, list(range(1, 10)), timeout=60, what="the gap filled by recall")
    assert kept(dsn, "bad_signature") == [1]
    assert query(dsn, "SELECT base_topic FROM archive_tables WHERE table_id = 'T1'") == [
        ("wheeld/T1",)
    ]


def test_a_second_archive_on_the_same_database_stops_in_one_line(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    """Two archives on one database would each write their own view of every epoch and
    gap over the other's, and take each other's broker session, back and forth."""
    first = archive_of(tmp_path, dsn, [broker.port], table)
    (tmp_path / "second").mkdir()
    second = archive_of(tmp_path / "second", dsn, [broker.port], table)
    second.config.write_text(first.config.read_text())  # the same configuration
    with archiving(first):
        connected(first)
        second.start()
        assert second.process is not None and second.process.wait(30) == 1
        assert second.logs().strip().splitlines()[-1] == (
            "wheeld archive: archive.dsn: another archive is running on this database (it"
            " holds the archive's advisory lock): one archive a database"
        )
        table.play("1")
        wait_kept(dsn, [1, 2, 3])
        # Its connection lost, the database taken meanwhile by another: it stops, in one line.
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            other.execute("SELECT pg_advisory_lock(%s)", (ARCHIVE_LOCK,))
            table.play("2")
            assert first.process is not None and first.process.wait(60) == 1
        assert (
            first.logs()
            .strip()
            .splitlines()[-1]
            .startswith("wheeld archive: archive.dsn: another archive is running on this database")
        )
    assert kept(dsn) == [1, 2, 3]


def test_messages_under_a_key_installed_later_are_verified_at_the_restart(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    """docs: "To accept a table's new key, install its file in trusted_keys and restart the
    archive": what came under it before is judged again, and a recall of it is kept."""
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        connected(archive)
        table.play("1")
        table.signer = Signer.generate()  # the table's key rotated
        table.play("2")
        wait_for(lambda: kept(dsn, "unknown_key") == [4, 5, 6], 30, "flagged")
        wait_kept(dsn, [1, 2, 3])
    new_key = tmp_path / "T1-new.pub"
    new_key.write_bytes(table.signer.public_pem())
    text = archive.config.read_text()
    old_line = f"T1 = {json.dumps(str(tmp_path / 'T1.pub'))}"
    assert old_line in text
    archive.config.write_text(
        text.replace(old_line, f'T1 = [{json.dumps(str(tmp_path / "T1.pub"))}, "{new_key}"]')
    )
    with archiving(archive):
        connected(archive)
        wait_kept(dsn, list(range(1, 7)), what="judged again at the start")
        table.play("3")
        wait_kept(dsn, list(range(1, 10)))
    assert count(dsn, "SELECT count(*) FROM messages") == 9
    assert count(dsn, "SELECT count(*) FROM gaps") == 0
    assert answer("archive", "verify", "--config", archive.config).returncode == 0


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xff\xfe not utf-8", b"not json", b"[1, 2]", b"[" * 100_000, b"x" * 10_000_000],
    ids=["empty", "not-utf8", "not-json", "not-object", "deep", "10MB"],
)
def test_garbage_on_every_topic_is_counted_and_kept_bounded(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str, payload: bytes
) -> None:
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        connected(archive)
        table.play("1")
        table.play("2", publish=False)
        for kind in ("game", "alarm", "info", "stats"):
            table.send(payload, topic=f"wheeld/T1/{kind}")
        reply_topic = f"wheeld-replies/{archive.client_id}/recall"
        table.send(payload, topic=reply_topic)
        table.play("3")
        wait_kept(dsn, list(range(1, 10)), timeout=60, what="the gap filled all the same")
        wait_for(lambda: count(dsn, "SELECT count(*) FROM rejected") == 4, 30, "4 rejected")
        assert archive.process is not None and archive.process.poll() is None
    rows = query(dsn, "SELECT octet_length(payload), size FROM rejected")
    assert rows == [(min(len(payload), 64 * 1024), len(payload))] * 4
    assert len(archive.said("message rejected")) == 4
    assert "Traceback" not in archive.logs()


def test_statistics_under_a_huge_topic_level_do_not_stall_the_archive(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    """<base>/stats names its table by the base's last level: one longer than any table id
    must not become a key PostgreSQL's index refuses (a batch retried for ever)."""
    level = secrets.token_urlsafe(6000)  # 8000 characters: no table id, no index row
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        connected(archive)
        table.send({"games": 1}, topic=f"wheeld/{level}/stats")
        table.play("1")
        wait_kept(dsn, [1, 2, 3])
        wait_for(lambda: count(dsn, "SELECT count(*) FROM rejected") == 1, 30, "rejected")
    assert query(dsn, "SELECT reason FROM rejected") == [
        ("no table (a string of 1 to 128 characters)",)
    ]
    assert "database unavailable" not in archive.logs()


def test_a_message_the_database_cannot_index_is_rejected_not_retried_for_ever(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    """PostgreSQL refuses an index row over some 2.7 kB (an OperationalError): a forged
    message with a huge kid must not hold the archive as if the database were away."""
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        connected(archive)
        first = table.play("1", publish=False)
        table.send({**first[0], "kid": secrets.token_urlsafe(6000)})
        for message in first:
            table.send(message)
        wait_kept(dsn, [1, 2, 3])
        wait_for(lambda: count(dsn, "SELECT count(*) FROM rejected") == 1, 30, "rejected")
    [(reason,)] = query(dsn, "SELECT reason FROM rejected")
    assert reason.startswith("not storable: index row size")
    assert "database unavailable" not in archive.logs()


def test_answers_to_odd_questions_are_one_line(tmp_path: Path, dsn: str) -> None:
    """An unknown table, a schema behind this wheeld's, a database that fails mid-answer:
    one line each, never a traceback, never an empty report that reads as a quiet table."""
    from tests.test_archive_ledger import Table, ledger, received

    book = ledger()
    out = book.feed(received(Table().messages(1)[0]))

    commit_directly(dsn, out, book)
    config = tmp_path / "archive.toml"
    config.write_text(f'[archive]\ndsn = "{dsn}"\ntables = ["wheeld/+"]\n')
    day = ("--from", "2026-03-04", "--to", "2026-03-04")
    known = answer("archive", "report", "--config", config, "--table", "T1", *day)
    assert known.returncode == 0 and json.loads(known.stdout)["days"][0]["results"] == 1
    typo = answer("archive", "report", "--config", config, "--table", "t1", *day)
    assert (typo.returncode, typo.stderr) == (
        1,
        "wheeld archive: no table 't1' in the archive (tables: T1)\n",
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM archive_migrations WHERE version > 1")
    behind = answer("archive", "gaps", "--config", config)
    assert behind.returncode == 1 and behind.stderr.startswith(
        "wheeld archive: the archive's schema lacks migration(s) 2 (run `wheeld archive`"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO archive_migrations VALUES (2, 'back')")
        conn.execute("ALTER TABLE gaps RENAME TO gaps_elsewhere")  # not the archive's any more
    for action in (["gaps"], ["verify"]):
        broken = answer("archive", *action, "--config", config)
        assert broken.returncode == 1, broken.stdout
        assert broken.stderr.startswith('wheeld archive: archive.dsn: relation "gaps"')
        assert len(broken.stderr.splitlines()) == 1, broken.stderr


def test_a_recall_reply_with_a_message_no_table_could_send_is_survived(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    """A reply's message holding a lone surrogate ("\\ud800": JSON, but no UTF-8) ended
    the archive; the rest of the reply fills the gap all the same."""
    table.answers = False
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        connected(archive)
        table.play("1")
        lost = table.play("2", publish=False)
        table.play("3")
        wait_for(lambda: table.recalls, 30, "the recall asked")
        command = table.recalls[0]
        games = [{"game_id": 2, "messages": [{"table": "T1", "seq": 5, "x": "@"}, *lost]}]
        reply = {"ok": True, "games": games, "correlation_id": command["correlation_id"]}
        text = json.dumps(reply).replace('"x": "@"', '"x": "\\ud800"')
        table.send(text.encode(), topic=command["reply_to"])
        wait_kept(dsn, list(range(1, 10)), what="the gap filled from the rest of the reply")
        assert archive.process is not None and archive.process.poll() is None
    assert "archive task failed" not in archive.logs()


def test_what_came_before_a_key_was_pinned_is_judged_again_after_a_crash(
    tmp_path: Path, broker: Broker, dsn: str
) -> None:
    """Killed between the commit that pinned a key and the one that judged again what had
    come under it: the next start judges them."""
    from tests.test_archive_ledger import PATTERNS, SIGNER, Table, received
    from wheeld.archive.records import Settings

    book = Ledger(Settings(PATTERNS, trust_on_first_use=True))  # no key file: to be pinned
    out = Outcome()
    for payload in Table().messages(3):
        out.extend(book.feed(received(payload)))
    info = {
        "table": "T1",
        "signing": {"kid": SIGNER.kid, "public_key": SIGNER.public_pem().decode()},
        "ts": "2026-03-04T05:06:07.000Z",
    }
    out.extend(book.feed(received(SIGNER.sign(info), topic="wheeld/T1/info")))
    assert [pin.kid for pin in out.pins] == [SIGNER.kid]
    commit_directly(dsn, out, book)  # the pin kept; then the crash
    assert kept(dsn, "unknown_key") == [1, 2, 3]
    archive = ArchiveProcess(tmp_path, dsn=dsn, brokers=[broker.port], trust_on_first_use=True)
    with archiving(archive):
        wait_kept(dsn, [1, 2, 3], what="judged again at the start")
    assert count(dsn, "SELECT count(*) FROM gaps") == 0


def test_a_recall_answered_with_forgeries_is_kept_flagged_and_asked_again(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    """The table's answer does not verify (altered on the way, a table gone wrong): the
    forgeries are kept flagged, the gap is not given up as if the table had no such
    messages, and a later, true answer fills it."""
    table.forges = True
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    with archiving(archive):
        connected(archive)
        table.play("1")
        table.play("2", publish=False)
        table.play("3")
        wait_for(lambda: len(kept(dsn, "bad_signature")) == 3, 30, "the forgeries kept flagged")
        assert query(dsn, "SELECT DISTINCT source FROM messages WHERE verdict <> 'verified'") == [
            ("recall",)
        ]
        wait_for(lambda: query(dsn, "SELECT state, why FROM gaps"), 10, "the gap listed")
        [(state, why)] = query(dsn, "SELECT state, why FROM gaps")
        assert (state, why) == ("open", "the table answered with messages that do not verify")
        table.forges = False
        wait_kept(dsn, list(range(1, 10)), timeout=60, what="the gap filled by a true answer")
    assert "bad_signature" in [a["alarm"] for a in archived_alarms(dsn)]


def test_a_schema_newer_than_this_wheeld_is_refused_in_one_line(
    tmp_path: Path, broker: Broker, dsn: str
) -> None:
    """A wheeld rolled back onto a database a newer one migrated would write rows the newer
    one cannot read (or that its constraints refuse, for ever)."""
    from tests.test_archive_ledger import Table, ledger, received

    book = ledger()
    commit_directly(dsn, book.feed(received(Table().messages(1)[0])), book)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO archive_migrations (version, name) VALUES (99, 'future')")
    archive = ArchiveProcess(tmp_path, dsn=dsn, brokers=[broker.port])
    archive.start()
    assert archive.process is not None and archive.process.wait(30) == 1
    assert archive.logs().strip().splitlines()[-1] == (
        "wheeld archive: archive.dsn: cannot prepare the archive's schema: the archive's"
        " schema has migration(s) 99, made by a newer wheeld than this one: run that one"
        " (or a newer)"
    )


def test_a_session_cut_off_by_the_network_frees_the_lock_within_a_minute(
    tmp_path: Path, dsn: str
) -> None:
    """The lock lives as long as the archive's session on the server: one cut off by the
    network (the server never told) would keep every later start out for the system's two
    hours of TCP keepalive. The archive's sessions ask both ends for some 60 s instead."""
    import asyncio

    from wheeld.archive import store
    from wheeld.config import load_archive

    config_file = tmp_path / "archive.toml"
    config_file.write_text(f'[archive]\ndsn = "{dsn}"\ntables = ["wheeld/+"]\n')
    config = load_archive(config_file, {}).archive

    async def settings() -> tuple[list[str], dict[str, str]]:
        conn = await store.connect(config)
        try:
            await store.hold(conn)
            server = [
                str((await (await conn.execute(f"SHOW {name}")).fetchone() or [""])[0])
                for name in ("tcp_keepalives_idle", "tcp_keepalives_interval")
            ]
            return server, conn.info.get_parameters()
        finally:
            await conn.close()

    server, client = asyncio.run(settings())
    assert server == ["30", "10"]
    assert (client["keepalives_idle"], client["keepalives_count"]) == ("30", "3")
    config_file.write_text(f'[archive]\ndsn = "{dsn} keepalives_idle=7"\ntables = ["wheeld/+"]\n')
    assert store.connect_args(load_archive(config_file, {}).archive)["conninfo"].endswith("=7")
    assert "keepalives_idle" not in store.connect_args(load_archive(config_file, {}).archive)


def test_a_retained_message_is_kept_once_not_at_every_reconnection(
    tmp_path: Path, broker: Broker, table: ScriptedTable, dsn: str
) -> None:
    """A retained payload that is no message (or a forged info) was delivered again at
    every subscription, so at every start and reconnection: one more reject, one more
    alarm each time. The session's subscriptions stand: what is retained comes once."""
    archive = archive_of(tmp_path, dsn, [broker.port], table)
    table.client.publish("wheeld/T1/info", b"not json", qos=1, retain=True).wait_for_publish(10)
    with archiving(archive):
        connected(archive)
        table.play("1")
        wait_kept(dsn, [1, 2, 3])
        wait_for(lambda: count(dsn, "SELECT count(*) FROM rejected") == 1, 30, "one reject")
    with archiving(archive):
        wait_for(lambda: len(archive.said("broker connected")) == 2, 30, "connected again")
        table.play("2")
        wait_kept(dsn, list(range(1, 7)))
    assert count(dsn, "SELECT count(*) FROM rejected") == 1
    assert [a["alarm"] for a in archived_alarms(dsn)] == ["message_rejected"]


def test_huge_payloads_held_while_the_database_is_away_are_held_small(
    tmp_path: Path, broker: Broker, table: ScriptedTable
) -> None:
    """While the database is away the archive holds what it was sent, unacknowledged: 24
    payloads of 8 MiB (no message of a table) must not be held whole (192 MiB)."""
    cluster = own_cluster()
    if cluster is None:
        pytest.skip("no PostgreSQL cluster of the test's own to stop (initdb)")
    try:
        dsn = Databases(cluster.dsn(), cluster.dsn).new()
        archive = archive_of(tmp_path, dsn, [broker.port], table)
        with archiving(archive):
            connected(archive)
            table.play("1")
            wait_kept(dsn, [1, 2, 3])
            cluster.stop()
            big = b"x" * (8 << 20)
            table.send(big)  # the committer takes it, and holds, waiting for the database
            wait_for(
                lambda: archive.said("database unavailable: holding messages unacknowledged"),
                30,
                "the archive to see the database go",
            )
            for _ in range(23):
                table.send(big)
            table.play("2")
            cluster.start()
            wait_kept(dsn, list(range(1, 7)), timeout=90, what="the game after the flood")
            wait_for(lambda: count(dsn, "SELECT count(*) FROM rejected") == 24, 30, "rejects")
        [figures] = archive.said("archive stopped")
        assert figures["held_peak"] >= 2
        assert figures["held_bytes_peak"] <= 24 * 64 * 1024 + 64 * 1024
        assert query(dsn, "SELECT DISTINCT size FROM rejected") == [(8 << 20,)]
    finally:
        cluster.destroy()
