/* Masked-LM draws and their laying over the model inputs, one pass per batch (`batch.mlm`).
 *
 * Hand-written because numpy needs a dozen whole-batch passes for what is one loop here: on a CPU
 * `mask_tokens` and `lay_masks` cost about three times the rest of a byte batch (docs/benchmarks.md).
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
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MLM_NONE (-1)
#define MLM_KEEP (-2)
#define IGNORE_INDEX (-100)

static inline uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

static inline uint64_t mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline int64_t read_int(const char *base, Py_ssize_t i, int size) {
    switch (size) {
    case 1: return ((const int8_t *)base)[i];
    case 2: return ((const int16_t *)base)[i];
    case 4: return ((const int32_t *)base)[i];
    default: return ((const int64_t *)base)[i];
    }
}

static inline int64_t read_id(const char *base, Py_ssize_t i, int size) {
    /* ids: uint8 bases, or a vocabulary's signed ids */
    return size == 1 ? (int64_t)((const uint8_t *)base)[i] : read_int(base, i, size);
}

static inline void write_int(char *base, Py_ssize_t i, int size, int64_t v) {
    switch (size) {
    case 1: ((int8_t *)base)[i] = (int8_t)v; break;
    case 2: ((int16_t *)base)[i] = (int16_t)v; break;
    case 4: ((int32_t *)base)[i] = (int32_t)v; break;
    default: ((int64_t *)base)[i] = v; break;
    }
}

static int sized(Py_buffer *b, Py_ssize_t want, const char *what) {
    if (b->len < want) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", what, b->len, want);
        return 0;
    }
    return 1;
}

/* The x86-64 build also carries an AVX2 copy of the hash loop, picked at load time (8 lanes of 32-bit
 * multiplies instead of SSE2's emulated ones); other machines compile the plain loop. */
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

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

/* The cells before `limit` of a row (ids of `size` bytes from `at`) once its trailing `pad` ids are left
 * out: a tokenizer's rows end in padding (most of a row where sequences are short), which is never
 * chosen, so it is not drawn at all. */
static Py_ssize_t before_padding(const char *ids, Py_ssize_t at, Py_ssize_t limit, int size, int64_t pad) {
    switch (size) {
    case 1:
        while (limit > 0 && ((const uint8_t *)ids)[at + limit - 1] == pad)
            limit--;
        break;
    case 2:
        while (limit > 0 && ((const int16_t *)ids)[at + limit - 1] == pad)
            limit--;
        break;
    case 4:
        while (limit > 0 && ((const int32_t *)ids)[at + limit - 1] == pad)
            limit--;
        break;
    default:
        while (limit > 0 && ((const int64_t *)ids)[at + limit - 1] == pad)
            limit--;
        break;
    }
    return limit;
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
            limit = before_padding(id, at, limit, id_size, pad);
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
                uint64_t second = mix64(s + (uint64_t)(c + 1) * 0x9E3779B97F4A7C15ull);
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

/* n labels of -100 from `at` (a loop the compiler vectorises). */
VECTOR_CLONES static void fill_ignore(int64_t *restrict at, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        at[i] = IGNORE_INDEX;
}

/* Megatron's labels of n columns: the label where trained (not -100), else the token itself (a loop the
 * compiler vectorises). */
VECTOR_CLONES static void unmask(int64_t *restrict out, const int64_t *restrict labels, const int64_t *restrict ids,
                                 Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t trained = -(int64_t)(labels[i] != IGNORE_INDEX);
        out[i] = (labels[i] & trained) | (ids[i] & ~trained);
    }
}

/* One row laid: code j lies over token column start + j. Every cell of the row is written once,
 * without a branch that depends on the draws (a loop the compiler vectorises): predicted = drawn and
 * trained; the id shown where predicted and the code is an id; `weight` NULL: the label kept where
 * predicted, -100 elsewhere; else the loss mask 1 where predicted, 0 elsewhere, labels left alone. */
#define LAY_ROW(T)                                                                                                     \
    VECTOR_CLONES static Py_ssize_t lay_row_##T(int64_t *restrict ids, int64_t *restrict labels,                   \
                                                float *restrict weight, int64_t *restrict unmasked,                 \
                                                const T *restrict codes, Py_ssize_t length, Py_ssize_t start,       \
                                                Py_ssize_t width) {                                                 \
        Py_ssize_t lo = start < 0 ? 0 : (start < length ? start : length);                                          \
        Py_ssize_t hi = start + width < lo ? lo : (start + width < length ? start + width : length);               \
        int64_t predicted = 0;                                                                                         \
        const T *drawn = codes - start; /* drawn[col]: the code over column col, for lo <= col < hi */             \
        if (weight) {                                                                                                  \
            unmask(unmasked, labels, ids, lo);                                                                         \
            for (Py_ssize_t col = lo; col < hi; col++) {                                                             \
                int64_t code = drawn[col], label = labels[col], id = ids[col];                                        \
                int64_t trained = -(int64_t)(label != IGNORE_INDEX);                                                  \
                int64_t hit = trained & -(int64_t)(code != MLM_NONE);                                                 \
                int64_t show = hit & -(int64_t)(code >= 0);                                                           \
                unmasked[col] = (label & trained) | (id & ~trained);                                                  \
                ids[col] = (code & show) | (id & ~show);                                                              \
                weight[col] = (float)(int32_t)(hit & 1); /* through int32: AVX2 converts no int64 to float */        \
                predicted -= hit;                                                                                      \
            }                                                                                                          \
            unmask(unmasked + hi, labels + hi, ids + hi, length - hi);                                                \
            return predicted;                                                                                          \
        }                                                                                                              \
        fill_ignore(labels, lo);                                                                                       \
        for (Py_ssize_t col = lo; col < hi; col++) {                                                                 \
            int64_t code = drawn[col], label = labels[col];                                                           \
            int64_t hit = -(int64_t)((code != MLM_NONE) & (label != IGNORE_INDEX));                                  \
            int64_t show = hit & -(int64_t)(code >= 0);                                                               \
            ids[col] = (code & show) | (ids[col] & ~show);                                                            \
            labels[col] = (label & hit) | (IGNORE_INDEX & ~hit);                                                      \
            predicted -= hit;                                                                                          \
        }                                                                                                              \
        fill_ignore(labels + hi, length - hi);                                                                         \
        return predicted;                                                                                              \
    }
LAY_ROW(int8_t)
LAY_ROW(int16_t)
LAY_ROW(int32_t)
LAY_ROW(int64_t)

/* lay(ids, labels, codes, code_size, starts, rows, seq_length, width, loss_mask, unmasked): the chosen
 * cells of `codes` laid over int64 `ids` and `labels` (rows x seq_length) in place; code column j of row
 * r is token column starts[r] + j. A cell is predicted when chosen and its label is not IGNORE_INDEX.
 * loss_mask (float32, rows x seq_length; an empty buffer: none): Megatron's batch, the loss mask 1 where
 * predicted and 0 elsewhere, labels left as they are, and `unmasked` (int64, rows x seq_length) written
 * whole: the label where trained, else the token before masking; else labels become IGNORE_INDEX
 * where not predicted. Returns the number predicted. */
static PyObject *lay(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ids, labels, codes, starts, loss, unmasked;
    int code_size;
    Py_ssize_t rows, seq_length, width;
    if (!PyArg_ParseTuple(args, "w*w*y*iy*nnnw*w*", &ids, &labels, &codes, &code_size, &starts, &rows, &seq_length,
                          &width, &loss, &unmasked))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t predicted = 0;
    int megatron = loss.len > 0;
    if (!sized(&ids, rows * seq_length * 8, "ids") || !sized(&labels, rows * seq_length * 8, "labels") ||
        !sized(&codes, rows * width * code_size, "codes") || !sized(&starts, rows * 8, "starts") ||
        (megatron && !sized(&loss, rows * seq_length * 4, "loss_mask")) ||
        (megatron && !sized(&unmasked, rows * seq_length * 8, "unmasked")))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    const Py_ssize_t n_rows = rows, length = seq_length, n_codes = width;
    int64_t *id = ids.buf, *label = labels.buf;
    const int64_t *first = starts.buf;
    const char *code = codes.buf;
    float *weight = megatron ? loss.buf : NULL;
    int64_t *plain = megatron ? unmasked.buf : NULL;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        int64_t *row_ids = id + r * length, *row_labels = label + r * length;
        float *row_weight = weight ? weight + r * length : NULL;
        int64_t *row_plain = plain ? plain + r * length : NULL;
        const char *row_codes = code + r * n_codes * code_size;
        Py_ssize_t start = (Py_ssize_t)first[r];
        switch (code_size) {
        case 1:
            predicted += lay_row_int8_t(row_ids, row_labels, row_weight, row_plain, (const int8_t *)row_codes, length,
                                        start, n_codes);
            break;
        case 2:
            predicted += lay_row_int16_t(row_ids, row_labels, row_weight, row_plain, (const int16_t *)row_codes, length,
                                         start, n_codes);
            break;
        case 4:
            predicted += lay_row_int32_t(row_ids, row_labels, row_weight, row_plain, (const int32_t *)row_codes, length,
                                         start, n_codes);
            break;
        default:
            predicted += lay_row_int64_t(row_ids, row_labels, row_weight, row_plain, (const int64_t *)row_codes, length,
                                         start, n_codes);
            break;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(predicted);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&labels);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&loss);
    PyBuffer_Release(&unmasked);
    return result;
}

/* One window row's hf ids and labels with its masked-LM codes, in one pass over its base columns: the
 * row's bases lie at token columns p .. p + n; a base j is predicted when drawn (code != MLM_NONE) and
 * trained (not `dropped`): its label is label_bases[j] and, where the code is an id, the model sees
 * that id; every other label is -100. No branch that depends on the draws (the loop is vectorised);
 * the two loops differ only in where `trained` comes from (a whole-row constant when nothing is
 * dropped), as in `LAY_WINDOW_MEGATRON`. */
#define HF_CELL(TRAINED)                                                                                               \
    int64_t code = codes[j];                                                                                           \
    int64_t hit = (TRAINED) & -(int64_t)(code != MLM_NONE);                                                           \
    int64_t show = hit & -(int64_t)(code >= 0);                                                                       \
    labels[j] = ((int64_t)label_bases[j] & hit) | (IGNORE_INDEX & ~hit);                                              \
    ids[j] = (code & show) | (ids[j] & ~show);                                                                        \
    predicted -= hit;
#define LAY_WINDOW(T)                                                                                                  \
    VECTOR_CLONES static Py_ssize_t lay_window_##T(int64_t *restrict ids, int64_t *restrict labels,                \
                                                   const uint8_t *restrict label_bases, const T *restrict codes,    \
                                                   const uint8_t *restrict dropped, Py_ssize_t n) {                \
        Py_ssize_t predicted = 0;                                                                                      \
        if (dropped) {                                                                                                 \
            for (Py_ssize_t j = 0; j < n; j++) {                                                                       \
                HF_CELL(-(int64_t)(dropped[j] == 0))                                                                   \
            }                                                                                                          \
        } else {                                                                                                       \
            for (Py_ssize_t j = 0; j < n; j++) {                                                                       \
                HF_CELL(-1)                                                                                            \
            }                                                                                                          \
        }                                                                                                              \
        return predicted;                                                                                              \
    }
LAY_WINDOW(int8_t)
LAY_WINDOW(int16_t)
LAY_WINDOW(int32_t)

/* The same row for Megatron's batch: the labels are the unmasked tokens (a trained base's label is
 * label_bases[j], an untrained one's the token itself), `loss` (float32) is 1 where predicted and 0
 * elsewhere, and the ids are masked as above. */
#define MEGATRON_CELL(TRAINED)                                                                                         \
    int64_t code = codes[j], id = ids[j];                                                                              \
    int64_t trained = TRAINED;                                                                                         \
    int64_t hit = trained & -(int64_t)(code != MLM_NONE);                                                             \
    int64_t show = hit & -(int64_t)(code >= 0);                                                                       \
    labels[j] = ((int64_t)label_bases[j] & trained) | (id & ~trained);                                                \
    loss[j] = (float)(int32_t)(hit & 1); /* through int32: AVX2 converts int32 lanes to float, not int64 */           \
    ids[j] = (code & show) | (id & ~show);                                                                            \
    predicted -= hit;
#define LAY_WINDOW_MEGATRON(T)                                                                                         \
    VECTOR_CLONES static Py_ssize_t lay_window_megatron_##T(                                                         \
        int64_t *restrict ids, int64_t *restrict labels, float *restrict loss, const uint8_t *restrict label_bases,  \
        const T *restrict codes, const uint8_t *restrict dropped, Py_ssize_t n) {                                    \
        Py_ssize_t predicted = 0;                                                                                      \
        if (dropped) {                                                                                                 \
            for (Py_ssize_t j = 0; j < n; j++) {                                                                       \
                MEGATRON_CELL(-(int64_t)(dropped[j] == 0))                                                             \
            }                                                                                                          \
        } else {                                                                                                       \
            for (Py_ssize_t j = 0; j < n; j++) {                                                                       \
                MEGATRON_CELL(-1)                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        return predicted;                                                                                              \
    }
LAY_WINDOW_MEGATRON(int8_t)
LAY_WINDOW_MEGATRON(int16_t)
LAY_WINDOW_MEGATRON(int32_t)

/* lay_windows(ids, labels, label_bases, codes, code_size, dropped, first, lengths, rows, seq_length,
 * width, loss_mask): the hf labels of window rows whose bases (label_bases, uint8 rows x width) start
 * at token column `first`, written whole into int64 `labels` (rows x seq_length), with the masked-LM
 * codes (rows x width, code_size bytes) laid over int64 `ids` in place: a base before its row's length
 * (int64 lengths) is predicted when drawn and not dropped (uint8 rows x width, nonzero: not trained;
 * empty: every base is trained). loss_mask (float32 zeros, rows x seq_length; empty: the hf batch):
 * Megatron's batch instead, labels the unmasked tokens and loss_mask 1 where predicted. Returns the
 * number predicted. */
static PyObject *lay_windows(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ids, labels, label_bases, codes, dropped, lengths, loss;
    int code_size;
    Py_ssize_t first, rows, seq_length, width;
    if (!PyArg_ParseTuple(args, "w*w*y*y*iy*ny*nnnw*", &ids, &labels, &label_bases, &codes, &code_size, &dropped,
                          &first, &lengths, &rows, &seq_length, &width, &loss))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t predicted = 0;
    int megatron = loss.len > 0;
    if (!sized(&ids, rows * seq_length * 8, "ids") || !sized(&labels, rows * seq_length * 8, "labels") ||
        !sized(&label_bases, rows * width, "label_bases") || !sized(&codes, rows * width * code_size, "codes") ||
        (dropped.len && !sized(&dropped, rows * width, "dropped")) || !sized(&lengths, rows * 8, "lengths") ||
        (megatron && !sized(&loss, rows * seq_length * 4, "loss_mask")))
        goto done;
    if (code_size != 1 && code_size != 2 && code_size != 4) {
        PyErr_Format(PyExc_ValueError, "codes of %d bytes: 1, 2 or 4 expected", code_size);
        goto done;
    }
    if (first < 0 || first > seq_length) {
        PyErr_Format(PyExc_ValueError, "first base column %zd outside a row of %zd", first, seq_length);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    const Py_ssize_t n_rows = rows, length = seq_length, w = width, p = first;
    int64_t *id = ids.buf, *label = labels.buf;
    const uint8_t *base = label_bases.buf, *drop = dropped.len ? dropped.buf : NULL;
    const int64_t *len = lengths.buf;
    const char *code = codes.buf;
    float *weight = megatron ? loss.buf : NULL;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        int64_t *row_ids = id + r * length, *row_labels = label + r * length;
        Py_ssize_t n = len[r] < 0 ? 0 : (Py_ssize_t)len[r];
        n = n < w ? n : w;
        n = n < length - p ? n : length - p;
        const uint8_t *row_drop = drop ? drop + r * w : NULL;
        const char *row_codes = code + r * w * code_size;
        if (weight) { /* the labels outside the bases are the tokens; the loss mask there stays 0 */
            float *row_loss = weight + r * length + p;
            memcpy(row_labels, row_ids, (size_t)p * sizeof(int64_t));
            memcpy(row_labels + p + n, row_ids + p + n, (size_t)(length - p - n) * sizeof(int64_t));
            switch (code_size) {
            case 1:
                predicted += lay_window_megatron_int8_t(row_ids + p, row_labels + p, row_loss, base + r * w,
                                                        (const int8_t *)row_codes, row_drop, n);
                break;
            case 2:
                predicted += lay_window_megatron_int16_t(row_ids + p, row_labels + p, row_loss, base + r * w,
                                                         (const int16_t *)row_codes, row_drop, n);
                break;
            default:
                predicted += lay_window_megatron_int32_t(row_ids + p, row_labels + p, row_loss, base + r * w,
                                                         (const int32_t *)row_codes, row_drop, n);
                break;
            }
            continue;
        }
        fill_ignore(row_labels, p);
        switch (code_size) {
        case 1:
            predicted += lay_window_int8_t(row_ids + p, row_labels + p, base + r * w, (const int8_t *)row_codes,
                                           row_drop, n);
            break;
        case 2:
            predicted += lay_window_int16_t(row_ids + p, row_labels + p, base + r * w, (const int16_t *)row_codes,
                                            row_drop, n);
            break;
        default:
            predicted += lay_window_int32_t(row_ids + p, row_labels + p, base + r * w, (const int32_t *)row_codes,
                                            row_drop, n);
            break;
        }
        fill_ignore(row_labels + p + n, length - p - n);
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(predicted);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&labels);
    PyBuffer_Release(&label_bases);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&dropped);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&loss);
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
    {"lay", lay, METH_VARARGS, "Lay a batch's masked-LM draws over its int64 ids and labels (mlm.lay_masks)."},
    {"lay_windows", lay_windows, METH_VARARGS, "Window rows' hf labels written with their masked-LM draws laid over."},
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
