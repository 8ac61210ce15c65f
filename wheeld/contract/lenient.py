"""A follower's view of a payload's model: what it reads, checked by the contract's own types.

The marquee, the display and every consumer validate what they receive with
the models of ``wheeld.contract.topics``, never with definitions of their own
(a third copy drifts: a consumer that knew only ``online`` and ``offline``
showed a table in ``fault`` as online). A follower is lenient where the
daemon is exact:

- only the members it reads are checked, by the model's own types and
  constraints; every other member is ignored, present or not, valid or not
  (a new member, or one a follower does not need, never drops a message);
- a member an older wheeld left out may be absent, with a default;
- reason codes are open: a code added later is a string like any other, so
  a no-spin still voids the game on a board that does not know its code.

``lenient(Status, reads={"state"})`` is a subclass of ``Status``: a message
it accepts is an instance of the contract's model, and is matched by it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Annotated, Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field

from wheeld.core.events import ReasonCode

M = TypeVar("M", bound=BaseModel)

#: A reason code as a follower reads it: any short string.
OpenReasonCode = Annotated[str, Field(min_length=1, max_length=64)]


def _opened(annotation: Any) -> Any:
    """``annotation`` with every closed list of reason codes opened to any code."""
    if annotation == ReasonCode:
        return OpenReasonCode
    if get_origin(annotation) is list and get_args(annotation) == (ReasonCode,):
        return list[OpenReasonCode]
    return annotation


def lenient(
    model: type[M],
    reads: Collection[str],
    *,
    defaults: Mapping[str, Any] | None = None,
) -> type[M]:
    """``model`` as a follower reads it: the members ``reads`` checked as ``model``
    checks them, the others ignored; ``defaults``: the read members an older wheeld
    may leave out, and what their absence means (None makes the member nullable)."""
    defaults = defaults or {}
    unknown = sorted((set(reads) | set(defaults)) - set(model.model_fields))
    if unknown:
        raise TypeError(f"{model.__name__} has no member {', '.join(unknown)}")
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": f"Lenient{model.__name__}",
        "__doc__": model.__doc__,
        "__annotations__": annotations,
        "model_config": ConfigDict(extra="ignore"),
    }
    for name, info in model.model_fields.items():
        if name not in reads:
            # Not read: whatever comes (or nothing) passes, and nobody looks at it.
            annotations[name] = Any
            namespace[name] = None
            continue
        kept = _opened(info.annotation)
        if info.metadata:
            kept = Annotated[(kept, *info.metadata)]
        if name in defaults:
            if defaults[name] is None:
                kept = kept | None
            namespace[name] = Field(default=defaults[name], alias=info.alias)
        else:
            namespace[name] = Field(alias=info.alias)
        annotations[name] = kept
    # Made by the model's own metaclass, as a class statement would make it.
    metaclass: Any = type(model)
    view: type[M] = metaclass(f"Lenient{model.__name__}", (model,), namespace)
    return view
