"""The casino's archive: every table's signed messages, verified, gap-free, kept in PostgreSQL.

``ledger`` is the pure judgement (a message in; what to keep, flag, ask and say
out), with its pure parts ``records``, ``trust``, ``chains``, ``recalls`` and
``alarms``; ``audit`` re-checks stored chains, ``schema`` holds the versioned
migrations; ``store`` (psycopg), ``service`` (MQTT, with its parts ``intake``,
``committer`` and ``database``) and ``answers`` (the ``wheeld archive``
subcommands' queries) are the thin shell. docs/archive.md says what it promises.
"""
