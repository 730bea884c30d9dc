"""Builds the optional C extensions (pyproject.toml holds the rest of the configuration): the exact BPE
encoder of bionemo_wds.load.tokenize.exact_bpe, the byte-table passes of bionemo_wds.core.byte_lookup
(reverse complement, base codes, the A/C/G/T check), the keyed hashes of bionemo_wds.core.seeds (each
document's strand, a masked-LM row's salt), the packed rows' layout and expansion of
bionemo_wds.load.batch.packed_native and the masked-LM kernels of bionemo_wds.load.batch.mlm (the
draws, and their laying over a batch). Without a C compiler the package installs without them: BPE
files are then encoded by the `tokenizers` library, byte tables applied by `bytes.translate`, keys
hashed by `zlib.crc32` and numpy, packed rows laid out and expanded and masked-LM masks drawn by Python
and numpy (the same ids, bases, inputs and masks, slower; the BPE and masked-LM paths say so in a
warning)."""

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
            "bionemo_wds.core.byte_tables",
            sources=["bionemo_wds/core/byte_tables.c"],
            depends=["bionemo_wds/core/byte_table.h", "bionemo_wds/core/vector_clones.h"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "bionemo_wds.core.key_hashes",
            sources=["bionemo_wds/core/key_hashes.c"],
            depends=["bionemo_wds/core/splitmix.h"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "bionemo_wds.load.batch.mlm_kernel",
            sources=["bionemo_wds/load/batch/mlm_kernel.c"],
            depends=[
                "bionemo_wds/load/batch/mlm_common.h",
                "bionemo_wds/core/splitmix.h",
                "bionemo_wds/core/vector_clones.h",
            ],
            include_dirs=["bionemo_wds/core"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "bionemo_wds.load.batch.packed_kernel",
            sources=["bionemo_wds/load/batch/packed_kernel.c"],
            depends=["bionemo_wds/core/byte_table.h", "bionemo_wds/core/vector_clones.h"],
            include_dirs=["bionemo_wds/core"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "bionemo_wds.load.batch.mlm_lay",
            sources=["bionemo_wds/load/batch/mlm_lay.c"],
            depends=["bionemo_wds/load/batch/mlm_common.h", "bionemo_wds/core/vector_clones.h"],
            include_dirs=["bionemo_wds/core"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
