"""Read a Google-style docstring into a summary and per-parameter descriptions."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|"
                      r"Examples?|Notes?|Attributes|See Also|Warnings?|Todo)\s*:\s*$")
_PARAM = re.compile(r"^\*{0,2}(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*:\s*(?P<desc>.*)$")


@dataclass
class Docstring:
    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> Docstring:
    """Split a docstring into the text before its sections and the `Args:` entries.

    Sections other than `Args:` (Returns, Raises, ...) are kept in the description:
    they tell a model what the tool gives back.
    """
    if not doc:
        return Docstring()
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    param_indent: int | None = None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION.match(stripped) if indent == 0 else None
        if header:
            in_args = header.group(1) in {"Args", "Arguments", "Parameters", "Params"}
            current, param_indent = None, None
            if not in_args:
                description.append(line)
            continue
        if not in_args:
            description.append(line)
            continue
        if not stripped:
            continue
        match = _PARAM.match(stripped)
        if match and (param_indent is None or indent <= param_indent):
            param_indent = indent
            current = match.group("name")
            params[current] = match.group("desc").strip()
        elif current is not None:
            params[current] = f"{params[current]} {stripped}".strip()
    return Docstring(description="\n".join(description).strip(), params=params)
