"""One table's pipeline: a driver's events routed through the engine into effects.

Pure like the core, one layer above it and the drivers: ``run``, ``replay`` and
the tests drive the same ``TablePipeline``.
"""
