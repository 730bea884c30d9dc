"""Command-line parse errors as one line, naming the subcommand, with "did you mean" for a misspelt option.

argparse prints the usage (a dozen lines for `prepare`) before its error, and reports an unknown
option of a subcommand as the top-level parser's (``bionemo-wds: error: unrecognized arguments``,
after the list of every command). `OneLineParser` prints only ``<prog>: error: <message>`` and exits
with 2; `parse_command` reports what no parser knew as an error of the subcommand that was given,
with the closest option names. Abbreviations are off (`SUBCOMMAND_OPTIONS`): a misspelt
``--strid`` is refused with a suggestion rather than silently taken for ``--stride``.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

#: Keyword arguments of every subcommand parser: no option abbreviations (`--seq-len` is an error).
SUBCOMMAND_OPTIONS: dict[str, Any] = {"allow_abbrev": False}


class OneLineParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line, ``<prog>: error: <message>`` (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        """Print the one-line error (with where the options are listed) and exit with 2."""
        self.exit(2, f"{self.prog}: error: {message} (options: {self.prog} --help)\n")


#: An option entry of argparse's help: two spaces, then the option strings (``--out DIR|URL, -o DIR|URL``).
_ENTRY = re.compile(r"^  (-\S.*?)(?:\s{2,}|$)")


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string `parser` accepts (``--seq-length``, ``-o``, ...), read from its help (argparse
    lists its options nowhere public)."""
    flags = []
    for line in parser.format_help().splitlines():
        entry = _ENTRY.match(line)
        if entry is not None:
            flags += [part.split(" ", 1)[0] for part in entry.group(1).split(", ") if part.startswith("-")]
    return flags


def suggestion(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean --seq-length?"`` (or ``--x or --y``) for the choices closest to `word` by
    difflib's ratio (as Python's own argparse does from 3.14 on, `close_matches`); ``""`` when none is close.
    Shared by every subcommand's parser and `fit`'s option check (`cli.fit_args`)."""
    close = close_matches(word, choices)
    return f"; did you mean {' or '.join(close)}?" if close else ""


#: A second suggestion is offered only when it is about as close as the first (by difflib's ratio).
SECOND_WITHIN = 0.05


def close_matches(word: str, choices: Iterable[str]) -> list[str]:
    """The choices closest to `word` by difflib's ratio, as `suggestion` offers them: at most two, the
    second only when about as close as the first (``--data.micro_batch``: ``--data.micro_batch_size``,
    not also ``--data.rc_prob``)."""
    close = difflib.get_close_matches(word, list(dict.fromkeys(choices)), n=2, cutoff=0.6)
    ratios = [difflib.SequenceMatcher(None, word, choice).ratio() for choice in close]
    return [choice for choice, ratio in zip(close, ratios) if ratio >= ratios[0] - SECOND_WITHIN]


def unknown_message(extras: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """The error for arguments no parser took: the first unknown option with a suggestion, or the
    stray values."""
    options = [arg.split("=", 1)[0] for arg in extras if arg.startswith("-") and len(arg) > 1]
    if options:
        return f"unrecognized option {options[0]}{suggestion(options[0], option_strings(parser))}"
    return f"unrecognized arguments: {' '.join(extras)}"


def parse_command(
    parser: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser], argv: Sequence[str]
) -> argparse.Namespace:
    """`parser.parse_args(argv)`, but arguments left over are reported by the subcommand's parser
    (`commands[args.command]`), in one line with a suggestion; exits with 2 on any parse error."""
    args, extras = parser.parse_known_args(list(argv))
    if extras:
        owner = commands.get(getattr(args, "command", None) or "", parser)
        owner.error(unknown_message(extras, owner))
    return args
