"""The base of every model of ``[alerts]`` keys: each alert's, and the line-noise fault's.

As strict as every configuration section: a TOML integer for an int (floats
take integers too), a TOML boolean for a bool, no key it does not know.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class AlertKeys(BaseModel):
    """Keys under ``[alerts]``: one model per alert (or fault) that reads them."""

    # Built when first used (``defer_build``): each alert's keys are never used alone by
    # ``wheeld run``, only as bases of ``AlertSettings`` (which ``Config``'s default builds).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)
