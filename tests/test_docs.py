"""The docs: the site builds strictly, its examples run, its commands are real, the README stays a guide.

- `mkdocs build --strict` (broken links and anchors, a missing snippet file, a CLI reference that
  cannot be generated all fail it);
- the examples the getting-started and user-guide pages include (`examples/`) run on the bundled
  genomes, and the README's model is `examples/own_model.py`;
- every `bionemo-wds ...` command in a fenced ``bash`` block of the README or a page parses with
  today's parsers, and every ``--option`` in it is one the command's ``--help`` lists (so a renamed
  or removed option, or an abbreviation, fails here);
- ``>>>`` examples in the pages are doctests;
- no commit hashes or issue numbers in user-facing text; the README under 300 lines;
- what the pages promise: every page is in the nav and linked from the home page and the README;
  every extra a page names is in pyproject.toml, and the extras tables list them all; extras are
  installed from the clone as the install pages say; every key a page's key table lists is in a
  real batch of the kind it describes (windows and packed, compact and model inputs), the full
  tables all of them; the `GenomicMapDataset` snippet runs as written; `where`'s output shown is
  what the README's dataset gives; `inspect` says what a sequence-layout dataset stores.
"""

from __future__ import annotations

import contextlib
import doctest
import html
import importlib
import importlib.util
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
USER_TEXT = [README, *PAGES]
LIGHTNING = ("fit", "validate", "test", "predict")
LAMBDA = ROOT / "bionemo_wds" / "data" / "lambda_phage_NC_001416.fa.gz"


def env() -> dict[str, str]:
    """The subprocess environment: this checkout first on the path, its interpreter's scripts on PATH."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [out.get("PYTHONPATH")])])
    out["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), out.get("PATH", "")])
    out["NO_MKDOCS_2_WARNING"] = "1"
    return out


def run(argv: list[str], cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """Runs ``python examples/SCRIPT ARGS`` from the repository root in this process (`runpy`, as
    ``__main__``: the code a user runs), without a fresh interpreter importing torch and Lightning
    again for each example (about 10 s of CPU). Returns what it printed, stdout then stderr; an
    exception or a non-zero exit fails the test."""

    def run_example(script: str, *args: str) -> tuple[str, str]:
        monkeypatch.chdir(ROOT)
        monkeypatch.setattr(sys, "argv", [f"examples/{script}", *args])
        capsys.readouterr()
        try:
            runpy.run_path(str(ROOT / "examples" / script), run_name="__main__")
        except SystemExit as exc:
            assert exc.code in (0, None), f"examples/{script} exited with {exc.code}: {capsys.readouterr()}"
        captured = capsys.readouterr()
        return captured.out, captured.err

    return run_example


def fenced(text: str, lang: str) -> Iterator[str]:
    """The bodies of the fenced blocks of one language."""
    for m in re.finditer(rf"^```{lang}[^\n]*\n(.*?)^```", text, re.S | re.M):
        yield m.group(1)


def prose(text: str) -> str:
    """Text a reader sees as prose: fenced blocks, inline code and link targets removed."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


HASH = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
ISSUE = re.compile(r"\bissues?\s*#?\d+|#\d{1,4}\b", re.I)


def page_text(page: str) -> str:
    """The text of a built page's article (not the theme's asset names), tags dropped, entities decoded."""
    article = page[page.index("<article") : page.index("</article>")]
    return html.unescape(re.sub(r"<[^>]+>", " ", article))


def leaks(text: str) -> list[str]:
    return HASH.findall(text) + ISSUE.findall(text)


# --- cheap checks -------------------------------------------------------------------------------


def test_readme_is_a_short_guide() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < 300, f"README.md has {len(lines)} lines; the details belong in docs/"
    text = README.read_text()
    for needed in ("bash tools/demo.sh", "bash tools/test.sh", "pip install -e .", "256", "loss_mask", "labels"):
        assert needed in text, f"README.md does not mention {needed}"


@pytest.mark.parametrize("path", USER_TEXT, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_commit_hashes_or_issue_numbers(path: Path) -> None:
    found = leaks(prose(path.read_text()))
    assert not found, f"{path.relative_to(ROOT)} shows {found}: no hashes or issue numbers in user-facing text"


def test_leak_patterns_catch_what_they_should() -> None:
    """The patterns above are not vacuous: they see a short hash and an issue number in prose."""
    assert leaks(prose("measured before 5f8b9fb and after; see issue 15")) == ["5f8b9fb", "issue 15"]
    assert leaks(prose("a sha256 `5784a215b42c133b` in code, 1,252,201,308 windows, 2026-11-24")) == []


def snippet_paths() -> list[tuple[Path, str]]:
    return [(page, m) for page in PAGES for m in re.findall(r'--8<-- "([^"]+)"', page.read_text())]


def test_snippet_files_exist() -> None:
    snippets = snippet_paths()
    assert {s for _, s in snippets} >= {"examples/getting_started.sh", "examples/own_model.py"}
    for page, snippet in snippets:
        assert (ROOT / snippet).is_file(), f"{page.relative_to(ROOT)} includes {snippet}, which does not exist"


def test_readme_model_is_the_example() -> None:
    """The README shows examples/own_model.py itself, so the tests below run what it shows."""
    blocks = list(fenced(README.read_text(), "python"))
    assert (ROOT / "examples" / "own_model.py").read_text() in blocks


# --- commands shown in the docs ------------------------------------------------------------------


def shown_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every `bionemo-wds ...` line in a fenced bash block, continuations joined."""
    out = []
    for path in USER_TEXT:
        for body in fenced(path.read_text(), "bash"):
            for line in body.replace("\\\n", " ").splitlines():
                line = re.sub(r"^(\w+=\S*\s+)+", "", line.strip())  # VAR=value before the command
                if line.startswith("bionemo-wds "):
                    out.append((f"{path.relative_to(ROOT)}: {line}", shlex.split(line, comments=True)[1:]))
    return out


class Parsed(Exception):
    """Raised by the patched parse_args once the command line parsed: nothing runs."""


@contextlib.contextmanager
def parse_only() -> Iterator[None]:
    """Stop `bionemo-wds` right after its command line parsed (`cli.main.parse_command`, which reports
    what no parser knew), so a shown command is checked without running it."""
    cli_main = importlib.import_module("bionemo_wds.cli.main")  # the module: bionemo_wds.cli.main is also a function
    original = cli_main.parse_command

    def parse_then_stop(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise Parsed

    cli_main.parse_command = parse_then_stop  # type: ignore[assignment]
    try:
        yield
    finally:
        cli_main.parse_command = original  # type: ignore[assignment]


def in_process(argv: list[str]) -> tuple[int | str | None, str]:
    """Run `bionemo-wds ARGV` in this process at 100 columns; (exit code or "parsed", stdout + stderr)."""
    from bionemo_wds.cli.main import main

    out = io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code: int | str | None = main(argv)
            except Parsed:
                code = "parsed"
            except SystemExit as exc:
                code = exc.code
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    return code, out.getvalue()


HELP: dict[str, str] = {}


def help_of(command: str) -> str:
    if command not in HELP:
        code, text = in_process([command, "--help"])
        assert code in (0, None), f"bionemo-wds {command} --help exited {code}: {text}"
        HELP[command] = text
    return HELP[command]


def options_in(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("--")]


ARGPARSE_COMMANDS = [(where, argv) for where, argv in shown_commands() if argv and argv[0] not in LIGHTNING]
FIT_COMMANDS = [(where, argv) for where, argv in shown_commands() if argv and argv[0] in LIGHTNING]


def test_docs_show_commands() -> None:
    commands = {argv[0] for _, argv in shown_commands()}
    assert {"prepare", "inspect", "verify", "precompute-windows", "fit"} <= commands


@pytest.mark.parametrize("where,argv", ARGPARSE_COMMANDS, ids=[w for w, _ in ARGPARSE_COMMANDS])
def test_shown_command_parses(where: str, argv: list[str]) -> None:
    with parse_only():
        code, text = in_process(argv)
    assert code == "parsed", f"{where}\n  does not parse today (exit {code}): {text.strip()}"
    listed = set(re.findall(r"--[A-Za-z][\w-]*", help_of(argv[0])))
    unknown = [o for o in options_in(argv) if o not in listed]
    assert not unknown, f"{where}\n  shows {unknown}, which `bionemo-wds {argv[0]} --help` does not list"


def test_unknown_option_is_caught() -> None:
    """The check above fails for an option the CLI does not have, and for an abbreviation."""
    with parse_only():
        code, _ = in_process(["prepare", "x.fa", "--out", "o", "--no-such-option", "1"])
    assert code == 2
    listed = set(re.findall(r"--[A-Za-z][\w-]*", help_of("prepare")))
    assert "--strid" not in listed and "--stride" in listed


def model_arguments(class_path: str) -> set[str] | None:
    """The `__init__` arguments of TinyDNALM or of an example's model; None for a model we cannot see."""
    import inspect

    if class_path.endswith("TinyDNALM"):
        from bionemo_wds.models.tiny_lm import TinyDNALM as cls
    elif class_path.startswith("own_model."):
        spec = importlib.util.spec_from_file_location("own_model", ROOT / "examples" / "own_model.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cls = getattr(module, class_path.split(".", 1)[1])
    else:
        return None  # my_pkg.MyLM: a stand-in for the reader's own model
    return set(inspect.signature(cls.__init__).parameters) - {"self"}


def test_shown_fit_commands_use_real_options() -> None:
    """Every `--trainer.*`, `--data.*` and top-level option of a shown `fit` is one `fit --help` lists;
    `--model.*` options are arguments of the model the command names (TinyDNALM by default)."""
    assert FIT_COMMANDS, "the docs show no `bionemo-wds fit` command"
    saved = sys.argv
    sys.argv = ["bionemo-wds", "fit", "--help"]  # LightningCLI reads the program name from here
    try:
        listed = set(re.findall(r"--[A-Za-z][\w.-]*", help_of("fit")))
    finally:
        sys.argv = saved
    for where, argv in FIT_COMMANDS:
        model = argv[argv.index("--model") + 1] if "--model" in argv else "TinyDNALM"
        arguments = model_arguments(model)
        for option in options_in(argv):
            if option.startswith("--model."):
                name = option.removeprefix("--model.")
                known = name == "help" or arguments is None or name in arguments
                assert known, f"{where}\n  {model} has no argument {name}"
            else:
                assert option in listed, f"{where}\n  shows {option}, which `bionemo-wds fit --help` does not list"


# --- doctests in the pages -------------------------------------------------------------------------

DOCTEST_BLOCKS = [
    (f"{page.relative_to(ROOT)}#{i}", body)
    for page in PAGES
    for i, body in enumerate(fenced(page.read_text(), "python"))
    if ">>>" in body
]


@pytest.mark.parametrize("name,body", DOCTEST_BLOCKS, ids=[n for n, _ in DOCTEST_BLOCKS])
def test_page_doctests(name: str, body: str) -> None:
    test = doctest.DocTestParser().get_doctest(body, {}, name, name, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    out = io.StringIO()
    runner.run(test, out=out.write)
    assert runner.failures == 0, out.getvalue()


# --- the site and the examples (slow: subprocesses, Lightning) ------------------------------------


def load_hook() -> Any:
    spec = importlib.util.spec_from_file_location("cli_reference", DOCS / "hooks" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_generated_from_the_parsers() -> None:
    """Each argparse subcommand's section is its `--help` text, and every subcommand has a section."""
    hook = load_hook()
    top = hook.help_text([])
    commands = hook.subcommands(top)
    assert {"prepare", "inspect", "verify", "precompute-windows", "fit"} <= set(commands)
    prepare = hook.help_text(["prepare"])
    assert "--seq-length" in prepare and prepare.startswith("usage: bionemo-wds prepare")
    assert not leaks(top + prepare + hook.help_text(["inspect"]) + hook.help_text(["verify"]))


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)])
    assert result.returncode == 0, result.stdout + result.stderr
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("prepare", "inspect", "verify", "precompute-windows", "fit"):
        assert f'id="bionemo-wds-{command}"' in cli
    assert "--seq-length" in cli and "--data.micro_batch_size" in cli
    assert not leaks(page_text(cli)), "the generated CLI reference shows a hash or an issue number"
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "micro_batch_size" in api and "GenomicIterableDataset" in api
    assert not leaks(page_text(api)), "a docstring in the API reference shows a hash or an issue number"
    assert not (site / "hooks").exists()


@pytest.fixture(scope="module")
def getting_started(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`examples/getting_started.sh` into a temporary directory: (the dataset, what it printed)."""
    data = tmp_path_factory.mktemp("docs") / "data"
    result = run(["bash", "examples/getting_started.sh", str(data)], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return data, result.stdout + result.stderr


@pytest.mark.slow
def test_getting_started_runs(getting_started: tuple[Path, str]) -> None:
    data, output = getting_started
    assert (data / "manifest.json").is_file()
    assert re.search(r"verified \d+ shard\(s\), \d+ samples: ok", output), output
    found = re.search(r"after 20 steps: train_loss ([\d.]+), val_loss ([\d.]+)", output)
    assert found, output
    # an untrained model over 256 ids starts at ln(256) = 5.5; 20 steps learn the 4-letter alphabet
    assert float(found.group(1)) < 3.0 and float(found.group(2)) < 3.0, output


@pytest.mark.slow
def test_load_batches_example(getting_started: tuple[Path, str], example: Any) -> None:
    data, _ = getting_started
    out, _ = example("load_batches.py", str(data))
    for line in (
        "tokens       torch.int64    (4, 512)",
        "loss_mask    torch.float32  (4, 512)",
        "keys         SampleNames    4 str",
    ):
        assert line in out, out


@pytest.mark.slow
def test_hf_model_example(getting_started: tuple[Path, str], example: Any) -> None:
    """examples/hf_model.py (the training page's transformers example): a Llama trained by
    ``model(**batch)`` on ``batch_format="hf"`` batches learns the alphabet in 20 steps."""
    data, _ = getting_started
    out, _ = example("hf_model.py", str(data))
    found = re.search(r"after 20 steps: train_loss ([\d.]+), val_loss ([\d.]+)", out)
    assert found and float(found.group(1)) < 3.0 and float(found.group(2)) < 3.0, out


@pytest.mark.slow
def test_resume_example(getting_started: tuple[Path, str], example: Any) -> None:
    data, _ = getting_started
    out, _ = example("resume.py", str(data))
    assert "resumed exactly" in out


@pytest.mark.slow
def test_plain_pytorch_example(getting_started: tuple[Path, str], example: Any) -> None:
    data, _ = getting_started
    out, _ = example("plain_pytorch.py", str(data))
    assert "resumed exactly" in out, out
    assert "lightning" not in run([sys.executable, "-c", PLAIN_IMPORTS]).stdout


#: What importing and iterating GenomicDataset loads (Lightning must not be among it).
PLAIN_IMPORTS = "import sys, bionemo_wds; bionemo_wds.GenomicDataset; print(sorted(sys.modules))"


@pytest.mark.slow
def test_mixing_example(getting_started: tuple[Path, str], tmp_path: Path, example: Any) -> None:
    data, _ = getting_started
    lam = tmp_path / "lambda"
    options = ["--out", str(lam), "--seq-length", "512", "--stride", "500", "--split", "1,0,0", "--quiet"]
    from bionemo_wds.cli.main import main

    assert main(["prepare", str(LAMBDA), *options]) == 0
    out, _ = example("mixing.py", str(data), str(lam))
    assert f"{{'{data.name}': 560, 'lambda': 240}}" in out, out
    assert "rows per source: {0: 560, 1: 240}" in out, out


@pytest.mark.slow
def test_packing_example(tmp_path: Path, example: Any) -> None:
    """examples/packing.py (the packing page's example): one sequence-layout prepare, windows of three
    lengths cut at load, packed samples with less padding, and the tiny model trained on them."""
    out, _ = example("packing.py", str(tmp_path / "data"))
    shares = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+(?: of +\d+)?).*?([\d.]+)% padding", out, re.M)}
    assert shares["packed,"] < 1.0 and shares["windows of  65536"] > 10 * shares["packed,"], out
    assert "position_ids at each document's first token: [0, 0" in out
    assert "trained 5 steps on packed batches" in out


@pytest.mark.slow
def test_honest_split_example(tmp_path: Path, example: Any) -> None:
    """examples/honest_split.py (the provenance page's example): a split by sequence leaks the planted
    copy, which `contains` finds on both sides; a split by similarity keeps the pair on one side."""
    out, _ = example("honest_split.py", str(tmp_path / "data"))
    by_sequence, by_similarity = out.split("split by similarity")
    assert "leak train -> test: plasmid_b ~ NODE_6_" in by_sequence
    assert "test : NODE_6_" in by_sequence
    assert "train: plasmid_b (1.000), NODE_6_" in by_similarity
    assert "leak " not in by_similarity
    assert "all leaks at >= 0.95: 0 sequence(s)" in by_similarity


@pytest.mark.slow
def test_from_the_hub_example(tmp_path: Path, example: Any) -> None:
    """examples/from_the_hub.py (the hub page's example): OpenGenome2's json/ tree prepared with the
    splits of its file names, its fasta/ tree (split gzip parts, a tar) as it is, and the tiny model trained on it."""
    from bionemo_wds.format import read_manifest

    out, _ = example("from_the_hub.py", str(tmp_path / "hub"))
    found = re.search(r"windows per split: \{'train': (\d+), 'val': (\d+), 'test': (\d+)\}", out)
    assert found and all(int(n) > 0 for n in found.groups()), out
    assert re.search(r"a sample's key: \S*data_metagenomics_train_chunk[12]\.jsonl\.gz:\d+/\d+", out), out
    assert "trained 5 steps" in out
    assert read_manifest(str(tmp_path / "hub" / "og2-json")).params.source["tagged"] == 119
    fasta = read_manifest(str(tmp_path / "hub" / "og2-fasta"))
    assert sum(split.n_sequences or 0 for split in fasta.splits.values()) == 61  # 60 contigs and lambda


# --- what the pages promise: links, extras, batch keys ----------------------------------------------


def linked_pages(path: Path) -> set[Path]:
    """The Markdown pages `path` links to (relative links, anchors dropped)."""
    targets = re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)\s]*)?\)", path.read_text())
    return {(path.parent / target).resolve() for target in targets}


SITE_PAGES = {p.resolve() for p in PAGES if "hooks" not in p.relative_to(DOCS).parts}


def test_every_page_is_in_the_nav_and_linked_from_the_index_and_the_readme() -> None:
    """The site's nav (mkdocs.yml), its home page's "Where to go" and the README's list of the docs
    each reach every page: a new guide added to one of them and forgotten in another fails here."""
    nav = {(DOCS / m).resolve() for m in re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)}
    index = (DOCS / "index.md").resolve()
    for name, reached in [
        ("mkdocs.yml's nav", nav),
        ("docs/index.md", linked_pages(DOCS / "index.md") | {index}),
        ("README.md", linked_pages(README) | {index}),
    ]:
        missing = sorted(str(p.relative_to(DOCS)) for p in SITE_PAGES - reached)
        assert not missing, f"{name} does not link to {missing}"


def pyproject_extras() -> set[str]:
    """The names of pyproject.toml's optional dependencies (no tomllib: Python 3.10 is supported)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*=", section, re.M))


#: An extra named as pip takes it: ``bionemo-wds[x,y]`` or, from the clone, ``'.[x,y]'``.
EXTRA = re.compile(r"(?:\bbionemo-wds|(?<=['\"\s])\.)\[([\w,\s-]+)\]")


def test_every_extra_a_page_names_is_in_pyproject() -> None:
    extras = pyproject_extras()
    assert {"remote", "zstd", "megatron", "homology", "docs", "test"} <= extras
    for path in USER_TEXT:
        for found in EXTRA.findall(path.read_text()):
            unknown = [e.strip() for e in found.split(",") if e.strip() not in extras]
            where = path.relative_to(ROOT)
            assert not unknown, f"{where} names the extra(s) {unknown}; pyproject.toml has {sorted(extras)}"


def extras_table(path: Path) -> list[str]:
    """The first column of the table whose header starts with ``| extra |``."""
    text = path.read_text()
    table = text[text.index("| extra |") :].split("\n\n", 1)[0].splitlines()[2:]
    return [re.findall(r"`([\w-]+)`", row.split("|")[1])[0] for row in table]


@pytest.mark.parametrize("path", [README, DOCS / "getting-started.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_extras_tables_list_every_extra(path: Path) -> None:
    assert sorted(extras_table(path)) == sorted(pyproject_extras())


def test_pages_install_extras_as_the_install_pages_do() -> None:
    """The install pages install from a clone (`pip install -e .`); a guide saying
    `pip install 'bionemo-wds[x]'` asks the package index for a package it may not hold."""
    for path in USER_TEXT:
        for line in path.read_text().splitlines():
            assert not re.search(r"pip install[^`\n]*\bbionemo-wds\b", line), (
                f"{path.relative_to(ROOT)}: {line.strip()!r}: install from the clone, pip install -e '.[extra]'"
            )


def key_tables(path: Path) -> list[tuple[str, int, set[str]]]:
    """(section heading, its n-th key table, the keys its first column names) of each Markdown table
    of `path` whose first header cell is ``key`` (fenced blocks skipped)."""
    out: list[tuple[str, int, set[str]]] = []
    section, seen, fenced_block = "", {}, False
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fenced_block = not fenced_block
        elif not fenced_block and line.startswith("#"):
            section = line.lstrip("#").strip()
        elif not fenced_block and re.match(r"\|\s*key\s*\|", line):
            keys: set[str] = set()
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                keys |= set(re.findall(r"`(\w+)`", lines[i].split("|")[1]))
                i += 1
            n = seen.get(section, 0)
            seen[section] = n + 1
            out.append((section, n, keys))
            continue
        i += 1
    return out


#: (page, section, n-th key table there) -> (the batch it lists, whether it lists all its keys);
#: None for a table of other keys.
KEY_TABLES: dict[tuple[str, str, int], tuple[str | None, bool]] = {
    ("README.md", "Train your own model", 0): ("windows", False),
    ("docs/guide/load.md", "Model inputs", 0): ("windows", True),
    ("docs/guide/load.md", "Model inputs", 1): ("windows compact", True),
    ("docs/guide/packing.md", "Packing", 0): ("packed", True),
    ("docs/guide/packing.md", "Packing", 1): ("packed compact", True),
    ("docs/guide/training.md", "Hugging Face transformers models", 0): ("windows hf", True),
    ("docs/guide/training.md", "Hugging Face transformers models", 1): ("packed hf", True),
    ("docs/guide/training.md", "Objectives", 0): ("windows mlm hf", True),
    ("docs/reference/format.md", "manifest.json", 0): (None, False),  # the manifest's keys
}


def listed_key_tables() -> dict[tuple[str, str, int], set[str]]:
    return {
        (str(path.relative_to(ROOT)), section, n): keys for path in USER_TEXT for section, n, keys in key_tables(path)
    }


def test_every_key_table_says_which_batch_it_lists() -> None:
    """A new key table (or one moved to another section) is added to `KEY_TABLES`, so the test below
    checks it against a real batch."""
    assert set(listed_key_tables()) == set(KEY_TABLES)


@pytest.fixture(scope="module")
def lambda_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The bundled lambda genome prepared small, in both layouts (all of it in train)."""
    base = tmp_path_factory.mktemp("lambda")
    out = {"windows": base / "windows", "sequences": base / "sequences"}
    common = ["--seq-length", "256", "--split", "1,0,0", "--workers", "1", "--quiet"]
    for layout, root in out.items():
        code, text = in_process(["prepare", str(LAMBDA), "--out", str(root), "--layout", layout, *common])
        assert code in (0, None), text
    return out


@pytest.fixture(scope="module")
def real_batches(lambda_datasets: dict[str, Path]) -> dict[str, set[str]]:
    """The keys of a real batch of each kind: a data module's loader's (compact) and its model inputs,
    windows and packed; and what `GenomicDataset(model_inputs=False)` yields."""
    from bionemo_wds import GenomicDataset, GenomicWebDataModule
    from bionemo_wds.load.batch.mlm_rule import Vocabulary

    out = {}
    for kind, root, options in [
        ("windows", lambda_datasets["windows"], {}),
        ("packed", lambda_datasets["sequences"], {"pack": True, "seq_length": 256}),
    ]:
        dm = GenomicWebDataModule(str(root), micro_batch_size=4, **options)
        dm.setup("fit")
        compact = next(iter(dm.train_dataloader()))
        out[f"{kind} compact"] = set(compact)
        out[kind] = set(dm.model_inputs(compact))
        hf = GenomicWebDataModule(str(root), micro_batch_size=4, batch_format="hf", **options)
        hf.setup("fit")
        out[f"{kind} hf"] = set(hf.model_inputs(next(iter(hf.train_dataloader()))))
        ds = GenomicDataset(str(root), "train", micro_batch_size=4, model_inputs=False, **options)
        out[f"{kind} dataset compact"] = set(next(iter(ds)))
    vocab = Vocabulary("bytes-with-mask", 256, 1, 5, frozenset(range(256)) - frozenset(b"ACGTN"))
    mlm = GenomicDataset(str(lambda_datasets["windows"]), objective="mlm", tokenizer=vocab, batch_format="hf")
    out["windows mlm hf"] = set(next(iter(mlm)))
    return out


def test_every_batch_key_a_page_lists_is_in_a_real_batch(real_batches: dict[str, set[str]]) -> None:
    assert {"lengths", "doc_rc", "seq_lens"} <= real_batches["packed"]  # packed rows count their bases too
    for (page, section, n), keys in listed_key_tables().items():
        kind, complete = KEY_TABLES[(page, section, n)]
        if kind is None:
            continue
        real = real_batches[kind]
        assert keys <= real, f"{page} ({section}) lists {sorted(keys - real)}, which a {kind} batch does not hold"
        if complete:
            assert keys == real, f"{page} ({section}) leaves out {sorted(real - keys)} of a {kind} batch"
    for kind in ("windows", "packed"):  # the dataset's compact batches: the loader's, less `filler`
        assert real_batches[f"{kind} dataset compact"] == real_batches[f"{kind} compact"] - {"filler"}


def test_inspect_says_what_a_sequence_layout_holds(lambda_datasets: dict[str, Path]) -> None:
    """A sequence-layout dataset stores pieces, not windows: `inspect` does not print a training
    window of the prepare's seq_length as if the shards held those, and says what the loader cuts."""
    code, text = in_process(["inspect", str(lambda_datasets["sequences"])])
    assert code in (0, None), text
    assert "pieces of up to 253 bases" in text and "window 253" not in text and "stride 249" not in text.split("\n")[2]
    assert "by default seq_length 256 (what prepare was given) and stride 249" in text
    code, text = in_process(["inspect", str(lambda_datasets["windows"])])
    assert "seq_length 256  window 253  stride 249" in text


def page_block(page: Path, needle: str) -> str:
    """The fenced python block of `page` that holds `needle`."""
    blocks = [b for b in fenced(page.read_text(), "python") if needle in b]
    assert len(blocks) == 1, f"{page.relative_to(ROOT)} has {len(blocks)} python blocks with {needle!r}"
    return blocks[0]


def test_map_dataset_snippet_runs_in_one_process(lambda_datasets: dict[str, Path], tmp_path: Path) -> None:
    """load.md's `GenomicMapDataset` snippet, as written, in a plain `python` (no torchrun, no
    process group), from a directory whose `data/` is a prepared dataset."""
    code = page_block(DOCS / "guide" / "load.md", "GenomicMapDataset(")
    (tmp_path / "data").symlink_to(lambda_datasets["windows"])
    check = "\nprint(sorted(batch), tuple(batch['tokens'].shape))\n"
    result = run([sys.executable, "-c", code + check], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'tokens'" in result.stdout and "(8, 256)" in result.stdout, result.stdout


@pytest.mark.slow
def test_where_output_is_the_readme_datasets(getting_started: tuple[Path, str]) -> None:
    """provenance.md's `where` output is what `where` prints for the README's dataset (the getting-started
    one: the same prepare command)."""
    data, _ = getting_started
    text = (DOCS / "guide" / "provenance.md").read_text()
    key = re.search(r"^bionemo-wds where data/ '([^']+)'$", text, re.M)
    assert key, "provenance.md shows no `bionemo-wds where data/ KEY`"
    shown = text[text.index("```text\nkey ") + 8 :].split("```", 1)[0]
    code, printed = in_process(["where", str(data), key.group(1)])
    assert code in (0, None), printed
    assert [line.split() for line in shown.splitlines()] == [line.split() for line in printed.splitlines()]


def test_what_the_readme_writes_at_the_root_is_ignored_by_git() -> None:
    """Following the README from the repository root writes each `--out DIR` and its `DIR.lock`
    there: git must not list them as untracked (a new user's `git status` stays clean)."""
    outs = sorted({m.rstrip("/") for m in re.findall(r"--out\s+(\S+)", README.read_text()) if not m.startswith("/")})
    assert outs, "the README prepares nothing with --out"
    paths = [p for out in outs for p in (f"{out}/", f"{out}.lock")]  # a directory, and its lock file
    done = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True)
    if done.returncode == 128:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    assert sorted(done.stdout.split()) == sorted(paths), f"not ignored: {sorted(set(paths) - set(done.stdout.split()))}"
