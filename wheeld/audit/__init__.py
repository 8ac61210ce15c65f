"""Looking back: ``replay`` (the pipeline over a capture) and ``verify`` (signatures,
links and the journal's chains).

The capture format is the core's (``wheeld.core.capture``); recall and export read
the journal (``wheeld.shell.journal.recall``).
"""
