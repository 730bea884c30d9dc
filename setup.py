"""Builds the optional C extension (pyproject.toml holds the rest of the configuration): the exact BPE
encoder of bionemo_wds.load.tokenize.exact_bpe. Without a C compiler the package installs without it
and BPE files are encoded by the `tokenizers` library instead (with a warning)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "bionemo_wds.load.tokenize.bpe_native",
            sources=["bionemo_wds/load/tokenize/bpe_native.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
