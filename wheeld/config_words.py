"""How a configuration problem is said: plain words, the value as TOML, the form expected.

pydantic's own messages are written for programmers (``Input should be '5' or
'3.1.1'``, where the quotes are the whole point and nobody sees them). Here
each kind of error is said as the operator reads the file: the value they
wrote, as TOML writes it, and what the key takes instead; an unknown key with
the known one it most looks like. The configuration reference
(``docs/configuration.md``) is written with the same words (``limits``).
"""

from __future__ import annotations

import contextlib
import json
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

#: A value quoted in a message is cut past this many characters.
SHOWN_CHARS = 40


def toml_value(value: Any, *, whole: bool = False) -> str:
    """``value`` as it would be written in a TOML file (cut when long, unless ``whole``)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str | Path):
        text = json.dumps(str(value), ensure_ascii=False)
    elif isinstance(value, int | float):
        text = repr(value)
    elif isinstance(value, Mapping):
        text = "a section"
    elif isinstance(value, Sequence):
        text = "[" + ", ".join(toml_value(item, whole=whole) for item in value) + "]"
    elif value is None:
        text = "nothing"
    else:
        text = str(value)
    return text if whole or len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def kind_of(value: Any) -> str:
    """What a TOML value is, in words: "a string", "an integer", ..."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a section"
    if isinstance(value, Sequence):
        return "a list"
    return type(value).__name__


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def limits(field: FieldInfo, unit: str = "") -> str:
    """The field's bounds in words: "5 to 3,600", "at least 365", "above 0, at most 0.05";
    ``unit`` after bounds of length ("at most 64 characters")."""
    low = high = ""
    sized = False
    for item in field.metadata:
        if isinstance(item, Ge):
            low = _number(item.ge)
        elif isinstance(item, Gt):
            low = f"above {_number(item.gt)}"
        elif isinstance(item, Le):
            high = _number(item.le)
        elif isinstance(item, Lt):
            high = f"below {_number(item.lt)}"
        elif isinstance(item, MinLen) and item.min_length > 0:
            low, sized = str(item.min_length), True
        elif isinstance(item, MaxLen):
            high, sized = str(item.max_length), True
    if low and high:
        if low.startswith("above") or high.startswith("below"):
            text = f"{low}, {'' if high.startswith('below') else 'at most '}{high}"
        else:
            text = f"{low} to {high}"
    elif low:
        text = low if low.startswith("above") else f"at least {low}"
    elif high:
        text = high if high.startswith("below") else f"at most {high}"
    else:
        return ""
    return f"{text} {unit}" if sized and unit else text


def choices(annotation: Any) -> tuple[Any, ...]:
    """The values a ``Literal`` annotation (optional or not) allows; () for any other."""
    for arg in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(arg) is Literal:
            return typing.get_args(arg)
    return ()


def either(values: Sequence[Any]) -> str:
    """``"a", "b" or "c"``: the values as TOML writes them."""
    shown = [toml_value(value) for value in values]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (itself or optional), else None."""
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def field_at(model: type[BaseModel], loc: Sequence[str]) -> tuple[type[BaseModel] | None, str]:
    """The model holding the key at ``loc`` (None when the path leaves the models) and
    the key's own name."""
    holder: type[BaseModel] | None = model
    for part in loc[:-1]:
        if holder is None or part not in holder.model_fields:
            return None, loc[-1] if loc else ""
        holder = section_model(holder.model_fields[part].annotation)
    return holder, loc[-1] if loc else ""


def did_you_mean(key: str, known: Sequence[str]) -> str:
    """What to say after "unknown key": the known key closest to it, else the keys
    there are (when few), else nothing."""
    import difflib  # a mistake's suggestion only: not on every start's way

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6) or _few_edits(key, known)
    if close:
        return f" (did you mean {close[0]}?)"
    if known and len(known) <= 12:
        return f" (known here: {', '.join(sorted(known))})"
    return ""


#: A short name (the sections': ``mqtt``, ``log``) is matched by edits, not by ratio:
#: ``mqq`` is two edits from ``mqtt`` but too short for difflib's cutoff.
_MAX_EDITS = 2


def _few_edits(key: str, known: Sequence[str]) -> list[str]:
    """The one known name within ``_MAX_EDITS`` edits of ``key`` that starts as it does
    (none when two are as close: a guess between them would mislead)."""
    near = sorted(
        (distance, name)
        for name in known
        if name[:1] == key[:1] and (distance := _edits(key, name)) <= _MAX_EDITS
    )
    if not near or (len(near) > 1 and near[0][0] == near[1][0]):
        return []
    return [near[0][1]]


def _edits(a: str, b: str) -> int:
    """Levenshtein's distance: letters inserted, deleted or changed."""
    row = list(range(len(b) + 1))
    for i, left in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, right in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (left != right))
    return row[-1]


def is_section(annotation: Any) -> bool:
    return section_model(annotation) is not None


def explain(item: ErrorDetails, model: type[BaseModel]) -> str:
    """One pydantic error of ``model`` in the operator's words (without the key)."""
    loc = [str(part) for part in item["loc"]]
    holder, name = field_at(model, loc)
    field = holder.model_fields.get(name) if holder is not None else None
    value: Any = item.get("input")
    kind = item["type"]
    ctx: dict[str, Any] = dict(item.get("ctx") or {})
    given = f"not {toml_value(value)}" if kind != "missing" else ""
    if kind == "extra_forbidden":
        known = list(holder.model_fields) if holder is not None else []
        return "unknown key" + did_you_mean(name, known)
    if kind == "value_error":
        return str(ctx.get("error", item["msg"]))
    if kind == "cross_field":
        return item["msg"]
    if kind == "literal_error" and field is not None:
        allowed = choices(field.annotation)
        text = f"must be {either(allowed)}, {given}"
        # The right value of the wrong type: say how to write it.
        for choice in allowed:
            if str(choice) == str(value) and type(choice) is not type(value):
                form = "in quotes" if isinstance(choice, str) else "without quotes"
                text += f" (write {name} = {toml_value(choice)}, {form})"
                break
        return text
    if kind in ("int_type", "int_parsing", "int_from_float"):
        text = f"must be a whole number, {given} ({kind_of(value)})"
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            text += f": write {name} = {value.strip()}, without quotes"
        return text
    if kind in ("float_type", "float_parsing"):
        text = f"must be a number, {given} ({kind_of(value)})"
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                text += f": write {name} = {float(value.strip())!r}, without quotes"
        return text
    if kind == "finite_number":
        return f"must be a finite number, {given}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (without quotes), {given} ({kind_of(value)})"
    if kind in ("string_type", "path_type"):
        return f"must be a string in quotes, {given} ({kind_of(value)})"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        where = ".".join(loc)
        return f"must be a section ([{where}]) or a table of keys, {given}"
    if kind == "list_type":
        return f"must be a list in brackets ([...]), {given} ({kind_of(value)})"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bounds = limits(field) if field is not None else ""
        if not bounds:
            bounds = item["msg"].removeprefix("Input should be ")
        elif bounds[0].isdigit():
            bounds = f"from {bounds}"
        return f"must be {bounds}, {given}"
    if kind in ("string_too_short", "string_too_long"):
        bounds = limits(field) if field is not None else ""
        return f"must be {bounds or 'of another length'} characters long, {given}"
    if kind in ("too_short", "too_long"):
        bounds = limits(field) if field is not None else ""
        count = ctx.get("actual_length")
        return f"must hold {bounds or 'another number of'} entries, not {count}"
    if kind == "missing":
        return "must be set"
    return str(item["msg"])


def optional(annotation: Any) -> bool:
    """Whether ``None`` is allowed: the key may be left out with no value at all."""
    return type(None) in typing.get_args(annotation) or annotation is type(None)


def type_words(annotation: Any) -> str:
    """A field's type as the reference names it: "integer", "string", ``"5" or "3.1.1"``."""
    allowed = choices(annotation)
    if allowed:
        return either(allowed)
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    base = args[0] if optional(annotation) and len(args) == 1 else annotation
    origin = typing.get_origin(base)
    if origin in (list, Sequence):
        (inner,) = typing.get_args(base) or (Any,)
        return f"list of {type_words(inner)}s"
    if origin is dict:
        return "table"
    if origin is typing.Annotated:
        return type_words(typing.get_args(base)[0])
    names = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "path"}
    if isinstance(base, type) and base in names:
        return names[base]
    if isinstance(base, types.UnionType):
        return " or ".join(type_words(arg) for arg in typing.get_args(base))
    return getattr(base, "__name__", str(base))
