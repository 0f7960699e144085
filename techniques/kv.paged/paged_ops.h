/* Internal interface of the kv.paged bundle between its plugin file and its attention op
 * implementations for the "paged" layout (cpu in paged_cpu.c, cuda in paged_cuda.c when the
 * bundle is built with CUDA). */
#ifndef KV_PAGED_OPS_H
#define KV_PAGED_OPS_H

#include "kv_paged.h"

#define KV_PAGED_NAME "kv.paged"

/* cpu: ATTENTION on f32 activations over a paged f32, bf16 or f16 cache; the block tables come
 * from the step's host batch (weft_seq.block_table). threads may be NULL (runs inline). */
weft_status kv_paged_register_cpu(const weft_threads_service *threads, const weft_ops_service *ops,
                                  weft_error *err);

/* cuda: ATTENTION over a paged cache in the activation dtype, block tables read on the device
 * (weft_kv_paged.tables) with the row -> slot map from in.kv_slots. tc_prefill: prefill chunks
 * of f16/bf16 models attend on tensor cores (option prefill_tensor_cores). */
weft_status kv_paged_register_cuda(const weft_host_services *host, const weft_ops_service *ops,
                                   int tc_prefill, void **cuda_state, weft_error *err);
void kv_paged_cuda_free(void *cuda_state);

#endif
