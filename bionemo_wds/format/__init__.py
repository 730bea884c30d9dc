"""The on-disk format: the only package that knows how records, shards and manifests look as bytes.

- `records`: a block of windows as one msgpack tar member (format versions 1, 2 and 3);
- `tar`: the shard reader (`iter_members`, `iter_records`) and writer (`write_shard`);
- `record_index`: the per-shard record index (offset, size, windows, crc32 per record; version 3 kept it
  in the manifest as JSON columns);
- `split_index_file`: a split's record index, read for versions 3 and 4 (`shard_indexes`), and its file
  ``<split>/record-index.npy`` (version 4: written by `write_manifest`);
- `sequence_index`: a sequence-layout split's sequences in storage order (version 5), its file
  ``<split>/sequence-index.npy`` (`read_sequence_index`, `write_sequence_index`);
- `sequence_table`: the dataset's sequence table ``sequences.tsv`` (every sequence's split, origin,
  length, group, tag and input file; `write_sequence_table`, `read_sequence_table`);
- `manifest`: names, versions, `read_manifest` / `write_manifest`;
- `manifest_types`: the typed manifest (`Manifest`, `Params`, `SplitInfo`, `ShardInfo`) and its
  reader per format version (`READERS`);
- `write_errors`: an output file the OS refuses to write (a full disk, a read-only mount) as one
  line naming the file (`writing_output`);
- `atomic_write`, `atomic_path` and the hashing wrappers are re-exported from `storage.atomic` (every
  file this package writes goes through them; format sits above storage).
"""

from bionemo_wds.format.manifest import (
    CASE_MODES,
    COMPRESSED_FORMAT_VERSION,
    DEFAULT_PREFIX,
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEXED_FORMAT_VERSION,
    MANIFEST_NAME,
    READABLE_VERSIONS,
    READERS,
    Manifest,
    Params,
    RecordIndexEntry,
    SequenceIndexEntry,
    ShardInfo,
    SplitInfo,
    has_record_index,
    read_manifest,
    reader,
    shard_name,
    stored_case,
    unlisted_shards,
    write_manifest,
)
from bionemo_wds.format.manifest_types import INDEX_FILE_FORMAT_VERSION, LAYOUTS, SEQUENCE_FORMAT_VERSION
from bionemo_wds.format.record_index import INDEX_DTYPE, RecordIndex, RecordIndexBuilder, index_of, record_crc32
from bionemo_wds.format.records import (
    CODECS,
    RECORD_SUFFIX,
    RecordColumns,
    WindowBlock,
    decode_columns,
    decode_record,
    encode_record,
    record_key,
    window_key,
)
from bionemo_wds.format.sequence_index import (
    SEQUENCE_INDEX_DTYPE,
    SEQUENCE_INDEX_NAME,
    read_sequence_index,
    sequence_index_path,
    sequence_pieces,
    write_sequence_index,
)
from bionemo_wds.format.split_index_file import (
    RECORD_INDEX_NAME,
    SplitIndex,
    read_split_index,
    record_index_path,
    shard_indexes,
)
from bionemo_wds.format.tar import (
    TAR_MTIME,
    TarStreamError,
    WrittenShard,
    index_shard,
    iter_member_spans,
    iter_members,
    iter_record_members,
    iter_records,
    write_shard,
    write_tar,
)
from bionemo_wds.storage.atomic import (
    HashingReader,
    HashingWriter,
    atomic_path,
    atomic_write,
    file_sha256,
    remove_stale_temporaries,
)

__all__ = [
    "CASE_MODES",
    "CODECS",
    "COMPRESSED_FORMAT_VERSION",
    "DEFAULT_PREFIX",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "INDEXED_FORMAT_VERSION",
    "INDEX_DTYPE",
    "INDEX_FILE_FORMAT_VERSION",
    "LAYOUTS",
    "MANIFEST_NAME",
    "READABLE_VERSIONS",
    "READERS",
    "RECORD_INDEX_NAME",
    "RECORD_SUFFIX",
    "SEQUENCE_FORMAT_VERSION",
    "SEQUENCE_INDEX_DTYPE",
    "SEQUENCE_INDEX_NAME",
    "TAR_MTIME",
    "HashingReader",
    "HashingWriter",
    "Manifest",
    "Params",
    "RecordColumns",
    "RecordIndex",
    "RecordIndexBuilder",
    "RecordIndexEntry",
    "SequenceIndexEntry",
    "ShardInfo",
    "SplitIndex",
    "SplitInfo",
    "TarStreamError",
    "WindowBlock",
    "WrittenShard",
    "atomic_path",
    "atomic_write",
    "decode_columns",
    "decode_record",
    "encode_record",
    "file_sha256",
    "has_record_index",
    "index_of",
    "index_shard",
    "iter_member_spans",
    "iter_members",
    "iter_record_members",
    "iter_records",
    "read_manifest",
    "read_sequence_index",
    "read_split_index",
    "reader",
    "record_crc32",
    "record_index_path",
    "record_key",
    "remove_stale_temporaries",
    "sequence_index_path",
    "sequence_pieces",
    "shard_indexes",
    "shard_name",
    "stored_case",
    "unlisted_shards",
    "window_key",
    "write_manifest",
    "write_sequence_index",
    "write_shard",
    "write_tar",
]
