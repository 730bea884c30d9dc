"""How an option of `PrepareOptions` is declared: a dataclass field whose metadata holds a
`CliOption` (its command-line spelling, parser type, choices, allowed values and help), written with
`option(...)`. The command line, the YAML config keys and `--help` are built from these alone
(`bionemo_wds.cli.prepare`), and `CliOption.problem` is the one check of a value.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Key of the `CliOption` in a `PrepareOptions` field's metadata.
CLI = "cli"


@dataclass(frozen=True)
class CliOption:
    """How one `PrepareOptions` field is spelled on the command line and in a YAML config.

    Only what the field's name, type and default cannot say is written here; everything else
    (the option name `--seq-length` for `seq_length`, the value type `int` for `int | None`, the
    default shown by `--help`) is derived from the field itself.
    """

    #: One line for `--help` (without the default, which `--help` adds from the field).
    help: str
    #: Option strings when they are not just `--field-name` (e.g. `("--quiet", "-q")`).
    flags: tuple[str, ...] = ()
    #: One command-line value -> the field's value; None: the field's type (`int`, `str`).
    parse: Callable[[str], Any] | None = None
    #: Allowed values (the tuple the checking code defines).
    choices: tuple[str, ...] | None = None
    #: Placeholder for the value in `--help`; None: the option name in capitals.
    metavar: str | None = None
    #: The option takes no value and giving it sets the field to this (`--quiet` sets progress=False).
    switch: bool | None = None
    #: The option may be repeated; its parsed values, in order, -> the field's value.
    collect: Callable[[list[Any]], Any] | None = None
    #: What the default means, for `--help`, when its value alone does not say (e.g. None).
    default_help: str | None = None
    #: Smallest and largest allowed value of an integer option (None: no bound; None values are not checked).
    minimum: int | None = None
    maximum: int | None = None
    #: A value -> what is wrong with it ("must be ..."), or None when it is fine.
    check: Callable[[Any], str | None] | None = None

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` for this option, or None (None is the "not given" of optional options)."""
        if value is None:
            return None
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        lo, hi = self.minimum, self.maximum
        if lo is not None or hi is not None:
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):  # numpy integers are fine
                return "must be an integer"
            number = int(value)
            if lo is not None and hi is not None and not lo <= number <= hi:
                return f"must be between {lo} and {hi}"
            if lo is not None and number < lo:
                return f"must be at least {lo}"
            if hi is not None and number > hi:
                return f"must be at most {hi}"
        return self.check(value) if self.check is not None else None


def option(default: Any, help: str, **cli: Any) -> Any:
    """A dataclass field with `default` and its command-line description (`CliOption(help, **cli)`)."""
    return field(default=default, metadata={CLI: CliOption(help=help, **cli)})


def cli_of(f: dataclasses.Field) -> CliOption:
    """The `CliOption` of a `PrepareOptions` field; a field declared without `option(...)` is an error."""
    cli = f.metadata.get(CLI)
    if not isinstance(cli, CliOption):
        raise TypeError(f"PrepareOptions.{f.name} has no command-line option: declare it with option(...)")
    return cli


def flags_of(f: dataclasses.Field) -> tuple[str, ...]:
    """Option strings of a field, the long one first: the `CliOption.flags`, or `--field-name`."""
    return cli_of(f).flags or ("--" + f.name.replace("_", "-"),)


def shown_value(value: Any) -> str:
    """A value as a message shows it: `0.8,0.1,0.1` for a sequence (as typed), quoted for a string."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return repr(value) if isinstance(value, str) else str(value)
