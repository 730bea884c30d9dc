"""The `fit|validate|test|predict` command line, read before Lightning is imported.

Two jobs, both done on the argument list itself, in a few milliseconds (importing Lightning to build
the real parser takes several seconds of CPU):

* `separate_model_switches`: a model named on the command line (``--model my_pkg.MyLM``,
  ``--model.class_path ...``) or in a ``--config`` file starts from that class's own defaults.
  jsonargparse, which LightningCLI parses with, keeps the init_args of the class in effect before
  (the default `TinyDNALM`, or a config file's) whenever the new class takes an argument of the same
  name, so a model with ``lr=0.01`` silently trained at TinyDNALM's 0.002. An explicit
  ``--model null`` before each switch to another class clears them; init_args given for the new
  class after it (``--model.lr 0.05``, a config's ``init_args``) still apply.
* `check_options`: what is certainly wrong fails at once, in one line: a ``--trainer.X``,
  ``--data.X`` or (for `TinyDNALM`) ``--model.X`` that is not an argument of the class (with "did you
  mean"; abbreviations such as ``--trainer.max_step`` are not expanded), and a ``--model`` whose
  module cannot be found. Everything else is left to the real parser, whose errors are also one line.

The argument names come from the classes' source (`ast`), not from importing them; a source that
cannot be read skips that check and leaves it to the real parser.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from bionemo_wds.cli.parsing import suggestion

DEFAULT_MODEL = "bionemo_wds.models.tiny_lm.TinyDNALM"
PACKAGE = Path(__file__).resolve().parents[1]
#: Options naming a model class (their value), or a config file that may name one.
CONFIG_OPTIONS = ("--config", "-c")
MODEL_OPTIONS = ("--model", "--model.class_path")
#: The hint every "cannot import" message ends with.
IMPORT_HINT = "the module must be importable: run from the directory that holds it, or add that directory to PYTHONPATH"


class FitArgError(Exception):
    """A `fit` command line that cannot work, named in one line."""


def split_option(argv: Sequence[str], i: int) -> tuple[str, str | None]:
    """(option name, its value) of ``argv[i]``: ``--x=v`` or ``--x v`` (None when nothing follows)."""
    name, eq, value = argv[i].partition("=")
    if eq:
        return name, value
    return name, argv[i + 1] if i + 1 < len(argv) else None


def class_in_spec(spec: Any) -> str | None:
    """The class path a model value names: a string, or a mapping with ``class_path``."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, dict) and isinstance(spec.get("class_path"), str):
        return spec["class_path"]
    return None


def read_yaml(value: str) -> Any:
    """A YAML file's content, or `value` itself read as YAML (jsonargparse takes both); None when neither."""
    try:
        path = Path(value)
        text = path.read_text() if path.is_file() else value
        return yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return None


def named_class(name: str, value: str | None) -> str | None:
    """The model class an option names: ``--model X`` (a path, name or mapping), ``--model.class_path
    X``, or a ``--config`` file whose ``model`` section names one. None for anything else."""
    if value is None:
        return None
    if name in CONFIG_OPTIONS:
        config = read_yaml(value)
        return class_in_spec(config.get("model")) if isinstance(config, dict) else None
    if name == "--model.class_path":
        return value
    if name == "--model":
        if value.lower() in ("null", "none", "help"):
            return None
        spec = read_yaml(value) if value.lstrip().startswith("{") or value.endswith((".yaml", ".yml")) else value
        return class_in_spec(spec)
    return None


def same_class(a: str, b: str) -> bool:
    """Whether two class names name one class (``TinyDNALM`` and its full path do)."""
    if a == b:
        return True
    short = "." not in a or "." not in b
    return short and a.rsplit(".", 1)[-1] == b.rsplit(".", 1)[-1]


def model_switches(argv: Sequence[str]) -> Iterator[tuple[int, str]]:
    """(position, class) of each option in `argv` naming a model class."""
    for i in range(len(argv)):
        name, value = split_option(argv, i)
        if name in CONFIG_OPTIONS or name in MODEL_OPTIONS:
            named = named_class(name, value)
            if named is not None:
                yield i, named


def separate_model_switches(argv: Sequence[str]) -> list[str]:
    """`argv` with ``--model null`` before each option that switches the model to another class, so
    that the new class starts from its own defaults (see the module docstring)."""
    out: list[str] = []
    current, at = DEFAULT_MODEL, 0
    for i, named in model_switches(argv):
        out.extend(argv[at:i])
        if not same_class(named, current):
            out.extend(["--model", "null"])
        out.append(argv[i])
        at, current = i + 1, named
    return out + list(argv[at:])


def model_in_effect(argv: Sequence[str]) -> list[str]:
    """The model class in effect at each position of `argv` (the default until one is named)."""
    classes, current = [], DEFAULT_MODEL
    switches = dict(model_switches(argv))
    for i in range(len(argv)):
        current = switches.get(i, current)
        classes.append(current)
    return classes


# -- the classes' argument names, from their source -------------------------------------------------


def init_arguments(path: Path, class_name: str) -> frozenset[str] | None:
    """The ``__init__`` argument names of `class_name` in the Python source `path` (None when unreadable)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                    return frozenset(names[1:] if names[:1] == ["self"] else names)
    return None


def package_file(package: str, relative: str) -> Path | None:
    """A file of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0], relative) if locations else None


@cache
def group_arguments() -> dict[str, frozenset[str]]:
    """``trainer``, ``data`` and (TinyDNALM's) ``model`` -> the argument names their options may start with."""
    sources = {
        "trainer": (package_file("lightning", "pytorch/trainer/trainer.py"), "Trainer"),
        "data": (PACKAGE / "lightning" / "datamodule.py", "GenomicWebDataModule"),
        "model": (PACKAGE / "models" / "tiny_lm.py", "TinyDNALM"),
    }
    out = {}
    for group, (path, class_name) in sources.items():
        names = init_arguments(path, class_name) if path is not None else None
        if names:
            out[group] = names | {"help"} | ({"class_path", "init_args"} if group == "model" else set())
    return out


# -- the checks ---------------------------------------------------------------------------------------


def check_importable(option: str, class_path: str) -> None:
    """A ``--model`` class path whose module cannot be found: one line saying so, with the hint."""
    module, _, _ = class_path.rpartition(".")
    if not module:
        return  # a bare class name: jsonargparse resolves it among the classes imported
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError as exc:  # a parent package is missing or fails to import
        raise FitArgError(f"{option} {class_path}: cannot import module {module!r} ({exc}); {IMPORT_HINT}") from None
    except ValueError:
        found = False
    if not found:
        raise FitArgError(f"{option} {class_path}: no module named {module!r}; {IMPORT_HINT}")


def unknown_option(name: str, argv_class: str) -> str | None:
    """Why ``--group.key...`` is not an option (with a suggestion), or None when it may be one."""
    parts = name[2:].rstrip("+").split(".")  # ``--trainer.callbacks+=...`` appends to a list
    group = parts[0]
    if group == "model" and not same_class(argv_class, DEFAULT_MODEL):
        return None  # another class's options: its own parser knows them
    known = group_arguments().get(group)
    if known is None or len(parts) < 2:
        return None
    key = parts[2] if group == "model" and parts[1] == "init_args" and len(parts) > 2 else parts[1]
    if key in known:
        return None
    choices = [f"--{group}.{k}" for k in sorted(known)]
    return f"unrecognized option {name}{suggestion(f'--{group}.{key}', choices)}"


def check_options(argv: Sequence[str]) -> None:
    """Raise `FitArgError` for the option of `argv` (after the subcommand) that certainly cannot work."""
    for i, named in model_switches(argv):
        name, value = split_option(argv, i)
        check_importable(name if name in MODEL_OPTIONS else f"{name} {value}: model", named)
    classes = model_in_effect(argv)
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            problem = unknown_option(split_option(argv, i)[0], classes[i])
            if problem is not None:
                raise FitArgError(problem)


# -- the real parser's errors, in one line --------------------------------------------------------------

#: Top-level options of the subcommands (for "did you mean" when the real parser finds an unknown one).
TOP_LEVEL = ("--config", "--print_config", "--seed_everything", "--trainer", "--model", "--data", "--optimizer")
TOP_LEVEL_MORE = ("--lr_scheduler", "--ckpt_path", "--weights_only", "--verbose", "--return_predictions", "--help")
KEY = re.compile(r'^Parser key "([^"]+)":\s*(.*)$')
CLASS_PATH = re.compile(r"^- Problem with given class_path '([^']+)':$")
NOT_ACCEPTED = re.compile(r"^Option '([^']+)' is not accepted$")
#: A key no option takes, from a config the quick check did not read (``--config '{data: ...}'``).
NOT_ACCEPTED_BY = re.compile(r"^Subcommand '[^']+' does not accept option '([^']+)'$")


def known_options() -> list[str]:
    """Every option spelling this module knows of (top level and ``--group.argument``)."""
    grouped = [f"--{group}.{name}" for group, names in group_arguments().items() for name in sorted(names)]
    return [*TOP_LEVEL, *TOP_LEVEL_MORE, *grouped]


def class_arguments(class_path: str) -> list[str]:
    """The ``__init__`` argument names of an (already imported) class, or none when it cannot be read."""
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    except (ImportError, AttributeError, ValueError, TypeError):
        return []


def tidy(text: str) -> str:
    """jsonargparse's wording, shortened: ``<class 'int'>`` -> ``int``."""
    text = re.sub(r"Expected an? <class '([\w.]+)'>\. Got value: (.*)$", r"expected \1, got \2", text.strip())
    return re.sub(r"<class '([\w.]+)'>", r"\1", text)


def one_line(message: str) -> str:
    """The error of jsonargparse's (several-line) `message`, as one line naming the option."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return "invalid arguments"
    first = lines[0]
    if first.lower().startswith("unrecognized arguments:"):
        option = (first.split(":", 1)[1].split() or ["?"])[0]
        return f"unrecognized option {option}{suggestion(option.split('=')[0], known_options())}"
    for pattern in (NOT_ACCEPTED_BY, NOT_ACCEPTED):
        unknown = pattern.match(first)
        if unknown:
            key = unknown.group(1)
            return f"unrecognized key {key}{suggestion(key, [option[2:] for option in known_options()])}"
    match = KEY.match(first)
    if not match:
        return tidy(" ".join(lines))
    key, rest = match.groups()
    body = ([rest] if rest else []) + lines[1:]
    for i, line in enumerate(body):  # a subclass (the model): the reason its class was refused
        found = CLASS_PATH.match(line)
        if found:
            return class_error(key, found.group(1), inner_lines(body[i + 1 :]))
    if key == "model" and any(line.startswith("- Expected a dot import path string") for line in body):
        given = body[-1].split(":", 1)[-1].strip() if body[-1].startswith("Given value:") else "?"
        return f"--model {given}: give the model's import path, module.Class; {IMPORT_HINT}"
    reasons = [line for line in body if not line.startswith(("Given value", "Subtypes:", "Errors:"))]
    return f"--{key}: {tidy(' '.join(reasons))}"


def inner_lines(lines: list[str]) -> list[str]:
    """The lines of one refused union member, up to the next member's (``- Expected ...``)."""
    out = []
    for line in lines:
        if line.startswith("- "):
            break
        out.append(line)
    return out


def class_error(key: str, class_path: str, reasons: list[str]) -> str:
    """One line for a model (``--model``) its class refused: an unknown argument (with "did you mean"),
    a bad value (naming the argument), or a class that is not there."""
    option = f"--{key}"
    if not reasons:
        return f"{option} {class_path}: cannot be used"
    not_accepted = NOT_ACCEPTED.match(reasons[0])
    if not_accepted:
        name = not_accepted.group(1)
        choices = [f"{option}.{p}" for p in class_arguments(class_path)]
        hint = suggestion(f"{option}.{name}", choices)
        return f"unrecognized option {option}.{name} ({class_path} has no argument {name!r}){hint}"
    inner = KEY.match(reasons[0])
    if inner:
        rest = [inner.group(2), *reasons[1:]] if inner.group(2) else reasons[1:]
        return f"{option}.{inner.group(1)}: {tidy(' '.join(rest))}"
    return f"{option} {class_path}: {tidy(' '.join(reasons))}"
