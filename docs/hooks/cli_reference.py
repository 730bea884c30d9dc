"""MkDocs hook: the CLI reference page is generated from the command line's own parsers.

A page line ``<!-- cli-reference -->`` becomes one section per `bionemo-wds` subcommand, each holding
the text that ``bionemo-wds COMMAND --help`` prints today (run in-process through
`bionemo_wds.cli.main`, at a fixed width of 100 columns). The subcommands are read from the top-level
usage, so a new one (``show``, ...) appears without editing the page. Nothing is pasted: options in
the docs cannot drift from the code.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- cli-reference -->"
WIDTH = "100"
#: Lightning subcommands share `fit`'s options; one listing serves them all.
SAME_AS_FIT = ("validate", "test", "predict")
#: Long listings shown folded.
FOLDED = ("fit", "benchmark")


@contextlib.contextmanager
def _console(argv: list[str]) -> Iterator[io.StringIO]:
    """Run as if `bionemo-wds ARGV` were typed at a 100-column terminal; yields what it printed."""
    saved_argv, saved_columns = sys.argv, os.environ.get("COLUMNS")
    sys.argv = ["bionemo-wds", *argv]
    os.environ["COLUMNS"] = WIDTH
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            yield buf
    finally:
        sys.argv = saved_argv
        if saved_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_columns


def help_text(argv: list[str]) -> str:
    """What `bionemo-wds ARGV --help` prints (the parsers exit 0 after printing)."""
    from bionemo_wds.cli.main import main

    with _console([*argv, "--help"]) as buf:
        try:
            main([*argv, "--help"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise RuntimeError(f"`bionemo-wds {' '.join(argv)} --help` exited {exc.code}") from exc
    text = buf.getvalue().rstrip()
    if not text:
        raise RuntimeError(f"`bionemo-wds {' '.join(argv)} --help` printed nothing")
    return text


def subcommands(top_help: str) -> list[str]:
    """The subcommands named in the top-level usage's ``{a,b,...}``."""
    found = re.search(r"\{([a-z0-9,-]+)\}", top_help)
    if found is None:
        raise RuntimeError("no {subcommand,...} list in `bionemo-wds --help`")
    return found.group(1).split(",")


def _block(text: str, indent: str = "") -> str:
    body = "\n".join(f"{indent}{line}" if line else "" for line in text.splitlines())
    return f"{indent}```text\n{body}\n{indent}```"


def reference() -> str:
    """The generated markdown: the top-level help, then one section per subcommand."""
    top = help_text([])
    parts = ["## bionemo-wds", "", _block(top), ""]
    for command in subcommands(top):
        if command in SAME_AS_FIT:
            parts += [f"## bionemo-wds {command}", "", "Takes the same options as [`fit`](#bionemo-wds-fit).", ""]
            continue
        text = help_text([command])
        parts += [f"## bionemo-wds {command}", ""]
        if command in FOLDED:
            lines = len(text.splitlines())
            parts += [f'??? note "`bionemo-wds {command} --help` ({lines} lines)"', "", _block(text, "    "), ""]
        else:
            parts += [_block(text), ""]
    return "\n".join(parts)


def on_config(config: Any) -> Any:
    """Import the package from this checkout (the one the pages describe), installed or not."""
    root = os.path.dirname(os.path.abspath(config.config_file_path))
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker line of a page with the generated reference."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference())
