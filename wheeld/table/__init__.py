"""One table: a driver's events routed through the engine into effects.

Pure like the core, one layer above it and the drivers: ``run``, ``replay`` and
the tests drive the same ``TablePipeline`` (``pipeline.py``), which routes each
input to the part that judges it: the faults and the alerts (one module each,
``alerts/``) in their books, the broker's floors, the operator's commands, and
the announcements that build every payload.
"""
