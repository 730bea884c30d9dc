"""`fit --config FILE`: the file's own mistakes, found before Lightning is imported.

* `check_config_files`: a config file that is not valid YAML is one line naming the file, the line and
  the column (jsonargparse names ``"<unicode string>"``); a misspelt key (``data: {micro_batch: 4}``)
  is one line naming the file, the line and the key, with "did you mean" as for a misspelt flag.
  Keys are checked where their names are known without importing anything (`fit_args.group_arguments`):
  the top level, ``trainer``, ``data`` and TinyDNALM's ``model`` arguments (another model's are its
  own parser's), written nested (``data: {shards: x}``) or dotted (``data.shards: x``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import yaml

from bionemo_wds.cli.fit_args import (
    CONFIG_OPTIONS,
    TOP_LEVEL,
    TOP_LEVEL_MORE,
    FitArgError,
    class_in_spec,
    group_arguments,
    known_options,
    model_in_effect,
    same_class,
    split_option,
)
from bionemo_wds.cli.fit_args import DEFAULT_MODEL as TINY_MODEL
from bionemo_wds.cli.parsing import close_matches

#: Keys a subcommand's config file may hold at its top level (its options, without ``--``).
TOP_LEVEL_KEYS = tuple(option[2:] for option in (*TOP_LEVEL, *TOP_LEVEL_MORE) if option != "--help")
#: Keys of a model section that are not the model's arguments.
MODEL_SPEC_KEYS = frozenset({"class_path", "init_args", "dict_kwargs", "__path__"})


def file_text(value: str) -> str | None:
    """The text of the file `value` names; None when it names no readable file (the real parser says why)."""
    try:
        path = Path(value)
        return path.read_text() if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        return None


def config_files(argv: Sequence[str]) -> Iterator[tuple[int, Path, str]]:
    """(position, path, text) of each ``--config FILE`` of `argv` that names a readable file."""
    for i in range(len(argv)):
        name, value = split_option(argv, i)
        text = file_text(value) if name in CONFIG_OPTIONS and value is not None else None
        if value is not None and text is not None:
            yield i, Path(value), text


def compose(path: Path, text: str) -> yaml.Node | None:
    """The YAML node tree of a config file; `FitArgError` naming the file, line and column when the
    text is not YAML."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise FitArgError(f"--config {path}{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise FitArgError(f"--config {path}: not valid YAML: {exc}") from None


def entries(node: yaml.Node) -> Iterator[tuple[list[str], yaml.Node, int]]:
    """(key split at dots, value node, 1-based line) of each entry of a mapping node."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                yield str(key.value).split("."), value, key.start_mark.line + 1


def model_class(node: yaml.Node, in_effect: str) -> str:
    """The model class a ``model:`` section names (a class path, or a mapping with ``class_path``), or
    the class in effect when it names none."""
    if isinstance(node, yaml.ScalarNode):
        return class_in_spec(node.value) or in_effect
    for key, value, _ in entries(node):
        if key == ["class_path"] and isinstance(value, yaml.ScalarNode):
            return class_in_spec(value.value) or in_effect
    return in_effect


def set_names(group: str, rest: list[str], value: yaml.Node, line: int) -> Iterator[tuple[str, int]]:
    """(argument name, line) of each argument of `group` an entry sets: the first part of its dotted
    key after the group (``data.shards``), or each key of its mapping (``data: {shards: ...}``); a
    model's ``init_args`` are looked into, its ``class_path`` is not an argument."""
    if group == "model" and rest[:1] == ["init_args"]:
        rest = rest[1:]
    elif group == "model" and rest[:1] and rest[0] in MODEL_SPEC_KEYS:
        return
    if rest:
        yield rest[0], line
    elif isinstance(value, yaml.MappingNode):
        for key, inner, at in entries(value):
            yield from set_names(group, key, inner, at)


def unknown_key(path: Path, line: int, key: str) -> FitArgError:
    """The error for a config key no option takes, with the options closest to it spelt as flags
    (``--data.micro_batch``), as the same mistake made with a flag would get them."""
    known = [option for option in known_options() if option != "--help"]
    close = [option[2:] for option in close_matches(f"--{key}", known)]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return FitArgError(f"--config {path}, line {line}: unrecognized key {key}{hint}")


def check_config_file(path: Path, text: str, model_in_effect_here: str) -> None:
    """A config file's YAML and keys (see the module docstring); `FitArgError` for the first mistake."""
    root = compose(path, text)
    if not isinstance(root, yaml.MappingNode):
        return  # empty, or not a mapping: the real parser says what it needs
    known = group_arguments()
    for key, value, line in entries(root):
        group = key[0]
        if group not in TOP_LEVEL_KEYS:
            raise unknown_key(path, line, ".".join(key))
        if group not in known:
            continue  # a value of its own (a seed, a path), or a group whose names are not known here
        if group == "model" and not same_class(model_class(value, model_in_effect_here), TINY_MODEL):
            continue  # another class's arguments: its own parser knows them
        for name, at in set_names(group, key[1:], value, line):
            if name not in known[group]:
                raise unknown_key(path, at, f"{group}.{name}")


def check_config_files(argv: Sequence[str]) -> None:
    """Check each ``--config FILE`` of `argv` (after the subcommand): `FitArgError` for the first mistake."""
    classes = model_in_effect(argv)
    for i, path, text in config_files(argv):
        check_config_file(path, text, classes[i])
