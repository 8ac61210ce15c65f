"""The chaos suite: faults thrown at a real daemon, the journal checked against a subscriber."""
