/* Bytes through a 256-byte table into another buffer, forwards (`table_forward`: out[j] = table[in[j]],
 * base codes and token ids) or backwards (`table_backward`: out[j] = table[in[n - 1 - j]], a flipped
 * piece's reverse complement through `core.tokenizer`'s COMPLEMENT_TABLE). Shared by the C extensions
 * that write bases through a table (byte_tables.c for rows and tokenizers, load/batch/packed_kernel.c
 * for packed documents).
 *
 * A table look-up a byte is about three instructions a base and stays scalar (1.5-2 GB/s here);
 * Python's `bytes.translate` is about nine. On x86-64 with AVX2 this runs 32 bytes a step instead:
 * (backwards: the block reversed by a byte shuffle and a lane swap, then) looked up by its low nibble
 * in the table's four rows 0x40-0x7F (every letter, of either case: bases, IUPAC codes, soft-masked
 * bases), one `vpshufb` a row, the row picked by the high nibble. A block holding any byte outside
 * those rows is done a byte at a time, so the result is the table's for every byte. The CPU is asked
 * at run time; other machines and compilers take the byte loops. */
#ifndef BIONEMO_WDS_BYTE_TABLE_H
#define BIONEMO_WDS_BYTE_TABLE_H

#include <Python.h>
#include <stdint.h>

static inline void bytes_backward(uint8_t *restrict out, const uint8_t *restrict in, Py_ssize_t n,
                                  const uint8_t *restrict table) {
    for (Py_ssize_t j = 0; j < n; j++)
        out[j] = table[in[n - 1 - j]];
}

static inline void bytes_forward(uint8_t *restrict out, const uint8_t *restrict in, Py_ssize_t n,
                                 const uint8_t *restrict table) {
    for (Py_ssize_t j = 0; j < n; j++)
        out[j] = table[in[j]];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* The letter rows' look-up of a block x: *result, and whether every byte of x lies in those rows. */
__attribute__((target("avx2"))) static inline int letters_avx2(__m256i x, const __m256i rows[4],
                                                               const __m256i row_of[4], __m256i *result) {
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    __m256i low = _mm256_and_si256(x, nibble), high = _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble);
    __m256i found = _mm256_setzero_si256(), known = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        __m256i in_row = _mm256_cmpeq_epi8(high, row_of[k]);
        found = _mm256_or_si256(found, _mm256_and_si256(_mm256_shuffle_epi8(rows[k], low), in_row));
        known = _mm256_or_si256(known, in_row);
    }
    *result = found;
    return _mm256_movemask_epi8(known) == -1;
}

__attribute__((target("avx2"))) static void table_avx2(uint8_t *restrict out, const uint8_t *restrict in,
                                                        Py_ssize_t n, const uint8_t *restrict table, int backward) {
    __m256i rows[4], row_of[4];
    for (int k = 0; k < 4; k++) {
        rows[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 0x40 + 16 * k)));
        row_of[k] = _mm256_set1_epi8((char)(4 + k));
    }
    const __m256i reverse = _mm256_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12,
                                             11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    Py_ssize_t j = 0;
    for (; j + 32 <= n; j += 32) {
        const uint8_t *block = backward ? in + n - j - 32 : in + j;
        __m256i x = _mm256_loadu_si256((const __m256i *)block), result;
        if (backward) /* reversed: bytes within each lane, then the lanes swapped */
            x = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(x, reverse), 0x4E);
        if (letters_avx2(x, rows, row_of, &result))
            _mm256_storeu_si256((__m256i *)(out + j), result);
        else if (backward) /* a byte outside the letter rows: this block by the table, byte by byte */
            bytes_backward(out + j, block, 32, table);
        else
            bytes_forward(out + j, block, 32, table);
    }
    if (backward)
        bytes_backward(out + j, in, n - j, table);
    else
        bytes_forward(out + j, in + j, n - j, table);
}

static inline void table_backward(uint8_t *restrict out, const uint8_t *restrict in, Py_ssize_t n,
                                  const uint8_t *restrict table) {
    if (n >= 32 && __builtin_cpu_supports("avx2"))
        table_avx2(out, in, n, table, 1);
    else
        bytes_backward(out, in, n, table);
}

static inline void table_forward(uint8_t *restrict out, const uint8_t *restrict in, Py_ssize_t n,
                                 const uint8_t *restrict table) {
    if (n >= 32 && __builtin_cpu_supports("avx2"))
        table_avx2(out, in, n, table, 0);
    else
        bytes_forward(out, in, n, table);
}
#else
#define table_backward bytes_backward
#define table_forward bytes_forward
#endif

#endif
