/* VECTOR_CLONES: the attribute that gives a function an AVX2 copy beside the portable one on x86-64
 * Linux, picked at load time by the CPU it runs on (wider vectors for the loops the compiler
 * vectorises, 8 lanes of 32-bit multiplies instead of SSE2's emulated ones); elsewhere nothing. Shared
 * by the C extensions of `batch` (byte_tables.c, mlm_kernel.c, mlm_lay.c, packed_kernel.c). */
#ifndef BIONEMO_WDS_VECTOR_CLONES_H
#define BIONEMO_WDS_VECTOR_CLONES_H

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

#endif
