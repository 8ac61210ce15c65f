"""Rewrite the signed golden outputs (review ``git diff tests/captures/signed`` after)."""

from tests.captures.signed import CAPTURES, signed_pairs, signed_replay

for capture, golden in signed_pairs():
    golden.write_text(signed_replay(capture))
    print(f"wrote {golden.relative_to(CAPTURES.parent.parent)} from {capture.name}")
