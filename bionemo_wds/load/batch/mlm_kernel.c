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

/* Whether cell `at` may be chosen: a candidate, and (with `specials`) its id not special. */
static inline int allowed_at(const unsigned char *may, const char *ids, int id_size, Py_ssize_t at, int specials,
                             const unsigned char *table, Py_ssize_t n_special) {
    if (!may[at])
        return 0;
    if (!specials)
        return 1;
    int64_t v = read_id(ids, at, id_size);
    return !(v >= 0 && v < n_special && table[v]);
}

/* draw(out, out_size, ids, id_size, candidates, salts, rows, width, bound, span, special_table,
 *      random_ids, mask_id, bert, mask_share, random_share, specials) */
static PyObject *draw(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer out, ids, cand, salts, special, random_ids;
    int out_size, id_size, span, bert, specials;
    Py_ssize_t rows, width;
    unsigned long long bound;
    long long mask_id;
    double mask_share, random_share;
    if (!PyArg_ParseTuple(args, "w*iy*iy*y*nnKiy*y*Lpddp", &out, &out_size, &ids, &id_size, &cand, &salts, &rows,
                          &width, &bound, &span, &special, &random_ids, &mask_id, &bert, &mask_share, &random_share,
                          &specials))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t cells = rows * width, n_special = special.len, n_random = random_ids.len / 8;
    unsigned char *hit = NULL;
    Py_ssize_t *chosen = NULL;
    if (!sized(&out, cells * out_size, "out") || !sized(&ids, cells * id_size, "ids") ||
        !sized(&cand, cells, "candidates") || !sized(&salts, rows * 8, "salts"))
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
    const unsigned char *may = cand.buf, *table = special.buf;
    const int64_t *pool = random_ids.buf;
    char *o = out.buf;
    const char *id = ids.buf;
    unsigned char *centre = hit + w;
    uint32_t bound32 = (uint32_t)bound, n_width = (uint32_t)w;
    Py_ssize_t lo = -((span - 1) / 2), hi = span / 2;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        uint64_t s = salt[r];
        uint32_t folded = (uint32_t)((s ^ (s >> 32)) & 0xFFFFFFFFu);
        Py_ssize_t at = r * w;
        hash_row(hit, folded, n_width, bound32);
        fill_none(o, at, w, out_size);
        Py_ssize_t n_chosen = 0;
        if (span > 1) { /* DNABERT's span: centres that may be chosen, then the cells near one that may be */
            for (Py_ssize_t c = 0; c < w; c++)
                centre[c] = hit[c] & allowed_at(may, id, id_size, at + c, specials, table, n_special);
            for (Py_ssize_t c = 0; c < w; c++) {
                int near = 0;
                for (Py_ssize_t from = c - hi; from <= c - lo && !near; from++)
                    near = from >= 0 && from < w && centre[from];
                if (near && allowed_at(may, id, id_size, at + c, specials, table, n_special))
                    chosen[n_chosen++] = c;
            }
        } else { /* the drawn cells' positions without a branch per cell, then those that may be chosen */
            Py_ssize_t n_hit = set_positions(hit, w, chosen);
            for (Py_ssize_t i = 0; i < n_hit; i++)
                if (allowed_at(may, id, id_size, at + chosen[i], specials, table, n_special))
                    chosen[n_chosen++] = chosen[i];
        }
        for (Py_ssize_t i = 0; i < n_chosen; i++) {
            Py_ssize_t c = chosen[i];
            int64_t value = mask_id;
            if (bert) {
                uint64_t second = mix64(s + (uint64_t)(c + 1) * 0x9E3779B97F4A7C15ull);
                double share = (double)(second >> 11) * 0x1p-53;
                uint64_t third = mix64(second ^ 0xD1B54A32D192ED03ull) >> 32;
                uint64_t pick = (third * (uint64_t)n_random) >> 32;
                int64_t other = share < random_share ? pool[pick] : MLM_KEEP; /* selects, not branches */
                value = share < mask_share ? mask_id : other;
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
    PyBuffer_Release(&salts);
    PyBuffer_Release(&special);
    PyBuffer_Release(&random_ids);
    return result;
}

/* flags[j]: whether code j of a row of `width` codes (of type T) is drawn (not MLM_NONE); a loop the
 * compiler vectorises. */
#define DRAWN_FLAGS(T)                                                                                                 \
    static void drawn_##T(const T *row, Py_ssize_t width, unsigned char *flags) {                                     \
        for (Py_ssize_t j = 0; j < width; j++)                                                                         \
            flags[j] = row[j] != MLM_NONE;                                                                             \
    }
DRAWN_FLAGS(int8_t)
DRAWN_FLAGS(int16_t)
DRAWN_FLAGS(int32_t)
DRAWN_FLAGS(int64_t)

/* The positions j of a row's drawn codes, in order (`set_positions` of their flags); their count. */
static Py_ssize_t drawn_positions(const char *codes, Py_ssize_t at, Py_ssize_t width, int size, unsigned char *flags,
                                  Py_ssize_t *pos) {
    switch (size) {
    case 1: drawn_int8_t((const int8_t *)codes + at, width, flags); break;
    case 2: drawn_int16_t((const int16_t *)codes + at, width, flags); break;
    case 4: drawn_int32_t((const int32_t *)codes + at, width, flags); break;
    default: drawn_int64_t((const int64_t *)codes + at, width, flags); break;
    }
    return set_positions(flags, width, pos);
}

/* lay(ids, labels, codes, code_size, starts, rows, seq_length, width, loss_mask): the chosen cells of
 * `codes` laid over int64 `ids` and `labels` (rows x seq_length) in place; code column j of row r is
 * token column starts[r] + j. A cell is predicted when chosen and its label is not IGNORE_INDEX.
 * loss_mask (float32, zeros; an empty buffer: none): 1 where predicted, labels left as they are
 * (Megatron); else labels become IGNORE_INDEX where not predicted. Returns the number predicted. */
static PyObject *lay(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ids, labels, codes, starts, loss;
    int code_size;
    Py_ssize_t rows, seq_length, width;
    if (!PyArg_ParseTuple(args, "w*w*y*iy*nnnw*", &ids, &labels, &codes, &code_size, &starts, &rows, &seq_length,
                          &width, &loss))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t predicted = 0;
    Py_ssize_t *pos = NULL, *cols = NULL;
    int64_t *kept = NULL;
    unsigned char *flags = NULL;
    int megatron = loss.len > 0;
    if (!sized(&ids, rows * seq_length * 8, "ids") || !sized(&labels, rows * seq_length * 8, "labels") ||
        !sized(&codes, rows * width * code_size, "codes") || !sized(&starts, rows * 8, "starts") ||
        (megatron && !sized(&loss, rows * seq_length * 4, "loss_mask")))
        goto done;
    pos = malloc(((size_t)width + 8) * sizeof(Py_ssize_t));
    cols = malloc(((size_t)width + 1) * sizeof(Py_ssize_t));
    kept = malloc(((size_t)width + 1) * sizeof(int64_t));
    flags = malloc((size_t)width + 1);
    if (!pos || !cols || !kept || !flags) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    /* copies the stores below cannot alias (the arguments' addresses went to PyArg_ParseTuple, so the
     * compiler would reload them after every store, and the label loop would not be vectorised) */
    const Py_ssize_t n_rows = rows, length = seq_length, n_codes = width;
    int64_t *id = ids.buf, *label = labels.buf;
    const int64_t *first = starts.buf;
    const char *code = codes.buf;
    float *weight = loss.buf;
    for (Py_ssize_t r = 0; r < n_rows; r++) {
        int64_t *row_ids = id + r * length, *row_labels = label + r * length;
        Py_ssize_t n = drawn_positions(code, r * n_codes, n_codes, code_size, flags, pos), m = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t col = first[r] + pos[i];
            if (col < 0 || col >= length || row_labels[col] == IGNORE_INDEX)
                continue;
            int64_t drawn = read_int(code, r * n_codes + pos[i], code_size);
            row_ids[col] = drawn >= 0 ? drawn : row_ids[col]; /* a select: MLM_KEEP leaves the id */
            cols[m] = col;
            kept[m++] = row_labels[col];
        }
        predicted += m;
        if (megatron) {
            for (Py_ssize_t i = 0; i < m; i++)
                weight[r * length + cols[i]] = 1.0f;
        } else { /* every label -100, then the predicted ones back */
            for (Py_ssize_t col = 0; col < length; col++)
                row_labels[col] = IGNORE_INDEX;
            for (Py_ssize_t i = 0; i < m; i++)
                row_labels[cols[i]] = kept[i];
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(predicted);
done:
    free(pos);
    free(cols);
    free(kept);
    free(flags);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&labels);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&loss);
    return result;
}

static PyMethodDef methods[] = {
    {"draw", draw, METH_VARARGS, "Masked-LM draws of a batch into `out` (mlm.mask_tokens)."},
    {"lay", lay, METH_VARARGS, "Lay a batch's masked-LM draws over its int64 ids and labels (mlm.lay_masks)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "mlm_kernel", "Masked-LM draws in one pass (C).", -1,
                                    methods};

PyMODINIT_FUNC PyInit_mlm_kernel(void) {
    build_offsets();
    return PyModule_Create(&module);
}
