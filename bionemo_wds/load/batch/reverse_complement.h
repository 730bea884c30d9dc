/* reverse_complement(out, in, n, table): out[j] = table[in[n - 1 - j]] for 0 <= j < n, the bases of a
 * flipped piece written complemented and backwards through a 256-byte table (`core.tokenizer`'s
 * COMPLEMENT_TABLE). Shared by the C extensions that write flipped bases (byte_tables.c for window
 * rows, packed_kernel.c for packed documents).
 *
 * A table look-up a byte is about three instructions a base and stays scalar (1.5-2 GB/s here: half a
 * packed batch's bases are flipped, so it was the costliest part of placing them). On x86-64 with AVX2
 * it runs 32 bytes a step instead: the block reversed by a byte shuffle and a lane swap, then looked up
 * by its low nibble in the table's four rows 0x40-0x7F (every letter, of either case: bases, IUPAC
 * codes, soft-masked bases), one `vpshufb` a row, the row picked by the high nibble. A block holding
 * any byte outside those rows is done a byte at a time, so the result is the table's for every byte.
 * The CPU is asked at run time; other machines and compilers take the byte loop. */
#ifndef BIONEMO_WDS_REVERSE_COMPLEMENT_H
#define BIONEMO_WDS_REVERSE_COMPLEMENT_H

#include <Python.h>
#include <stdint.h>

static void reverse_complement_bytes(uint8_t *restrict out, const uint8_t *restrict in, Py_ssize_t n,
                                     const uint8_t *restrict table) {
    for (Py_ssize_t j = 0; j < n; j++)
        out[j] = table[in[n - 1 - j]];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

__attribute__((target("avx2"))) static void reverse_complement_avx2(uint8_t *restrict out,
                                                                     const uint8_t *restrict in, Py_ssize_t n,
                                                                     const uint8_t *restrict table) {
    __m256i rows[4], row_of[4];
    for (int k = 0; k < 4; k++) {
        rows[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 0x40 + 16 * k)));
        row_of[k] = _mm256_set1_epi8((char)(4 + k));
    }
    const __m256i backwards = _mm256_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12,
                                               11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    Py_ssize_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(in + n - j - 32));
        x = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(x, backwards), 0x4E); /* reversed: lanes swapped */
        __m256i low = _mm256_and_si256(x, nibble), high = _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble);
        __m256i result = _mm256_setzero_si256(), known = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            __m256i in_row = _mm256_cmpeq_epi8(high, row_of[k]);
            result = _mm256_or_si256(result, _mm256_and_si256(_mm256_shuffle_epi8(rows[k], low), in_row));
            known = _mm256_or_si256(known, in_row);
        }
        if (_mm256_movemask_epi8(known) == -1)
            _mm256_storeu_si256((__m256i *)(out + j), result);
        else /* a byte outside the letter rows: this block by the table, byte by byte */
            reverse_complement_bytes(out + j, in + n - j - 32, 32, table);
    }
    reverse_complement_bytes(out + j, in, n - j, table);
}

static void reverse_complement(uint8_t *restrict out, const uint8_t *restrict in, Py_ssize_t n,
                               const uint8_t *restrict table) {
    if (n >= 32 && __builtin_cpu_supports("avx2"))
        reverse_complement_avx2(out, in, n, table);
    else
        reverse_complement_bytes(out, in, n, table);
}
#else
#define reverse_complement reverse_complement_bytes
#endif

#endif
