"""R7 as allowlists: what a program may be given, as data.

A blocklist of dangerous options loses to option syntax: ``sed -nes,^,cmd,e`` bundles
``-e`` behind ``-n``, ``sed --ex=…`` abbreviates ``--expression``, ``git config --get
--no-get`` negates the option that made the command read-only. A `ProgramSpec` says
instead what a program may take, and the command line is parsed the way the program's
own parser (getopt, getopt_long, git's parse-options) would read it:

- short options alone (``-n``), bundled (``-nes``: ``-n``, then ``-e`` whose value is
  the rest of the word), with a value attached (``-ofile``) or in the next word;
- long options exactly (``--expression``), with ``=value`` or the value in the next
  word; an abbreviation (``--ex``) is refused naming the full option, because the
  program resolves it against its whole option table, which a spec does not list;
- a ``--no-`` negation is a separate option, allowed only when the spec lists it;
- ``--`` ends the options; a lone ``-`` is an operand;
- single-dash long options (find's ``-name``) are whole words;
- subcommands (``git log``): options before the subcommand are the program's global
  options, the rest is parsed with the subcommand's spec; a program whose spec lists
  subcommands accepts no other;
- operands: how many, which form (``date +FORMAT`` only), and a script analyzer for
  the values of script options and the first operand (``sed``, ``awk``).

Anything the spec does not list is refused, naming the option and the spec. A word
bash expands (``$x``, ``*``) is refused where it could spell an option.

Specs ship in ``sandbox/policies/specs.toml`` (`BUILTIN_SPECS`); a policy applies them
with ``program_specs = "builtin"`` and may add or replace its own (``[programs.NAME]``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sandbox.bash.syntax.model import Word
from sandbox.bash.syntax.words import may_be_several
from sandbox.errors import ConfigurationError

__all__ = ["ProgramSpec", "SpecViolation", "builtin_specs", "check_spec", "runs_programs",
           "specs_from_mapping"]

_NONE, _REQUIRED, _OPTIONAL = "none", "required", "optional"
_SPEC_KEYS = frozenset({
    "options", "value_options", "optional_value_options", "operands", "operand_pattern",
    "script_options", "analyzer", "subcommands", "single_dash_long", "any_options", "why",
    "examples", "bundles", "runs_programs", "unlisted_options",
})  # fmt: skip


@dataclass(frozen=True)
class ProgramSpec:
    """The options, subcommands and operands one program (or subcommand) may take.

    ``options`` maps each allowed option to ``"none"`` (a flag), ``"required"`` (takes
    a value) or ``"optional"`` (``--color[=when]``: a value only after ``=``).
    ``operands`` is the most operands allowed (None: any); ``operand_pattern`` a
    regular expression every operand must match. ``script_options`` are options whose
    value is a script handed to ``analyzer`` (also given the first operand when no
    script option was used). ``subcommands`` names the subcommands that have a spec
    of their own (``"git log"``). ``any_options`` lets any option through (for
    programs that run code by design: ``python3``); ``examples`` gives a sample
    value for value options, used by the tests that run every allowed option.
    ``bundles = false`` takes one short option per word, a value in the next word
    (tree reads ``-Lo 2 M`` as ``-L 2 -o M``, not as getopt's ``-L o``); only an
    optional value is glued (``-U3``).
    """

    name: str
    options: Mapping[str, str] = field(default_factory=dict)
    operands: int | None = None
    operand_pattern: str | None = None
    script_options: tuple[str, ...] = ()
    analyzer: str | None = None
    subcommands: tuple[str, ...] = ()
    single_dash_long: bool = False
    any_options: bool = False
    why: str = ""
    examples: Mapping[str, str] = field(default_factory=dict)
    bundles: bool = True
    runs_programs: bool = False
    program_options: frozenset[str] = frozenset()
    ask_unlisted: bool = False

    @property
    def long_options(self) -> tuple[str, ...]:
        return tuple(o for o in self.options if o.startswith("--"))


@dataclass(frozen=True)
class SpecViolation:
    """Why a command line does not fit its program's spec."""

    spec: str
    token: str
    message: str


def _tuple(source: str, key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple) or not all(
        isinstance(v, str) and v for v in value
    ):
        raise ConfigurationError(
            f"{source}: {key} must be a list of non-empty strings, got {value!r}")
    return tuple(value)


def spec_from_mapping(name: str, data: Mapping[str, Any], *, source: str) -> ProgramSpec:
    """Build one spec from its TOML table, naming the file and key of any mistake."""
    where = f"{source}: [programs.{name!r}]" if " " in name else f"{source}: [programs.{name}]"
    unknown = set(data) - _SPEC_KEYS
    if unknown:
        raise ConfigurationError(
            f"{where} has unknown keys {sorted(unknown)}; a spec takes {sorted(_SPEC_KEYS)}")
    options: dict[str, str] = {}
    for key, kind in (("options", _NONE), ("value_options", _REQUIRED),
                      ("optional_value_options", _OPTIONAL)):
        for option in _tuple(where, key, data.get(key, [])):
            if not option.startswith("-") and option not in ("(", ")", "!"):
                raise ConfigurationError(f"{where}: option {option!r} must start with '-'")
            options[option] = kind
    operands = data.get("operands")
    if operands is not None and (isinstance(operands, bool) or not isinstance(operands, int)
                                 or operands < 0):
        raise ConfigurationError(f"{where}: operands must be a count >= 0, got {operands!r}")
    pattern = data.get("operand_pattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise ConfigurationError(f"{where}: operand_pattern {pattern!r}: {exc}") from None
    analyzer = data.get("analyzer")
    if analyzer is not None and analyzer not in _analyzers():
        raise ConfigurationError(
            f"{where}: analyzer {analyzer!r} is unknown; known: {sorted(_analyzers())}")
    scripts = _tuple(where, "script_options", data.get("script_options", []))
    for option in scripts:
        if options.get(option) != _REQUIRED:
            raise ConfigurationError(f"{where}: script option {option!r} must be a value option")
    examples = data.get("examples", {})
    if not isinstance(examples, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in examples.items()):
        raise ConfigurationError(f"{where}: examples must map options to sample values")
    subcommands = _tuple(where, "subcommands", data.get("subcommands", []))
    runs = data.get("runs_programs", False)
    program_options: frozenset[str] = frozenset()
    if isinstance(runs, bool):
        whole = runs
    else:
        whole = False
        program_options = frozenset(_tuple(where, "runs_programs", runs))
        for option in program_options:
            if option not in options:
                raise ConfigurationError(
                    f"{where}: runs_programs lists {option!r}, which is not one of its options; "
                    "list it under options or value_options too")
    unlisted = data.get("unlisted_options", "refuse")
    if unlisted not in ("refuse", "ask"):
        raise ConfigurationError(
            f"{where}: unlisted_options must be \"refuse\" or \"ask\", got {unlisted!r}")
    return ProgramSpec(
        name=name,
        options=MappingProxyType(options),
        operands=operands,
        operand_pattern=pattern,
        script_options=scripts,
        analyzer=analyzer,
        subcommands=tuple(f"{name} {s}" for s in subcommands),
        single_dash_long=bool(data.get("single_dash_long", False)),
        any_options=bool(data.get("any_options", False)),
        why=str(data.get("why", "")),
        examples=MappingProxyType(dict(examples)),
        bundles=bool(data.get("bundles", True)),
        runs_programs=whole,
        program_options=program_options,
        ask_unlisted=unlisted == "ask",
    )


def specs_from_mapping(data: Mapping[str, Any], *, source: str,
                       base: Mapping[str, ProgramSpec] | None = None) -> dict[str, ProgramSpec]:
    """``{"sed": {...}, "git": {..., "subcommands": [...]}, "git log": {...}}``, laid
    over ``base`` (a subcommand may have its spec there)."""
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"{source}: programs must be a table of program specs")
    specs = {}
    for name, table in data.items():
        if not isinstance(table, Mapping):
            raise ConfigurationError(f"{source}: [programs.{name}] must be a table")
        specs[name] = spec_from_mapping(name, table, source=source)
    known = {**(base or {}), **specs}
    for spec in specs.values():
        for sub in spec.subcommands:
            if sub not in known:
                raise ConfigurationError(
                    f"{source}: [programs.{spec.name}] lists subcommand {sub.split()[-1]!r} "
                    f"but there is no [programs.{sub!r}] spec for it")
    return specs


SPECS_FILE = Path(__file__).resolve().parents[2] / "policies" / "specs.toml"


@cache
def builtin_specs() -> Mapping[str, ProgramSpec]:
    """The specs shipped with the package (sandbox/policies/specs.toml)."""
    with SPECS_FILE.open("rb") as f:
        data = tomllib.load(f)
    return MappingProxyType(specs_from_mapping(data, source=str(SPECS_FILE)))


def merged(base: Mapping[str, ProgramSpec], data: Mapping[str, Any], *,
           source: str) -> dict[str, ProgramSpec]:
    """``base`` with a policy file's own ``[programs.NAME]`` specs added or replacing."""
    return {**base, **specs_from_mapping(data, source=source, base=base)}


@cache
def _analyzers() -> Mapping[str, Callable[[str], str | None]]:
    from sandbox.bash.policy.analyzers import awk_program_danger, sed_script_danger

    return {"sed-script": sed_script_danger, "awk-program": awk_program_danger}


# ---------------------------------------------------------------------------
# Parsing a command line against a spec


def _could_be_option(word: Word) -> bool:
    """A word bash expands could spell an option unless its literal start rules it out."""
    return word.prefix == "" or word.prefix.startswith("-")


def check_spec(words: Sequence[Word], specs: Mapping[str, ProgramSpec],
               runs: list[str] | None = None) -> SpecViolation | None:
    """Check ``words`` (argv, the program first) against the program's spec, if any.

    ``runs``, when given, collects why the command line runs another program (see
    `runs_programs`); a spec with ``unlisted_options = "ask"`` then puts what goes
    beyond it there instead of returning a violation."""
    spec = specs.get(words[0].shown)
    if spec is None:
        return None
    return _check(spec, words, 1, specs, runs)


def runs_programs(words: Sequence[Word], specs: Mapping[str, ProgramSpec]) -> str | None:
    """Why the command line ``words`` makes its program run another program, as its
    spec says (``runs_programs``, ``unlisted_options = "ask"``), or None."""
    runs: list[str] = []
    if check_spec(words, specs, runs) is not None:
        return None
    return runs[0] if runs else None


def _check(spec: ProgramSpec, words: Sequence[Word], i: int,
           specs: Mapping[str, ProgramSpec], runs: list[str] | None = None) -> SpecViolation | None:
    if spec.runs_programs and runs is not None:
        runs.append(f"{spec.name!r} runs other programs" + (f" ({spec.why})" if spec.why else ""))
    if spec.ask_unlisted and runs is not None:
        problem = _check_strict(spec, words, i, specs, runs)
        if problem is not None:
            runs.append(f"{problem.message}, and {spec.name} may then run a program the "
                        f"{spec.name!r} spec does not know of" + (f" ({spec.why})" if spec.why else ""))
        return None
    return _check_strict(spec, words, i, specs, runs)


def _check_strict(spec: ProgramSpec, words: Sequence[Word], i: int,
                  specs: Mapping[str, ProgramSpec], runs: list[str] | None) -> SpecViolation | None:
    operands: list[Word] = []
    scripts: list[str] = []
    options_done = False
    n = len(words)
    while i < n:
        word = words[i]
        value = word.value
        if value is None and not options_done and _could_be_option(word):
            if spec.any_options:
                operands.append(word)
                i += 1
                continue
            if word.splits:
                return SpecViolation(spec.name, word.text,
                                     f"{word.text!r} may become several words (an unquoted "
                                     "expansion is split, or dropped when empty; \"${a[@]}\" "
                                     "is one word per element), and only the first starts with "
                                     f"its literal text: the {spec.name!r} spec cannot check the "
                                     "others; quote it as one word (\"$v\") or put '--' before "
                                     "the operands")
            glob = f"start it with './' ('./{word.text}'), " if word.text[:1] in "*?[" else ""
            return SpecViolation(spec.name, word.text,
                                 f"{word.text!r} is expanded by bash and could spell an option "
                                 f"that the {spec.name!r} spec does not allow; write it literally, "
                                 f"{glob}or put '--' before the operands")
        if options_done or value is None or not value.startswith("-") or value == "-":
            if spec.subcommands and not operands and not options_done:
                sub = f"{spec.name} {value}" if value is not None else None
                if sub in spec.subcommands:
                    return _check(specs[sub], words, i + 1, specs, runs)
                allowed = ", ".join(s.split()[-1] for s in spec.subcommands)
                return SpecViolation(spec.name, word.text,
                                     f"{word.shown!r} is not a subcommand the {spec.name!r} spec "
                                     f"allows ({allowed})")
            operands.append(word)
            i += 1
            continue
        if value == "--":
            options_done = not spec.single_dash_long  # find reads predicates after '--'
            i += 1
            continue
        if spec.any_options:
            i += 1
            continue
        step, problem = _option(spec, words, i, scripts, runs)
        if problem is not None:
            return problem
        i += step
    if spec.subcommands:
        return SpecViolation(spec.name, spec.name,
                             f"{spec.name!r} needs one of its subcommands: "
                             + ", ".join(s.split()[-1] for s in spec.subcommands))
    if spec.operands is not None:
        many = next((w for w in operands if may_be_several(w)), None)
        if many is not None:
            return SpecViolation(spec.name, many.text,
                                 f"{many.text!r} is expanded by bash and may become several "
                                 f"operands, and the {spec.name!r} spec allows at most "
                                 f"{spec.operands}; write the operands literally")
    if spec.operands is not None and len(operands) > spec.operands:
        extra = operands[spec.operands]
        limit = "no operands" if spec.operands == 0 else f"at most {spec.operands} operand(s)"
        return SpecViolation(spec.name, extra.text,
                             f"{extra.shown!r}: the {spec.name!r} spec allows {limit}")
    if spec.operand_pattern is not None:
        for word in operands:
            if word.value is None or not re.fullmatch(spec.operand_pattern, word.value):
                return SpecViolation(spec.name, word.text,
                                     f"{word.shown!r} is not an operand the {spec.name!r} spec "
                                     f"allows (it must match {spec.operand_pattern})")
    if spec.analyzer is not None:
        analyze = _analyzers()[spec.analyzer]
        texts = scripts or ([operands[0].value] if operands and operands[0].value is not None
                            else [])
        if not scripts and operands and operands[0].value is None:
            return SpecViolation(spec.name, operands[0].text,
                                 f"the {spec.name} script {operands[0].text!r} is expanded by "
                                 "bash and cannot be checked")
        for text in texts:
            danger = analyze(text)
            if danger is not None:
                return SpecViolation(spec.name, text, f"the {spec.name} script {danger}")
    return None


def _option(spec: ProgramSpec, words: Sequence[Word], i: int,
            scripts: list[str], runs: list[str] | None = None) -> tuple[int, SpecViolation | None]:
    """Read the option word ``words[i]``: how many words it used, or what is wrong."""
    value = words[i].value
    assert value is not None
    options = spec.options
    nxt = words[i + 1] if i + 1 < len(words) else None

    def takes(option: str, attached: str | None) -> tuple[int, SpecViolation | None]:
        kind = options[option]
        _runs(spec, option, runs)
        if kind == _NONE:
            if attached is not None:
                return 0, SpecViolation(spec.name, value,
                                        f"{option} takes no value ({value!r})")
            return 1, None
        if attached is not None:
            if option in spec.script_options:
                scripts.append(attached)
            return 1, None
        if kind == _OPTIONAL:
            return 1, None
        if nxt is None:
            return 0, SpecViolation(spec.name, value, f"{option} needs a value")
        if may_be_several(nxt):
            return 0, SpecViolation(spec.name, nxt.text,
                                    f"the value of {option}, {nxt.text!r}, may become several "
                                    "words or none (an unquoted expansion, a glob, a brace, "
                                    "\"$@\"), and the words after it shift; write it literally "
                                    "or as one quoted word (\"$v\")")
        if option in spec.script_options:
            if nxt.value is None:
                return 0, SpecViolation(spec.name, nxt.text,
                                        f"the {option} script {nxt.text!r} is expanded by bash "
                                        "and cannot be checked")
            scripts.append(nxt.value)
        return 2, None

    if value.startswith("--") or spec.single_dash_long:
        name, eq, attached = value.partition("=")
        if name in options:
            return takes(name, attached if eq else None)
        if spec.single_dash_long and not value.startswith("--"):
            return 0, _unlisted(spec, name)
        candidates = [o for o in spec.long_options if o.startswith(name)]
        if candidates and not name.startswith("--no-"):
            full = candidates[0] if len(candidates) == 1 else " or ".join(candidates)
            return 0, SpecViolation(spec.name, value,
                                    f"{name!r} abbreviates an option; write it in full ({full}): "
                                    "the program resolves abbreviations against options the "
                                    f"{spec.name!r} spec does not list")
        return 0, _unlisted(spec, name)
    if value[1:].isdigit() and "-NUM" in options:
        return 1, None  # head -5, grep -3: the obsolete numeric form
    if not spec.bundles and len(value) > 2 and options.get(value[:2]) != _OPTIONAL:
        return 0, SpecViolation(spec.name, value,
                                f"{value!r}: the {spec.name!r} spec takes one short option per "
                                f"word, its value in the next word ('-a -L 2', not '-aL2'): "
                                f"{spec.name} reads bundles differently from getopt")
    # A bundle of short options: each letter a flag, until one that takes a value,
    # which takes the rest of the word (or the next word).
    j = 1
    while j < len(value):
        option = "-" + value[j]
        if option not in options:
            return 0, _unlisted(spec, option, bundle=value if len(value) > 2 else None)
        if options[option] != _NONE:
            rest = value[j + 1:]
            if options[option] == _OPTIONAL:
                _runs(spec, option, runs)
                return 1, None  # -I[FMT]: an optional value is glued or absent
            return takes(option, rest if rest else None)
        _runs(spec, option, runs)
        j += 1
    return 1, None


def _runs(spec: ProgramSpec, option: str, runs: list[str] | None) -> None:
    if option in spec.program_options and runs is not None:
        runs.append(f"{option} makes {spec.name} run another program")


def _unlisted(spec: ProgramSpec, option: str, *, bundle: str | None = None) -> SpecViolation:
    where = f" (in the bundle {bundle!r})" if bundle else ""
    listed = ", ".join(sorted(spec.options)) or "none"
    if len(listed) > 300:
        listed = listed[:300] + ", …"
    return SpecViolation(spec.name, option,
                         f"{option}{where} is not an option the {spec.name!r} spec allows "
                         f"(allowed: {listed})")
