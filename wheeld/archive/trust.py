"""Which keys the archive trusts for each table: the operator's files and the keys pinned
on first use (a table's ``<base>/info`` naming its key, self-signed); and the judgement
of the messages signed without a chain, a table's alarms and its info."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wheeld.archive.alarms import Alarms
from wheeld.archive.records import (
    UNKNOWN_KEY,
    VERIFIED,
    Outcome,
    Pin,
    Received,
    Settings,
    SideRow,
    day_of,
    pem_of,
    public_key_from_pem,
    raw_digest,
    side_verdict,
    ts_of,
)
from wheeld.core.signing import key_id, signature_problem


class Trust:
    """The keys trusted for each table, and the judgement of its signed alarms and info."""

    def __init__(
        self,
        settings: Settings,
        alarms: Alarms,
        trusted: Mapping[str, Iterable[Ed25519PublicKey]] | None = None,
    ) -> None:
        self.settings = settings
        self.alarms = alarms
        #: Keys from the operator's files, by table and kid.
        self._files: dict[str, dict[str, Ed25519PublicKey]] = {
            table: {key_id(key): key for key in keys} for table, keys in (trusted or {}).items()
        }
        #: Keys pinned on first use, by table and kid.
        self._pinned: dict[str, dict[str, Ed25519PublicKey]] = {}

    def restore_pin(self, table: str, kid: str, pem: str) -> None:
        key = public_key_from_pem(pem)
        if key is not None and key_id(key) == kid:
            self._pinned.setdefault(table, {})[kid] = key

    def keys(self, table: str) -> dict[str, Ed25519PublicKey]:
        """Every key trusted for ``table``: the operator's files and those pinned."""
        return {**self._pinned.get(table, {}), **self._files.get(table, {})}

    def trusted(self) -> list[tuple[str, str]]:
        """``(table, kid)`` of every key trusted: the operator's files and those pinned."""
        tables = sorted({*self._files, *self._pinned})
        return [(table, kid) for table in tables for kid in sorted(self.keys(table))]

    def signed_side(
        self,
        out: Outcome,
        received: Received,
        text: str,
        payload: dict[str, Any],
        table: str,
        kind: str,
    ) -> None:
        """A table's alarm or ``<base>/info``: signed like an alarm (``kid``, ``sig``, no chain)."""
        keys = self.keys(table)
        kid = payload.get("kid") if isinstance(payload.get("kid"), str) else None
        announced = payload.get("signing") if kind == "info" else None
        trusting = self.settings.trust_on_first_use and not keys
        if kind == "info" and isinstance(announced, dict) and trusting:
            self._pin(out, received, payload, table, announced)
            keys = self.keys(table)
        verdict, why = side_verdict(payload, keys, kid)
        if kind == "info" and isinstance(announced, dict) and keys:
            named = announced.get("kid")
            if named not in keys:
                verdict, why = UNKNOWN_KEY, f"announces key {named!r}, which is not trusted"
                self.alarms.alarm(
                    out, "key_changed", table, received.at, kid=named, trusted=sorted(keys)
                )
        elif verdict != VERIFIED and not (verdict == UNKNOWN_KEY and not keys):
            self.alarms.alarm(
                out, verdict, table, received.at, topic=received.topic, kid=kid, why=why
            )
        code = payload.get("alarm") if kind == "alarm" else None
        out.sides.append(
            SideRow(
                kind,
                table,
                received.at,
                day_of(ts_of(payload.get("ts")), received.at),
                kid,
                verdict,
                why,
                raw_digest(received.payload),
                received.topic,
                text,
                code if isinstance(code, str) else None,
            )
        )

    def _pin(
        self,
        out: Outcome,
        received: Received,
        payload: dict[str, Any],
        table: str,
        announced: dict[str, Any],
    ) -> None:
        """Trust on first use: the key ``<base>/info`` announces, when the info is signed by it."""
        pem, kid = announced.get("public_key"), announced.get("kid")
        key = public_key_from_pem(pem) if isinstance(pem, str) else None
        if key is None or key_id(key) != kid or signature_problem(payload, key) is not None:
            self.alarms.alarm(
                out,
                "key_not_pinned",
                table,
                received.at,
                kid=kid,
                why="the info's key does not sign it, or is no Ed25519 key",
            )
            return
        self._pinned.setdefault(table, {})[kid] = key
        out.pins.append(Pin(table, kid, pem_of(key), received.at))
        self.alarms.event(out, "key_pinned", table, received.at, kid=kid)
