"""Fuzz targets for the wheel drivers (run as ``python -m tests.fuzz.<name>``)."""
