"""The error hierarchy (`bionemo_wds.errors`): what each class promises, that real raise sites raise
the specific class, that the command line maps types (not traceback locations) to exit codes, and
that damaged-shard handlers are plain functions.

Load-side cases damage a private copy of the session's `kleb_1024` dataset (400 windows per shard,
8 per record) and read with ``num_workers=0``, so errors and handler calls happen in this process.
"""

from __future__ import annotations

import importlib
import json
import shutil
import tarfile
import warnings
from pathlib import Path

import lightning as L
import pytest
from conftest import write_fasta
from servers import HTTPServer

from bionemo_wds import errors
from bionemo_wds.cli.exit_codes import EXIT_CODES, user_error
from bionemo_wds.errors import (
    BadInputError,
    BlendError,
    ChecksumError,
    CorruptShardError,
    ManifestError,
    OptionError,
    RemoteReadError,
    ShardSizeError,
    SourceError,
    TruncatedShardError,
)
from bionemo_wds.format import file_sha256
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load import shard_errors
from bionemo_wds.load.blend_file import parse_datasets
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.storage import retry

cli_main = importlib.import_module("bionemo_wds.cli.main")  # the module (`bionemo_wds.cli.main` is also the function)

# --- the hierarchy ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [OptionError, ManifestError, BlendError, SourceError])
def test_input_errors_are_bad_input_and_value_errors(cls):
    assert issubclass(cls, BadInputError) and issubclass(cls, ValueError)
    with pytest.raises(ValueError, match="named"):  # `except ValueError` written before the hierarchy still works
        raise cls("named")


@pytest.mark.parametrize("cls", [CorruptShardError, ChecksumError, TruncatedShardError, ShardSizeError])
def test_shard_errors_are_bad_input_and_runtime_errors(cls):
    assert issubclass(cls, CorruptShardError) and issubclass(cls, BadInputError) and issubclass(cls, RuntimeError)
    assert not issubclass(cls, ValueError)


def test_remote_read_error_keeps_its_base_and_is_defined_once():
    assert issubclass(RemoteReadError, RuntimeError) and not issubclass(RemoteReadError, BadInputError)
    assert retry.RemoteReadError is RemoteReadError  # imported, not a copy: one class to catch
    assert shard_errors.CorruptShardError is CorruptShardError
    error = RemoteReadError("http://127.0.0.1:1/x", 3, ConnectionRefusedError("refused"))
    assert (
        str(error) == "http://127.0.0.1:1/x: read failed after 3 attempt(s); last error ConnectionRefusedError: refused"
    )


def test_errors_module_imports_no_other_package_module():
    source = Path(errors.__file__).read_text()
    assert "bionemo_wds" not in "".join(line for line in source.splitlines() if "import" in line)


# --- real raise sites ------------------------------------------------------------------------------


@pytest.fixture
def dataset(kleb_1024, tmp_path) -> Path:
    """A private copy of `kleb_1024`, free to damage."""
    root = tmp_path / "kleb"
    shutil.copytree(kleb_1024, root)
    return root


def val_shard(root: Path) -> str:
    return json.loads((root / "manifest.json").read_text())["splits"]["val"]["shards"][0]["path"]


def sync_manifest(root: Path, rel: str) -> None:
    """The manifest made to agree with the shard's size and sha256 (the record index still holds the old crc32s)."""
    manifest = json.loads((root / "manifest.json").read_text())
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            if shard["path"] == rel:
                shard["bytes"], shard["sha256"] = file_sha256(root / rel)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))


def corrupt_first_record(root: Path) -> tuple[str, str]:
    """Change bytes of the first record of the first val shard, its size kept; (shard path, record key)."""
    rel = val_shard(root)
    with tarfile.open(root / rel) as tar:
        first = tar.getmembers()[0]
    with open(root / rel, "r+b") as fh:
        fh.seek(first.offset_data)
        fh.write(b"\xc1" * 18)
    sync_manifest(root, rel)
    return rel, first.name.split(".")[0]


def read_val(dm: GenomicWebDataModule) -> list[str]:
    dm.setup("validate")
    return [key for batch in dm.val_dataloader() for key in batch["keys"] if key]


def genomic(root: Path, **kwargs) -> GenomicWebDataModule:
    return GenomicWebDataModule(str(root), micro_batch_size=8, **kwargs)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"micro_batch_size": 0}, "micro_batch_size must be at least 1, got 0"),
        ({"epoch": "bogus"}, "epoch must be one of"),
        ({"handler": "loud"}, "handler must be one of"),
    ],
)
def test_a_bad_option_is_an_option_error(kleb_1024, options, message):
    with pytest.raises(OptionError, match=message):
        GenomicWebDataModule(str(kleb_1024), **{"micro_batch_size": 8, **options})


def test_a_seq_length_the_shards_were_not_cut_for_is_an_option_error(kleb_1024):
    with pytest.raises(OptionError, match="was cut for seq_length 1024"):
        GenomicWebDataModule(str(kleb_1024), micro_batch_size=8, seq_length=2048).setup("validate")


def test_a_changed_record_is_a_checksum_error_naming_shard_and_record(dataset):
    rel, key = corrupt_first_record(dataset)
    with pytest.raises(ChecksumError) as info:
        read_val(genomic(dataset))
    assert str(info.value).startswith(f"record {key} of shard {dataset / rel} fails its crc32 check")


def test_a_truncated_shard_is_a_truncated_shard_error(dataset):
    rel = val_shard(dataset)
    path = dataset / rel
    with tarfile.open(path) as tar:
        cut = tar.getmembers()[3].offset_data + 10
    with open(path, "r+b") as fh:
        fh.truncate(cut)
    sync_manifest(dataset, rel)  # the size agrees: the record index finds records past the end
    with pytest.raises(TruncatedShardError, match=rf"shard {path} is truncated or corrupt \(after sample"):
        genomic(dataset).setup("validate")


def test_a_shard_of_another_size_is_a_shard_size_error(dataset):
    rel = val_shard(dataset)
    with open(dataset / rel, "ab") as fh:
        fh.write(b"\0" * 512)
    with pytest.raises(ShardSizeError, match=rf"shard {dataset / rel} has \d+ bytes but the manifest lists"):
        genomic(dataset).setup("validate")


def test_a_bad_blend_weight_is_a_blend_error():
    with pytest.raises(BlendError, match="weight must be a finite number > 0"):
        parse_datasets([{"path": "/data/a", "weight": -1}])


def test_a_blend_of_datasets_cut_for_other_lengths_is_a_blend_error(kleb_1024, tmp_path):
    other = tmp_path / "other"
    fasta = write_fasta(tmp_path / "a.fa", {f"s{i}": "ACGT" * 600 for i in range(3)})
    prepare([fasta], other, PrepareOptions(seq_length=512, progress=False))
    datasets = [{"path": str(kleb_1024), "weight": 1}, {"path": str(other), "weight": 1}]
    with pytest.raises(BlendError, match="must agree on seq_length"):
        GenomicWebDataModule(datasets=datasets, samples_per_epoch=16, micro_batch_size=8).setup("fit")


def test_an_unknown_character_in_a_fasta_is_a_source_error(tmp_path):
    fasta = write_fasta(tmp_path / "bad.fa", {"chr1": "ACGT" * 100 + "J" + "ACGT" * 100})
    with pytest.raises(SourceError, match=r"chr1.*'J'"):
        prepare([fasta], tmp_path / "out", PrepareOptions(seq_length=512, split=(1.0, 0.0, 0.0), progress=False))


def test_a_stopped_server_is_a_remote_read_error(kleb_1024, tmp_path):
    server = HTTPServer(kleb_1024.parent)
    server.start()
    url = f"{server.url}/{kleb_1024.name}"
    dm = GenomicWebDataModule(url, micro_batch_size=8, retries=2, retry_backoff=0)
    server.stop()
    with pytest.raises(RemoteReadError, match=rf"{url}/manifest.json: read failed after 2 attempt\(s\)"):
        dm.setup("validate")


# --- the command line maps types to exit codes ------------------------------------------------------


def deep_library_call(exc: BaseException) -> None:
    """`exc` raised inside a library (json's decoder calls the hook), then wrapped by the caller as
    libraries do: the innermost frame is not the package's, and the user error is a cause."""
    try:
        json.loads("{}", object_hook=lambda _: (_ for _ in ()).throw(exc))
    except BaseException as inner:
        raise RuntimeError("a library wrapped it") from inner


def test_a_bad_input_error_deep_in_a_library_call_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli_main, "inspect_text", lambda _: deep_library_call(OptionError("option --x is bad")))
    assert cli_main.main(["inspect", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "bionemo-wds inspect: error: option --x is bad\n"


@pytest.mark.parametrize("exc", [KeyError("internal"), ValueError("internal")], ids=["KeyError", "ValueError"])
def test_an_internal_error_is_not_a_user_error(monkeypatch, capsys, tmp_path, exc):
    """Neither a KeyError nor a plain ValueError is the user's: the traceback stays (exit 1 from the console)."""
    monkeypatch.setattr(cli_main, "inspect_text", lambda _: deep_library_call(exc))
    with pytest.raises(RuntimeError, match="a library wrapped it") as info:
        cli_main.main(["inspect", str(tmp_path)])
    assert info.value.__cause__ is exc
    assert capsys.readouterr().err == ""


def test_exit_codes_are_decided_by_type():
    shard, missing, remote = ShardSizeError("shard x"), FileNotFoundError("no such file"), RemoteReadError("u")
    wrapped = RuntimeError("a wrapper")
    wrapped.__cause__ = shard
    assert [user_error(e) for e in (shard, missing, remote, wrapped)] == [
        (shard, 2),
        (missing, 2),
        (remote, 2),
        (shard, 2),
    ]
    assert user_error(RuntimeError("a bug")) is None
    assert set(EXIT_CODES) == {BadInputError, RemoteReadError, FileNotFoundError}


class RefusingLM(L.LightningModule):
    """A model of the user's whose ``__init__`` refuses an option with an `OptionError` (LightningCLI
    and jsonargparse wrap it while instantiating)."""

    def __init__(self, width: int = 3):
        super().__init__()
        raise OptionError(f"width {width} is not a power of two")


def test_an_option_error_wrapped_by_lightning_cli_is_one_line_exit_2(kleb_1024, tmp_path, capsys):
    argv = ["fit", "--model", "test_errors.RefusingLM", "--data.shards", str(kleb_1024), "--data.micro_batch_size", "2"]
    argv += ["--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path)]
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "bionemo-wds fit: error: width 3 is not a power of two", err
    assert "Traceback" not in err


# --- damaged-shard handlers are plain functions ------------------------------------------------------


def test_skip_skips_and_counts_without_a_warning(dataset):
    corrupt_first_record(dataset)
    dm = genomic(dataset, handler="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would fail the read
        keys = read_val(dm)
    assert dm.skipped == 1
    assert len(keys) == json.loads((dataset / "manifest.json").read_text())["splits"]["val"]["n_samples"] - 8


CALLS: list[CorruptShardError] = []


def record_and_skip(exc: CorruptShardError) -> bool:
    CALLS.append(exc)
    return True


def test_a_callable_handler_gets_the_corrupt_shard_error(dataset):
    CALLS.clear()
    rel, key = corrupt_first_record(dataset)
    dm = genomic(dataset, handler=record_and_skip)
    read_val(dm)
    assert [type(exc) for exc in CALLS] == [ChecksumError]
    assert str(CALLS[0]).startswith(f"record {key} of shard {dataset / rel} fails its crc32 check")
    assert dm.skipped == 1


def test_a_handler_named_by_its_dotted_path(dataset):
    CALLS.clear()
    corrupt_first_record(dataset)
    read_val(genomic(dataset, handler="test_errors.record_and_skip"))
    assert len(CALLS) == 1


def test_a_handler_that_returns_false_raises_the_error(dataset):
    rel, _ = corrupt_first_record(dataset)
    with pytest.raises(ChecksumError, match=str(dataset / rel)):
        read_val(genomic(dataset, handler=lambda exc: False))


def test_the_named_handlers_are_the_plain_functions():
    assert shard_errors.HANDLERS == {
        "raise": shard_errors.raise_on_error,
        "warn": shard_errors.warn_and_skip,
        "skip": shard_errors.skip,
    }
    error = ChecksumError("record r of shard s")
    with pytest.raises(ChecksumError):
        shard_errors.raise_on_error(error)
    with pytest.warns(UserWarning, match="^skipped: record r of shard s$"):
        assert shard_errors.warn_and_skip(error) is True
    policy = shard_errors.ShardErrorPolicy("skip")
    assert policy.mode == "skip" and not policy.raises
    assert shard_errors.ShardErrorPolicy().raises
