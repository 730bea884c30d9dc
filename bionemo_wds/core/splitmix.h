/* SplitMix64 in C, as `core.seeds` defines it in Python: `mix64` (its finaliser, `seeds.mix64`) and
 * `splitmix64` (the increment, then the finaliser: `seeds.splitmix64`). Shared by the C extensions
 * whose draws must equal the Python forms bit for bit (key_hashes.c, load/batch/mlm_kernel.c). */
#ifndef BIONEMO_WDS_SPLITMIX_H
#define BIONEMO_WDS_SPLITMIX_H

#include <stdint.h>

/* SplitMix64's increment (`seeds.GOLDEN`). */
#define SPLITMIX_GOLDEN 0x9E3779B97F4A7C15ull

static inline uint64_t mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline uint64_t splitmix64(uint64_t x) { return mix64(x + SPLITMIX_GOLDEN); }

#endif
