"""Policy files: a `BashToolPolicy` from TOML (or a mapping shaped like it).

A file must state its allowlist: without ``allowed_command_prefixes`` (an empty or
truncated file included) loading fails, naming the file and the fix; ``["*"]`` is
written out, never assumed. Keys are the policy's fields; sizes may be written
``"512MiB"``; ``false`` is None for an optional limit or the timeout;
``[[hardening]]`` tables add R7 rows; ``[programs.NAME]`` tables add or replace
program specs (see `sandbox.bash.policy.specs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from sandbox.bash.config import CONFINEMENT_MODES, FILESYSTEM_MODES, NETWORK_MODES
from sandbox.bash.policy.evaluate import _SIZE, _SIZE_UNITS
from sandbox.bash.policy.hardening import DEFAULT_HARDENING, HardeningRule
from sandbox.bash.policy.specs import builtin_specs
from sandbox.bash.policy.specs import merged as merged_specs
from sandbox.errors import ConfigurationError, PolicyFileError

if TYPE_CHECKING:
    from sandbox.bash.policy.evaluate import BashToolPolicy

__all__ = ["from_mapping"]

_STRING_TUPLES = ("allowed_command_prefixes", "blocked_operators", "inherit_env",
                  "no_confirmation_prefixes", "readable_paths", "writable_paths",
                  "allowed_domains", "protected_paths")  # fmt: skip
_CHOICES = {"filesystem": FILESYSTEM_MODES, "network": NETWORK_MODES,
            "confinement": CONFINEMENT_MODES}  # fmt: skip
_OPTIONAL_LIMITS = ("max_memory_bytes", "max_file_size_bytes", "max_child_processes")
_LIMITS = ("max_output_bytes", "max_command_bytes", "max_parse_depth")
_SECONDS = ("timeout_seconds", "max_parse_seconds")
_FILE_ONLY = ("default_hardening", "description", "programs")
_RULE_KEYS = ("why", "program", "option", "pattern", "subcommands", "before_subcommand",
              "unless_any", "analyzer", "env", "redirect")  # fmt: skip


def _size(source: str, key: str, value: object, *, optional: bool) -> int | None:
    if value is False and optional:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m is not None:
            unit = (m.group(2) or "").lower().rstrip("b")
            return int(m.group(1)) * _SIZE_UNITS[unit]
    none = ", or false for no limit" if optional else ""
    raise PolicyFileError(
        f"{source}: {key} = {value!r} is invalid: write a positive integer or a size "
        f'such as "512MiB"{none}.'
    )


def from_mapping(
    cls: type[BashToolPolicy], data: Mapping[str, Any], source: str
) -> BashToolPolicy:
    if not isinstance(data, Mapping):
        raise PolicyFileError(
            f"{source}: a policy must be a table of fields, not {type(data).__name__}"
        )
    valid = [f.name for f in fields(cls)] + list(_FILE_ONLY)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in valid:
            raise PolicyFileError(
                f"{source}: unknown field {key!r}. Valid fields: {', '.join(valid)}."
            )
        if key in _STRING_TUPLES:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise PolicyFileError(
                    f"{source}: {key} = {value!r} is invalid: write an array of strings, "
                    f'e.g. {key} = ["ls", "git status"].'
                )
            kwargs[key] = tuple(value)
        elif key in _SECONDS:
            if value is False and key == "timeout_seconds":
                kwargs[key] = None
            elif isinstance(value, int | float) and not isinstance(value, bool):
                kwargs[key] = value
            else:
                none = ", or false for no timeout" if key == "timeout_seconds" else ""
                raise PolicyFileError(
                    f"{source}: {key} = {value!r} is invalid: write a number of seconds{none}."
                )
        elif key in _OPTIONAL_LIMITS:
            kwargs[key] = _size(source, key, value, optional=True)
        elif key in _LIMITS:
            kwargs[key] = _size(source, key, value, optional=False)
        elif key == "env":
            if not isinstance(value, Mapping) or not all(
                isinstance(v, str) for v in value.values()
            ):
                raise PolicyFileError(
                    f"{source}: env = {value!r} is invalid: write a table of strings, e.g. "
                    '[env]\nPATH = "/usr/bin:/bin".'
                )
            kwargs[key] = dict(value)
        elif key == "rlimits_via":
            if value not in ("preexec_fn", "prologue"):
                raise PolicyFileError(
                    f'{source}: rlimits_via = {value!r} is invalid: write "preexec_fn" or '
                    '"prologue".'
                )
            kwargs[key] = value
        elif key == "ask_for_unlisted_domains":
            if not isinstance(value, bool):
                raise PolicyFileError(
                    f"{source}: {key} = {value!r} is invalid: write true or false."
                )
            kwargs[key] = value
        elif key == "drop_privileges":
            if value == "auto":
                kwargs[key] = None
            elif isinstance(value, bool):
                kwargs[key] = value
            else:
                raise PolicyFileError(
                    f"{source}: drop_privileges = {value!r} is invalid: write true, false "
                    'or "auto".'
                )
        elif key in _CHOICES:
            if value not in _CHOICES[key]:
                raise PolicyFileError(
                    f"{source}: {key} = {value!r} is invalid: write one of "
                    + ", ".join(f'"{c}"' for c in _CHOICES[key]) + "."
                )
            kwargs[key] = value
        elif key == "hardening":
            kwargs[key] = _rules_from(source, value)
        elif key == "program_specs":
            if value != "builtin":
                raise PolicyFileError(
                    f'{source}: program_specs = {value!r} is invalid: write "builtin" (the '
                    "specs shipped with sandbox), and add or replace specs in [programs.NAME] "
                    "tables.")
            kwargs[key] = dict(builtin_specs())
        elif key == "programs":
            pass  # after program_specs, below
        elif key in ("default_hardening", "description"):
            expected = bool if key == "default_hardening" else str
            if not isinstance(value, expected):
                raise PolicyFileError(
                    f"{source}: {key} = {value!r} is invalid: write a "
                    f"{'boolean' if expected is bool else 'string'}."
                )
    if "allowed_command_prefixes" not in data:
        raise PolicyFileError(
            f"{source}: allowed_command_prefixes is missing. A policy file must state its "
            'allowlist, e.g. allowed_command_prefixes = ["ls", "git status"]; to allow every '
            'program write allowed_command_prefixes = ["*"].'
        )
    if "programs" in data:
        try:
            kwargs["program_specs"] = merged_specs(
                kwargs.get("program_specs", {}), data["programs"], source=source)
        except ConfigurationError as exc:
            raise PolicyFileError(str(exc)) from None
    extra: tuple[HardeningRule, ...] = kwargs.pop("hardening", ())
    base = DEFAULT_HARDENING if data.get("default_hardening", True) else ()
    kwargs["hardening"] = base + extra
    try:
        return cls(**kwargs)
    except PolicyFileError:
        raise
    except ConfigurationError as exc:
        raise PolicyFileError(f"{source}: {exc}") from None


def _rules_from(source: str, value: object) -> tuple[HardeningRule, ...]:
    if not isinstance(value, list):
        raise PolicyFileError(
            f"{source}: hardening = {value!r} is invalid: write [[hardening]] tables with "
            "program, option and why."
        )
    rules = []
    for i, entry in enumerate(value):
        where = f"{source}: hardening[{i}]"
        if not isinstance(entry, Mapping):
            raise PolicyFileError(f"{where} = {entry!r} is invalid: write a table.")
        for key in entry:
            if key not in _RULE_KEYS:
                raise PolicyFileError(
                    f"{where}: unknown field {key!r}. Valid fields: {', '.join(_RULE_KEYS)}."
                )
        try:
            rules.append(HardeningRule(**dict(entry)))
        except (ConfigurationError, TypeError) as exc:
            raise PolicyFileError(f"{where}: {exc}") from None
    return tuple(rules)
