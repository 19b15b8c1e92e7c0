"""Checking the values a `BashToolPolicy` is built from: tuples of strings, limits,
sizes, program specs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from sandbox.bash.policy.specs import ProgramSpec, builtin_specs
from sandbox.errors import ConfigurationError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MAX_COMMAND_BYTES = 131071  # Linux MAX_ARG_STRLEN minus the NUL: bash -c fails past it
_OPERATOR_CHARS = frozenset(";&|<>()$`{}[]!\n-0123456789")
_SIZE = re.compile(r"\s*(\d+)\s*([kKmMgGtT]i?[bB]?|[bB])?\s*\Z")
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "ki": 1024, "m": 1000**2, "mi": 1024**2,
               "g": 1000**3, "gi": 1024**3, "t": 1000**4, "ti": 1024**4}  # fmt: skip


def _tuple_of_str(
    name: str, value: object, example: str, *, blank_ok: bool = False
) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ConfigurationError(
            f"{name}={value!r} is invalid: it must be a tuple of strings, not one string. "
            f"Write {name}=({value!r},)."
        )
    if not isinstance(value, Iterable):
        raise ConfigurationError(
            f"{name}={value!r} is invalid: it must be a tuple of strings, e.g. {example}."
        )
    items = tuple(value)
    for item in items:
        if not isinstance(item, str) or not (item if blank_ok else item.strip()):
            raise ConfigurationError(
                f"{name} entry {item!r} is invalid: entries must be non-empty strings, "
                f"e.g. {example}."
            )
    return items


_NO_SPECS: Mapping[str, ProgramSpec] = MappingProxyType({})


def _specs_field(value: object) -> Mapping[str, ProgramSpec]:
    """``program_specs``: a mapping of program (or "prog sub") to `ProgramSpec`, or
    ``"builtin"`` for the specs shipped with the package."""
    if isinstance(value, str):
        if value != "builtin":
            raise ConfigurationError(
                f"program_specs={value!r} is invalid: use \"builtin\" or a mapping of "
                "program names to ProgramSpec.")
        return builtin_specs()
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, ProgramSpec) for k, v in value.items()):
        raise ConfigurationError(
            f"program_specs={value!r} is invalid: use \"builtin\" or a mapping of program "
            "names to ProgramSpec (sandbox.bash.policy.specs).")
    return value if isinstance(value, MappingProxyType) else MappingProxyType(dict(value))


def _limit(name: str, value: object, *, optional: bool, maximum: int | None = None) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        none = " or None for no limit" if optional else ""
        raise ConfigurationError(
            f"{name}={value!r} is invalid: it must be a positive integer (bytes or a count){none}."
        )
    if maximum is not None and value > maximum:
        raise ConfigurationError(f"{name}={value!r} is invalid: it must be at most {maximum}.")



def _byte_size(name: str, value: str) -> int:
    """A size written as text ("512MiB", "1GiB", "1GB"), read by pydantic's ByteSize."""
    from pydantic import ByteSize, TypeAdapter, ValidationError

    try:
        return int(TypeAdapter(ByteSize).validate_python(value))
    except ValidationError:
        raise ConfigurationError(
            f'{name}={value!r} is invalid: write a number of bytes or a size such as '
            f'"512MiB" or "1GiB".') from None
