/* The host side of the tensor-core prefill attention (plugins/sdk/kernels/attention_tc.cuh), which
 * two plugins launch over their caches: the cuda backend's weft_attention_tc (contiguous cache)
 * and kv.paged's kvp_attention_tc (pages). Which steps take it, its tile rows, its shared
 * memory and its splits, decided once for both. Plain C: the .cuh is device code, so its
 * constants are repeated here (WEFT_ATC_CHUNK = ATC_CHUNK, weft_atc_smem = ATC_SMEM,
 * WEFT_ATC_MAXHD = ATC_MAXHD). */
#ifndef WEFT_SDK_ATTENTION_TC_H
#define WEFT_SDK_ATTENTION_TC_H

#include <stdint.h>

#include "weft/plugin.h"

#define WEFT_ATC_CHUNK 32    /* positions of a chunk (attention_tc.cuh ATC_CHUNK) */
#define WEFT_ATC_MAXHD 128   /* the largest head_dim (ATC_MAXHD) */
#define WEFT_ATC_THREADS 128 /* threads a block (four warps) */
#define WEFT_ATC_MIN_ROWS 16 /* the fewest rows of a step that uses it */

/* Rows of a tile (R = 64 / G for 1, 2 or 4 query heads a kv head) where the kernel takes the
 * shapes (head_dim a multiple of 16 up to WEFT_ATC_MAXHD); 0 where it does not. */
static inline int weft_atc_tile_rows(int Hq, int Hkv, int hd) {
    if (Hkv <= 0 || Hq % Hkv || hd % 16 || hd <= 0 || hd > WEFT_ATC_MAXHD) return 0;
    int G = Hq / Hkv;
    return G == 1 || G == 2 || G == 4 ? 64 / G : 0;
}

/* Whether a step of T rows is one the kernel is for: prefill rows (more rows than requests), at
 * least WEFT_ATC_MIN_ROWS of them. Decode-shaped steps, the ones CUDA graphs capture, never
 * are. */
static inline int weft_atc_step(const weft_batch *bt, int T) {
    return bt && T >= WEFT_ATC_MIN_ROWS && bt->n_seqs < (uint32_t)T;
}

/* Dynamic shared memory of a block in bytes: K (chunk, hd + 8) and V transposed (hd, chunk +
 * 8), 16-bit (ATC_SMEM). */
static inline unsigned weft_atc_smem(int hd) {
    return (unsigned)((WEFT_ATC_CHUNK * (hd + 8) + hd * (WEFT_ATC_CHUNK + 8)) * 2);
}

/* Splits of the step's T / R + requests tiles of each kv head (bt: a step weft_atc_step took):
 * about four blocks an SM, at most the cache's chunks (max_seq positions) and max_splits (0: no
 * such cap), and as many as part_bytes holds partials for (per_split bytes each; S > 1 merges
 * in the combine kernels). */
static inline int weft_atc_splits(const weft_batch *bt, int T, int R, int Hkv, int sms,
                                  int max_seq, int max_splits, uint64_t per_split,
                                  uint64_t part_bytes) {
    long blocks = ((long)T / R + (long)bt->n_seqs) * Hkv;
    long want = 4L * (sms > 0 ? sms : 132);
    int S = blocks >= want ? 1 : (int)((want + blocks - 1) / blocks);
    int chunks = (max_seq + WEFT_ATC_CHUNK - 1) / WEFT_ATC_CHUNK;
    if (S > chunks) S = chunks;
    if (max_splits > 0 && S > max_splits) S = max_splits;
    if (S > 1 && (uint64_t)S * per_split > part_bytes) S = (int)(part_bytes / per_split);
    return S < 1 ? 1 : S;
}

#endif /* WEFT_SDK_ATTENTION_TC_H */
