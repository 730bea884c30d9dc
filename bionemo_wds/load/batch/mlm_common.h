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

#include "vector_clones.h" /* an AVX2 copy of each vectorised loop */

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

/* The cells of a row of n ids of type T before its trailing `pad` ids: scanned back a block of 64 at a
 * time (a whole-block "any not pad" the compiler vectorises: under half an instruction a cell with
 * AVX2, against about 3 for a loop that stops at the first id that is not pad), then cell by cell. */
#define TRAILING_PAD(NAME, T)                                                                                          \
    VECTOR_CLONES static Py_ssize_t before_padding_##NAME(const T *restrict ids, Py_ssize_t n, T pad) {              \
        while (n % 64 && n > 0 && ids[n - 1] == pad)                                                                   \
            n--;                                                                                                       \
        if (n % 64 == 0) {                                                                                             \
            while (n > 0) {                                                                                            \
                const T *block = ids + n - 64;                                                                         \
                int other = 0;                                                                                         \
                for (int i = 0; i < 64; i++)                                                                           \
                    other |= block[i] != pad;                                                                          \
                if (other)                                                                                             \
                    break;                                                                                             \
                n -= 64;                                                                                               \
            }                                                                                                          \
        }                                                                                                              \
        while (n > 0 && ids[n - 1] == pad)                                                                             \
            n--;                                                                                                       \
        return n;                                                                                                      \
    }
TRAILING_PAD(u8, uint8_t)
TRAILING_PAD(i16, int16_t)
TRAILING_PAD(i32, int32_t)
TRAILING_PAD(i64, int64_t)

/* The cells of a row of n ids (`size` bytes each: uint8, or signed int16, int32, int64) before its
 * trailing `pad` ids (pad < 0 or outside the ids' range: none). A tokenizer's rows end in padding (most
 * of a row where sequences are short), which is never chosen and whose inputs are constants, so the
 * draws and the laying stop here. */
static inline Py_ssize_t before_padding(const char *ids, Py_ssize_t n, int size, int64_t pad) {
    switch (size) {
    case 1: return pad < 0 || pad > UINT8_MAX ? n : before_padding_u8((const uint8_t *)ids, n, (uint8_t)pad);
    case 2: return pad < 0 || pad > INT16_MAX ? n : before_padding_i16((const int16_t *)ids, n, (int16_t)pad);
    case 4: return pad < 0 || pad > INT32_MAX ? n : before_padding_i32((const int32_t *)ids, n, (int32_t)pad);
    default: return pad < 0 ? n : before_padding_i64((const int64_t *)ids, n, pad);
    }
}

#endif
