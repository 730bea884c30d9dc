"""The benchmark's ``--help`` text: what every peer's timing includes, and the targets checked."""

HELP = """\
Prepare and load one full training pass for each peer, on the same windows (seq_length 8192,
stride 7992, tail end, batch size 8 by default), with 0 and 2 loader workers, and print one table
with ratios to eden_fly, for each input (--catalog): the seeded synthetic genome (a draft
assembly's contig-length mix, 32 Mbp: most bases in contigs far longer than a window; the default,
which keeps the default run's wall time), the metagenome-like catalog (log-normal contigs of median
3 kb, sigma 1, none under 200 bp, 64 Mbp, bases cut from the bundled Klebsiella and lambda genomes
with 1% seeded substitutions: most contigs shorter than an 8 kb window), or both; --size-mbp
scales either. Each table also gives real tokens/s (tokens that are not PAD) and the padding
share of the token slots, counted on every batch of the pass (outside its time).

What each peer's load timing includes (samples/s: from the first request for a batch to the last
batch, worker start-up included; imports and the one-time set-up of dataset and loader objects
excluded; "w/ setup": the same pass with that set-up counted), always ending in model-ready batches
on the main process (tokens and labels int64, loss_mask float32, position_ids):
  eden_fly       map-style dataset, shuffled sampler; per window: np.searchsorted to find it, a
                 pyfaidx read, upper-casing, reverse complement with p=0.5, tokenizing, the
                 sample's tensors; default collate.
  pickled_int64  int64 token tensors pickled into tar shards (PickledDataWDS), read through
                 WebDataModule with its documented pipelines (untuple + shuffle, shuffle + batched
                 vstack); labels, mask and positions built per batch on the main process.
  raw_limit      one uint8 memmap of all windows, sliced into batches in a seeded order and expanded
                 by to_model_inputs: the ceiling for any loader of these windows.
  ours           GenomicWebDataModule's training loader: the exact epoch plan (record order,
                 window mixing; fewer than one batch left out), records read by their index with
                 crc32 checks, reverse complement (p=0.5), compact batches, then model_inputs.
  litdata        the windows as uint8 bytes in litdata.optimize chunks, read by litdata's
                 StreamingDataset (shuffle, seed) in its StreamingDataLoader; mosaic: the same in
                 MDSWriter shards ("bytes" column), read by MosaicML Streaming's StreamingDataset
                 (shuffle, shuffle_seed, batch_size) in a torch DataLoader. Both: reverse complement
                 (p=0.5) and compact batches in the workers' collate_fn, then to_model_inputs.
  ours_windows   `ours` over a sequence-layout dataset (prepare layout="sequences"): the same
                 windows cut at load (pack=False, window_offset fixed), the same data module.
  ours_packed    the same dataset with pack=True: every sample filled with whole sequences and
                 sequence tails, each its own document; position ids restart per document.
  ours_hf        `ours` with batch_format="hf" (input_ids, attention_mask, labels not shifted with
                 -100, position_ids: what a transformers causal LM takes); ours_packed_hf: the same
                 for `ours_packed` (with cu_seq_lens_q/k, max_length_q/k). Each prepares its own copy.
  ours_mlm       `ours_hf` with objective="mlm" (byte ids with a mask token): masks drawn in the
                 loader workers, laid over the batch at expansion. ours_mlm_main: `ours_hf` with the
                 same masks drawn in the main process before expansion (the other place they could be).
  ours_hf_device, ours_mlm_device
                 `ours_hf` and `ours_mlm` expanded on the GPU as a Trainer does, the masks drawn there
                 (mlm_draws="device"); each batch waits for the GPU. Skipped without CUDA.
  ours_nt, ours_dnabert6, ours_caduceus, ours_bpe
                 `ours_windows` read with tokenizer= nt, dnabert6, caduceus, or a BPE tokenizer.json
                 of 4,096 ids trained at prepare on the genome's first 300 kb: seq_length counts
                 tokens, so they are compared in bases/s. Each prepares its own copy.
  ours_nt_mlm    `ours_nt` with objective="mlm" (NT's masked-LM batches, masks drawn in the workers).
  litdata_packed litdata's LLM pre-training way: every sequence one document of uint8 tokens
                 (BOS SEP bases EOS) in optimize chunks with TokensLoader(), read by StreamingDataset
                 (TokensLoader(block_size=seq_length + 1), shuffle) in StreamingDataLoader: samples
                 cut from the token stream across documents, no PAD, no reverse complement.
  litdata, mosaic and litdata_packed are optional (pip install 'bionemo-wds[bench]'), and the
  ours_* rows need a checkout with the sequence layout: each is skipped with a note when missing.
Prepare timing: eden_fly builds the .fai; pickled_int64 writes the pickles and the tars; raw_limit
writes the memmap; ours runs `prepare` (index, checks, split, shards, hashes); litdata runs
optimize; mosaic writes with MDSWriter; ours_windows and ours_packed run `prepare` of the sequence
layout; litdata_packed runs optimize with TokensLoader. Disk is what each loader reads (eden_fly:
the FASTA and its .fai), per input base. Peak memory is the PSS of the loading process and its workers, summed,
sampled every 10 ms from outside (every 0.25 s while the process imports its modules), in a run of
its own (sampling slows the process it watches); --no-memory leaves that run out.
Each load is run --repeat times in a fresh process and the fastest run is reported (each other
time at its own best); the runs go in rounds (every peer and worker count once, then again), so a
slow stretch of a shared machine falls on every peer alike; run nothing else on the machine
meanwhile. TTFB: from the start of the loader set-up to the first model-ready batch. CPU s/Mtok:
CPU seconds (user + system) of set-up and pass in the loading process and its loader workers
(getrusage of the process and of its waited-for children), per million tokens.

--remote s3 adds two rows of `ours` read from S3: moto's S3 server is started in this process on
127.0.0.1 only (a free port; it needs `pip install 'bionemo-wds[test]'`), the children get its
AWS_ENDPOINT_URL and dummy credentials, and `ours` is prepared into s3://bionemo-wds-benchmark/ours
with the local options (its prepare time and bytes are those of the upload). Both rows load through
the storage layer (range GETs with read-ahead threads, the node-local range cache):
  ours_s3_cold   cache_dir a fresh empty directory in every run: every record range is fetched.
  ours_s3_warm   the cache directory the cold runs filled: every range is a cache hit, no GET.
Two more columns give the MB fetched and the GETs of the pass (the storage_stats counters; the
manifest and listing read at set-up are not counted). The endpoint is on loopback, so the rows show
the storage layer's own cost, not a real network's latency or bandwidth.

After the table, the targets of the benchmark issues, each [met] or [NOT met] with its numbers (a
target whose peers were not run is left out):
  load     ours >= 3x eden_fly (best of workers); >= 10x pickled_int64; >= 0.8x raw_limit; with 2
           workers at least as fast as with 0; >= 1.0x litdata with 0 workers, set-up included
           ("w/ setup"); >= 3x every peer loader with 2 workers (eden_fly, pickled_int64, litdata,
           mosaic; not raw_limit, the ceiling of any loader of these windows); time to first batch no
           worse than litdata's at each worker count; ours+zstd at most 15% slower than ours.
  disk     ours <= 1.15 bytes/base; ours+zstd <= 0.35.
  prepare  ours >= 20 Mbp/s; at least 2x as fast as litdata.optimize on the same genome.
  layout   ours_windows (windows cut at load) >= 1.0x ours (format 4 windows) in samples/s and
           ours_packed >= 1.0x litdata_packed in real tokens/s, at each worker count; ours_packed
           pads < 1% of the token slots.
  format   ours_hf >= 0.9x ours and ours_packed_hf >= 0.9x ours_packed, at each worker count.
  mlm      ours_mlm (masked-LM) >= 0.9x ours_hf (the same batches unmasked), at each worker count;
           on a GPU, ours_mlm_device >= 0.9x ours_hf_device; ours_nt_mlm >= 0.9x ours_nt in bases/s.
  tokens   ours_nt, ours_dnabert6, ours_caduceus >= 0.8x ours_windows and ours_bpe >= 0.5x, in
           bases/s at each worker count.
  memory   with --memory-baseline (the --json of a run on a smaller genome, e.g. 32 Mbp when this
           one is 128 Mbp): ours' peak PSS at each worker count within 10% of that run's.
"""
