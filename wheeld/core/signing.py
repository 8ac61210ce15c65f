"""Signed, chained game messages: Ed25519 over the RFC 8785 canonical form. Pure.

Every ``<base>/game`` payload carries ``seq`` (one more than the message
before, across restarts), ``prev`` (the SHA-256 of the previous message's
canonical form, signature included, base64url without padding; ``null`` for
the first message ever), ``kid`` (the key's id) and ``sig`` (the Ed25519
signature, base64url without padding, of the canonical form of the payload
without ``sig``). Alarms carry ``kid`` and ``sig`` but no chain.

The canonical form is rfc8785's and the signature cryptography's: nothing
here canonicalises or signs by hand. A consumer needs only the table's public
key (``signing.pub``) to tell a genuine message from a forged, altered,
replayed, reordered or missing one.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

#: The longest key file read (a PEM Ed25519 key is about 120 bytes).
MAX_KEY_FILE_BYTES = 16 * 1024


class SigningError(Exception):
    """A key cannot be read or used; the message says which and why, in one line."""


def b64url(data: bytes) -> str:
    """base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    """The bytes of base64url text, with or without padding; ValueError when malformed."""
    if not isinstance(text, str) or not text.isascii():
        raise ValueError("not base64url text")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


#: JSON's exact integers: RFC 8785 refuses any integer outside them.
_SAFE_INTEGER = 2**53 - 1


def canonical(payload: Any) -> bytes:
    """The RFC 8785 canonical form, UTF-8.

    For a value of strings, integers, booleans, nulls, lists and objects with
    ASCII member names (every game message), the standard library's sorted,
    compact JSON is that form byte for byte, at a tenth of rfc8785's cost (a
    test holds the two equal over arbitrary values); anything else (a float,
    another member name) is rfc8785's.
    """
    if _plain(payload):
        try:
            return _sorted_json(payload)
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 says why it cannot be signed
    return rfc8785.dumps(payload)


class DuplicateMember(ValueError):
    """A JSON object names one member twice: I-JSON (RFC 7493), which RFC 8785 signs, forbids it."""


def unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An ``object_pairs_hook`` for ``json.loads``: refuses a member named twice."""
    members = dict(pairs)
    if len(members) != len(pairs):
        counted: dict[str, int] = {}
        for key, _ in pairs:
            counted[key] = counted.get(key, 0) + 1
        twice = next(key for key, count in counted.items() if count > 1)
        raise DuplicateMember(f"member {twice!r} appears twice (parsers disagree on which counts)")
    return members


def canonical_pair(payload: dict[str, Any]) -> tuple[bytes, bytes]:
    """The canonical form of ``payload`` without its ``sig`` (what is signed) and with it
    (what the next message's ``prev`` digests), judged plain once for both."""
    body = {k: v for k, v in payload.items() if k != "sig"}
    if _plain(payload):
        try:
            return _sorted_json(body), _sorted_json(payload)
        except UnicodeEncodeError:
            pass
    return rfc8785.dumps(body), rfc8785.dumps(payload)


#: Sorted compact JSON, made once (``json.dumps`` with options makes an encoder a call).
_SORTED = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)
#: Where ``sig`` stands in the one encoding that gives both forms of a signed payload.
_SIG_PLACE = "sig-goes-here"
_SIG_MEMBER = f'"sig":"{_SIG_PLACE}"'


def _sorted_json(value: Any) -> bytes:
    return _SORTED.encode(value).encode()


def _forms_around_sig(body: dict[str, Any]) -> tuple[str, str] | None:
    """The canonical form of plain ``body`` with a ``sig`` member, as the text before
    and after that member's place, from one encoding; None when the place cannot be
    told for certain (a nested ``sig`` of the same value) or ``body`` is not plain."""
    if not _plain(body):
        return None
    marked = _SORTED.encode({**body, "sig": _SIG_PLACE})
    at = marked.find(_SIG_MEMBER)
    if at < 0 or marked.find(_SIG_MEMBER, at + 1) >= 0:
        return None
    return marked[:at], marked[at + len(_SIG_MEMBER) :]


def _plain(value: Any) -> bool:
    """Whether ``value`` is made only of what sorted compact JSON writes as RFC 8785 does."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if not -_SAFE_INTEGER <= item <= _SAFE_INTEGER:
                return False
        elif kind is dict:
            for key in item:
                if type(key) is not str or not key.isascii():
                    return False
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        else:
            return False
    return True


def digest(payload: dict[str, Any]) -> str:
    """What the next message's ``prev`` names: SHA-256 of the canonical form, base64url."""
    return b64url(hashlib.sha256(canonical(payload)).digest())


def key_id(public_key: Ed25519PublicKey) -> str:
    """A key's id: the first 16 bytes of the SHA-256 of its raw public key, base64url."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return b64url(hashlib.sha256(raw).digest()[:16])


def _read_key_file(path: Path) -> bytes:
    try:
        if not path.is_file():
            raise SigningError(f"{path}: not a regular file")
        with path.open("rb") as handle:
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise SigningError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise SigningError(f"{path}: too large for a key file")
    return data


class Signer:
    """Signs payloads with one Ed25519 private key; never shows the key."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key = private_key.public_key()
        self.kid = key_id(self.public_key)

    def __repr__(self) -> str:  # the key itself must never reach a log
        return f"Signer(kid={self.kid!r})"

    @classmethod
    def generate(cls) -> Signer:
        """A new random key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_file(cls, path: Path) -> Signer:
        """The key in a PKCS#8 PEM file, as ``wheeld keygen`` writes it."""
        data = _read_key_file(path)
        if b"-----BEGIN PUBLIC KEY-----" in data:
            raise SigningError(
                f"{path}: a public key (signing.pub?), not the private key: give the "
                "signing.key that wheeld keygen wrote beside it"
            )
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else "malformed"
            raise SigningError(f"{path}: not a PEM private key ({reason})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningError(f"{path}: not an Ed25519 key")
        return cls(key)

    def private_pem(self) -> bytes:
        """The key as PKCS#8 PEM, for ``wheeld keygen`` to write (mode 0600)."""
        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def public_pem(self) -> bytes:
        """The public key as SubjectPublicKeyInfo PEM."""
        return self.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def sign(self, payload: dict[str, Any]) -> dict[str, Any]:
        """``payload`` with ``kid`` and ``sig`` (over everything but ``sig``)."""
        body = {k: v for k, v in payload.items() if k != "sig"}
        body["kid"] = self.kid
        body["sig"] = b64url(self._key.sign(canonical(body)))
        return body

    def sign_canonical(self, payload: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """``sign``'s payload and its canonical form, ``sig`` included (what the next
        message's ``prev`` digests): each member canonicalised once for both."""
        body = {k: v for k, v in payload.items() if k != "sig"}
        body["kid"] = self.kid
        around = _forms_around_sig(body)
        try:
            if around is not None:
                before, after = around
                # Without sig: the member and the comma that joined it to a neighbour go.
                if before.endswith(","):
                    unsigned = before[:-1] + after
                else:
                    unsigned = before + after.removeprefix(",")
                sig = b64url(self._key.sign(unsigned.encode()))
                body["sig"] = sig
                return body, f'{before}"sig":"{sig}"{after}'.encode()
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 says why it cannot be signed
        body.pop("sig", None)
        body["sig"] = b64url(self._key.sign(canonical(body)))
        return body, canonical(body)


def load_public_key(path: Path) -> Ed25519PublicKey:
    """A SubjectPublicKeyInfo PEM public key (``signing.pub``)."""
    data = _read_key_file(path)
    if b"PRIVATE KEY-----" in data:
        # Found: `verify --key signing.key` said the library's "Valid PEM but no BEGIN
        # PUBLIC KEY/END PUBLIC KEY delimiters", and a verifier should never hold the key.
        raise SigningError(
            f"{path}: a private key (signing.key?), not the public key: give the "
            "signing.pub that wheeld keygen wrote beside it (a verifier needs no secret)"
        )
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "malformed"
        raise SigningError(f"{path}: not a PEM public key ({reason})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{path}: not an Ed25519 public key")
    return key


@dataclass(frozen=True, slots=True)
class ChainState:
    """Where the chain of ``<base>/game`` messages stands: the next ``seq`` and ``prev``."""

    seq: int = 1
    prev: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "prev": self.prev}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChainState:
        """A stored chain state; ValueError when malformed."""
        seq, prev = data.get("seq"), data.get("prev")
        if type(seq) is not int or not 1 <= seq < 2**53:
            raise ValueError("stored chain state has a malformed seq")
        if prev is not None and (type(prev) is not str or len(prev) != 43):
            raise ValueError("stored chain state has a malformed prev")
        return cls(seq, prev)


def chain(
    payload: dict[str, Any], state: ChainState, signer: Signer
) -> tuple[dict[str, Any], ChainState]:
    """``payload`` linked into the chain and signed, and the chain's next state."""
    linked = dict(payload)
    linked["seq"] = state.seq
    linked["prev"] = state.prev
    signed, form = signer.sign_canonical(linked)
    return signed, ChainState(state.seq + 1, b64url(hashlib.sha256(form).digest()))


def signature_problem(payload: dict[str, Any], public_key: Ed25519PublicKey) -> str | None:
    """Why ``payload``'s signature does not hold, or None when it does."""
    sig = payload.get("sig")
    if not isinstance(sig, str):
        return "no signature"
    if payload.get("kid") != key_id(public_key):
        return f"signed with another key (kid {payload.get('kid')!r})"
    try:
        signature = unb64url(sig)
    except ValueError:
        return "malformed signature"
    body = {k: v for k, v in payload.items() if k != "sig"}
    try:
        public_key.verify(signature, canonical(body))
    except InvalidSignature:
        return "bad signature"
    except (TypeError, ValueError, rfc8785.CanonicalizationError):
        return "not canonicalisable"
    return None
