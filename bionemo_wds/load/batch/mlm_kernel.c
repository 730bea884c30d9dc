/* Masked-LM draws, one pass per batch (`batch.mlm`; laying them over a batch: mlm_lay.c).
 *
 * Hand-written because numpy needs a dozen whole-batch passes for what is one loop here: on a CPU
 * `mask_tokens` costs several times the rest of a byte batch (docs/benchmarks.md).
 * The draws are exactly `mlm.mask_tokens`'s (the tests compare every cell with the numpy code):
 *
 *   token (r, c) is a centre when fmix32(fold(salt[r]) + (c + 1) * 0x9E3779B9) < bound;
 *   span k > 1: a cell is chosen when it may be (`allowed`) and a centre that may be lies within
 *   -(k - 1) / 2 .. k / 2 of it; else a centre that may be chosen is chosen;
 *   a chosen cell's value: the mask id ("mask"), or by BERT's shares from SplitMix64 hashes of
 *   salt[r] + (c + 1) * golden (the share's 53 bits, then 32 more bits picking the random id).
 *
 * Buffers come from numpy through the buffer protocol; the GIL is released while drawing.
 */
#include "mlm_common.h"
#include "splitmix.h" /* mix64: seeds.mix64 */
#include <math.h>
#include <stdlib.h>

static inline uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

static inline void write_int(char *base, Py_ssize_t i, int size, int64_t v) {
    switch (size) {
    case 1: ((int8_t *)base)[i] = (int8_t)v; break;
    case 2: ((int16_t *)base)[i] = (int16_t)v; break;
    case 4: ((int32_t *)base)[i] = (int32_t)v; break;
    default: ((int64_t *)base)[i] = v; break;
    }
}

/* hit[c]: whether token c of a row with folded salt `folded` draws below `bound` (every token). */
VECTOR_CLONES static void hash_row(unsigned char *hit, uint32_t folded, uint32_t width, uint32_t bound) {
    for (uint32_t c = 0; c < width; c++)
        hit[c] = fmix32(folded + (c + 1u) * 0x9E3779B9u) < bound;
}

/* OFFSETS[m][0 .. COUNTS[m]): the set bits of the byte m, in order (`set_positions`; module init);
 * Py_ssize_t like the positions, so a group of eight is copied with vector adds, not one by one. */
static Py_ssize_t OFFSETS[256][8];
static uint8_t COUNTS[256];

static void build_offsets(void) {
    for (int m = 0; m < 256; m++) {
        int n = 0;
        for (int bit = 0; bit < 8; bit++)
            if (m >> bit & 1)
                OFFSETS[m][n++] = bit;
        COUNTS[m] = (uint8_t)n;
    }
}

/* The positions of the nonzero bytes of flags[0 .. n) (each 0 or 1) into pos, in order; their count.
 * pos has room for n + 8. Eight flags at a time, without a branch that depends on them (which flags
 * are set is random: a branch per flag or per set bit costs a misprediction each few cells): the
 * eight are gathered into one byte (one multiply: each byte's low bit lands in its own bit of the top
 * byte, with no carries), whose positions are copied from a table and counted. */
static Py_ssize_t set_positions(const unsigned char *flags, Py_ssize_t n, Py_ssize_t *pos) {
    Py_ssize_t count = 0, j = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; j + 8 <= n; j += 8) {
        uint64_t word;
        memcpy(&word, flags + j, 8);
        unsigned m = (unsigned)((word * 0x0102040810204080ull) >> 56);
        const Py_ssize_t *off = OFFSETS[m];
        Py_ssize_t *restrict at = pos + count; /* restrict: the compiler adds and stores two at a time */
        for (int t = 0; t < 8; t++)
            at[t] = j + off[t];
        count += COUNTS[m];
    }
#endif
    for (; j < n; j++) {
        pos[count] = j;
        count += flags[j] != 0;
    }
    return count;
}

static void fill_none(char *base, Py_ssize_t at, Py_ssize_t n, int size) {
    switch (size) {
    case 1: memset(base + at, 0xFF, (size_t)n); break; /* -1 in every byte */
    case 2: for (Py_ssize_t i = 0; i < n; i++) ((int16_t *)base)[at + i] = MLM_NONE; break;
    case 4: for (Py_ssize_t i = 0; i < n; i++) ((int32_t *)base)[at + i] = MLM_NONE; break;
    default: for (Py_ssize_t i = 0; i < n; i++) ((int64_t *)base)[at + i] = MLM_NONE; break;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX2_HITS 1
/* `hash_row` and `set_positions` in one AVX2 pass: eight 32-bit draws, their comparison with the bound
 * as one byte of lane signs, and that byte's positions copied from OFFSETS (no branch per draw). */
__attribute__((target("avx2"))) static Py_ssize_t hits_avx2(uint32_t folded, Py_ssize_t n, uint32_t bound,
                                                           Py_ssize_t *pos) {
    const __m256i weyl = _mm256_set1_epi32((int)0x9E3779B9u);
    __m256i x = _mm256_add_epi32(_mm256_set1_epi32((int)folded),
                                 _mm256_mullo_epi32(_mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8), weyl));
    const __m256i step = _mm256_set1_epi32((int)(8u * 0x9E3779B9u));
    const __m256i f1 = _mm256_set1_epi32((int)0x85EBCA6Bu), f2 = _mm256_set1_epi32((int)0xC2B2AE35u);
    const __m256i flip = _mm256_set1_epi32((int)0x80000000u); /* unsigned order as signed: flip the top bit */
    const __m256i limit = _mm256_set1_epi32((int)(bound ^ 0x80000000u));
    Py_ssize_t count = 0, c = 0;
    for (; c + 8 <= n; c += 8) {
        __m256i h = x;
        h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
        h = _mm256_mullo_epi32(h, f1);
        h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
        h = _mm256_mullo_epi32(h, f2);
        h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
        x = _mm256_add_epi32(x, step);
        __m256i below = _mm256_cmpgt_epi32(limit, _mm256_xor_si256(h, flip));
        unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(below)); /* bit i: draw c + i */
        __m256i at = _mm256_set1_epi64x((long long)c);
        const __m256i *off = (const __m256i *)OFFSETS[m];
        _mm256_storeu_si256((__m256i *)(pos + count), _mm256_add_epi64(_mm256_loadu_si256(off), at));
        _mm256_storeu_si256((__m256i *)(pos + count + 4), _mm256_add_epi64(_mm256_loadu_si256(off + 1), at));
        count += COUNTS[m];
    }
    for (; c < n; c++) {
        pos[count] = c;
        count += fmix32(folded + (uint32_t)(c + 1) * 0x9E3779B9u) < bound;
    }
    return count;
}
#endif

/* Whether the AVX2 pass runs here (module init asks the CPU once). */
static int avx2_hits = 0;

/* The cells c < n of a row whose draw is below `bound` (a centre), in order, into pos (room n + 8);
 * their count. hit: n bytes of scratch for the portable path. */
static Py_ssize_t row_hits(uint32_t folded, Py_ssize_t n, uint32_t bound, unsigned char *hit, Py_ssize_t *pos) {
#ifdef AVX2_HITS
    if (avx2_hits)
        return hits_avx2(folded, n, bound, pos);
#endif
    hash_row(hit, folded, (uint32_t)n, bound);
    return set_positions(hit, n, pos);
}

/* Whether cell c of a row may be chosen: before the row's `limit`, a candidate (`may`: the row's
 * candidate bytes, or NULL for every cell) and (with `specials`) its id not special. */
static inline int allowed_at(const unsigned char *may, const char *ids, int id_size, Py_ssize_t at, Py_ssize_t c,
                             Py_ssize_t limit, int specials, const unsigned char *table, Py_ssize_t n_special) {
    if (c >= limit || (may && !may[c]))
        return 0;
    if (!specials)
        return 1;
    int64_t v = read_id(ids, at, id_size);
    return !(v >= 0 && v < n_special && table[v]);
}

/* draw(out, out_size, ids, id_size, candidates, lengths, salts, rows, width, bound, span, special_table,
 *      random_ids, mask_id, bert, mask_share, random_share, specials, pad): candidates (bytes, rows x
 * width) or lengths (int64, one a row: the cells before it) or both empty (every cell); with
 * `specials` (pad one of them; -1: none), a row's trailing pad ids are skipped (`before_padding`). */
static PyObject *draw(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer out, ids, cand, lens, salts, special, random_ids;
    int out_size, id_size, span, bert, specials;
    Py_ssize_t rows, width;
    unsigned long long bound;
    long long mask_id, pad;
    double mask_share, random_share;
    if (!PyArg_ParseTuple(args, "w*iy*iy*y*y*nnKiy*y*LpddpL", &out, &out_size, &ids, &id_size, &cand, &lens, &salts,
                          &rows, &width, &bound, &span, &special, &random_ids, &mask_id, &bert, &mask_share,
                          &random_share, &specials, &pad))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t cells = rows * width, n_special = special.len, n_random = random_ids.len / 8;
    unsigned char *hit = NULL;
    Py_ssize_t *chosen = NULL;
    if (!sized(&out, cells * out_size, "out") || !sized(&ids, cells * id_size, "ids") ||
        (cand.len && !sized(&cand, cells, "candidates")) || (lens.len && !sized(&lens, rows * 8, "lengths")) ||
        !sized(&salts, rows * 8, "salts"))
        goto done;
    if (n_random < 1) {
        PyErr_SetString(PyExc_ValueError, "random_ids is empty: a rule needs an id that is not special");
        goto done;
    }
    hit = malloc((size_t)width * 2 + 1);
    chosen = malloc(((size_t)width + 8) * sizeof(Py_ssize_t));
    if (!hit || !chosen) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    const Py_ssize_t n_rows = rows, w = width; /* copies stores cannot alias (see `lay`) */
    const uint64_t *salt = salts.buf;
    const int64_t *length = lens.len ? lens.buf : NULL;
    const unsigned char *may_all = cand.len ? cand.buf : NULL, *table = special.buf;
    const int64_t *pool = random_ids.buf;
    char *o = out.buf;
    const char *id = ids.buf;
    unsigned char *centre = hit + w;
    uint32_t bound32 = (uint32_t)bound;
    /* share < mask_share exactly when share53 < ceil(mask_share * 2**53), an integer (scaling by a power
     * of two is exact), compared without a conversion to double */
    const uint64_t mask_below = (uint64_t)ceil(mask_share * 0x1p53);
    const uint64_t random_below = (uint64_t)ceil(random_share * 0x1p53);
    Py_ssize_t lo = -((span - 1) / 2), hi = span / 2;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        uint64_t s = salt[r];
        uint32_t folded = (uint32_t)((s ^ (s >> 32)) & 0xFFFFFFFFu);
        Py_ssize_t at = r * w, limit = w;
        if (length)
            limit = length[r] < 0 ? 0 : (length[r] < w ? (Py_ssize_t)length[r] : w);
        if (specials && pad >= 0 && !may_all) /* padding is special: never chosen, so never drawn */
            limit = before_padding(id + at * id_size, limit, id_size, pad);
        const unsigned char *may = may_all ? may_all + at : NULL;
        fill_none(o, at, w, out_size);
        Py_ssize_t n_chosen = 0;
        if (span > 1) { /* DNABERT's span: centres that may be chosen, then the cells near one that may be */
            hash_row(hit, folded, (uint32_t)limit, bound32);
            for (Py_ssize_t c = 0; c < limit; c++)
                centre[c] = hit[c] & allowed_at(may, id, id_size, at + c, c, limit, specials, table, n_special);
            for (Py_ssize_t c = 0; c < limit; c++) {
                int near = 0;
                for (Py_ssize_t from = c - hi; from <= c - lo && !near; from++)
                    near = from >= 0 && from < limit && centre[from];
                if (near && allowed_at(may, id, id_size, at + c, c, limit, specials, table, n_special))
                    chosen[n_chosen++] = c;
            }
        } else { /* the centres' positions without a branch per cell, then those that may be chosen */
            Py_ssize_t n_hit = row_hits(folded, limit, bound32, hit, chosen);
            if (may || specials) {
                for (Py_ssize_t i = 0; i < n_hit; i++)
                    if (allowed_at(may, id, id_size, at + chosen[i], chosen[i], limit, specials, table, n_special))
                        chosen[n_chosen++] = chosen[i];
            } else {
                n_chosen = n_hit;
            }
        }
        for (Py_ssize_t i = 0; i < n_chosen; i++) {
            Py_ssize_t c = chosen[i];
            int64_t value = mask_id;
            if (bert) {
                uint64_t second = mix64(s + (uint64_t)(c + 1) * SPLITMIX_GOLDEN);
                uint64_t share53 = second >> 11; /* the share is share53 / 2**53 */
                uint64_t third = mix64(second ^ 0xD1B54A32D192ED03ull) >> 32;
                uint64_t pick = (third * (uint64_t)n_random) >> 32;
                int64_t other = share53 < random_below ? pool[pick] : MLM_KEEP; /* selects, not branches */
                value = share53 < mask_below ? mask_id : other;
            }
            write_int(o, at + c, out_size, value);
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    free(hit);
    free(chosen);
    PyBuffer_Release(&out);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&cand);
    PyBuffer_Release(&lens);
    PyBuffer_Release(&salts);
    PyBuffer_Release(&special);
    PyBuffer_Release(&random_ids);
    return result;
}

/* vector_path(on): use the AVX2 pass where the CPU has it (on) or the portable one; the previous setting.
 * For tests, which check that both paths draw the same cells. */
static PyObject *vector_path(PyObject *self, PyObject *args) {
    (void)self;
    int on, previous = avx2_hits;
    if (!PyArg_ParseTuple(args, "p", &on))
        return NULL;
#ifdef AVX2_HITS
    avx2_hits = on && __builtin_cpu_supports("avx2");
#endif
    return PyBool_FromLong(previous);
}


static PyMethodDef methods[] = {
    {"vector_path", vector_path, METH_VARARGS, "Use the AVX2 draws where the CPU has them (True) or not; the previous."},
    {"draw", draw, METH_VARARGS, "Masked-LM draws of a batch into `out` (mlm.mask_tokens)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "mlm_kernel", "Masked-LM draws in one pass (C).", -1,
                                    methods};

PyMODINIT_FUNC PyInit_mlm_kernel(void) {
    build_offsets();
#ifdef AVX2_HITS
    __builtin_cpu_init();
    avx2_hits = __builtin_cpu_supports("avx2");
#endif
    return PyModule_Create(&module);
}
