"""Builds the optional C extensions (pyproject.toml holds the rest of the configuration): the exact BPE
encoder of bionemo_wds.load.tokenize.exact_bpe, and the masked-LM kernel of bionemo_wds.load.batch.mlm.
Without a C compiler the package installs without them: BPE files are then encoded by the `tokenizers`
library and masked-LM masks drawn by numpy (the same ids and masks, slower; each says so in a warning)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "bionemo_wds.load.tokenize.bpe_native",
            sources=["bionemo_wds/load/tokenize/bpe_native.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "bionemo_wds.load.batch.mlm_kernel",
            sources=["bionemo_wds/load/batch/mlm_kernel.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
