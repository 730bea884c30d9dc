/* What the masked-LM extensions share (mlm_kernel.c: the draws; mlm_lay.c: laying them over a batch):
 * the codes' sentinels, the buffer-size check and the AVX2 clones of vectorised loops. */
#ifndef BIONEMO_WDS_MLM_COMMON_H
#define BIONEMO_WDS_MLM_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* `mlm_rule.MLM_NONE` (not chosen), `MLM_KEEP` (chosen, shown as it is) and the label not predicted. */
#define MLM_NONE (-1)
#define MLM_KEEP (-2)
#define IGNORE_INDEX (-100)

/* Whether buffer b holds at least `want` bytes; else a ValueError naming it. */
static inline int sized(Py_buffer *b, Py_ssize_t want, const char *what) {
    if (b->len < want) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", what, b->len, want);
        return 0;
    }
    return 1;
}

/* The x86-64 build also carries an AVX2 copy of each vectorised loop, picked at load time (8 lanes of
 * 32-bit multiplies and wider stores instead of SSE2's); other machines compile the plain loop. */
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* Element i of a buffer of signed integers of `size` bytes. */
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

/* The cells of a row of n ids (`size` bytes each: uint8, or signed int16, int32, int64) before its
 * trailing `pad` ids (pad < 0 or outside the ids' range: none). A tokenizer's rows end in padding (most
 * of a row where sequences are short), which is never chosen and whose inputs are constants, so the
 * draws and the laying stop here. Scanned back 32 bytes at a time (four 8-byte words against the pad
 * pattern: a loop over cells costs about 3 instructions a cell, this under one), then cell by cell. */
static inline Py_ssize_t before_padding(const char *ids, Py_ssize_t n, int size, int64_t pad) {
    uint64_t pattern;
    switch (size) {
    case 1: if (pad < 0 || pad > UINT8_MAX) return n; pattern = 0x0101010101010101ull * (uint8_t)pad; break;
    case 2: if (pad < 0 || pad > INT16_MAX) return n; pattern = 0x0001000100010001ull * (uint16_t)pad; break;
    case 4: if (pad < 0 || pad > INT32_MAX) return n; pattern = 0x0000000100000001ull * (uint32_t)pad; break;
    default: if (pad < 0) return n; pattern = (uint64_t)pad; break;
    }
#define IS_PAD(i) (read_id(ids, (i), size) == pad)
    while (n > 0 && (n * size) % 32 && IS_PAD(n - 1))
        n--;
    if ((n * size) % 32 == 0) {
        while (n > 0) {
            uint64_t w[4];
            memcpy(w, ids + n * size - 32, 32);
            if ((w[0] ^ pattern) | (w[1] ^ pattern) | (w[2] ^ pattern) | (w[3] ^ pattern))
                break;
            n -= 32 / size;
        }
    }
    while (n > 0 && IS_PAD(n - 1))
        n--;
#undef IS_PAD
    return n;
}

#endif
