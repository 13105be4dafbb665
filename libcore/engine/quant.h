/* quant.h - the byte layouts of the block-quantized dtypes (tensor.h: COL_Q8_0 .. COL_Q6_K), which
 * are ggml's (a GGUF file's tensor data is a row-major array of these blocks, each row a whole
 * number of blocks), and the few scalar helpers every kernel decodes them with. Included by the
 * engine (quant.c) and the backends' kernels (C and, for CUDA, C++). Scales are IEEE half bit
 * patterns (col_f16_to_f32). */
#ifndef COL_QUANT_H
#define COL_QUANT_H

#include <stdint.h>

#define COL_QK 32     /* values per q8_0 / q4_0 block */
#define COL_QK_K 256  /* values per q4_K / q6_K super-block */

/* x[j] = d * qs[j] */
typedef struct {
    uint16_t d;
    int8_t qs[COL_QK];
} col_block_q8_0;

/* x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8), j < 16 */
typedef struct {
    uint16_t d;
    uint8_t qs[COL_QK / 2];
} col_block_q4_0;

/* 8 sub-blocks of 32 values; sub-block s has a 6-bit scale sc and min m (col_q4k_scale_min) and
 * x = d sc q - dmin m, q 4 bits: for chunk c < 4 (64 values), value l < 32 of sub-block 2c is the low
 * nibble of qs[32 c + l], of sub-block 2c + 1 the high nibble */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[COL_QK_K / 2];
} col_block_q4_K;

/* 16 sub-blocks of 16 values with int8 scales; x = d scales[p / 16] (q - 32), q 6 bits: for half h < 2
 * and j < 128 (p = 128 h + j), the low 4 bits are nibble j / 64 of ql[64 h + j % 64], the high 2 bits
 * are bits 2 (j / 32) .. of qh[32 h + j % 32] */
typedef struct {
    uint8_t ql[COL_QK_K / 2];
    uint8_t qh[COL_QK_K / 4];
    int8_t scales[COL_QK_K / 16];
    uint16_t d;
} col_block_q6_K;

#ifdef __cplusplus
static_assert(sizeof(col_block_q8_0) == 34 && sizeof(col_block_q4_0) == 18, "ggml's block sizes");
static_assert(sizeof(col_block_q4_K) == 144 && sizeof(col_block_q6_K) == 210, "ggml's block sizes");
#else
_Static_assert(sizeof(col_block_q8_0) == 34 && sizeof(col_block_q4_0) == 18, "ggml's block sizes");
_Static_assert(sizeof(col_block_q4_K) == 144 && sizeof(col_block_q6_K) == 210, "ggml's block sizes");
#endif

/* the 6-bit scale and min of sub-block j < 8 of a q4_K block */
static inline void col_q4k_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

#endif
