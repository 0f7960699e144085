/* `weft eval limits`: the floors a model cannot beat on a machine, from its config.json and a
 * probe. Decode at batch B reads every weight once per step plus each request's KV cache, so
 * its floor is bytes over the measured copy bandwidth; prefill does 2 FLOPs per active weight
 * per token plus causal attention, over the measured GEMM rate (and can't beat one read of the
 * weights either); time to first token is the prefill floor of the prompt. The arithmetic is
 * printed so a reader can check it. Also the probe file reader/writer shared by eval. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "eval/eval.h"
#include "files/config.h"
#include "files/safetensors.h"
#include "util/cache.h"
#include "util/error.h"

void weft_probe_default_path(const char *backend, char *buf, size_t cap) {
    char name[64];
    snprintf(name, sizeof(name), "probe-%s.json", backend);
    if (weft_cache_path(name, buf, cap, NULL) != WEFT_OK) snprintf(buf, cap, "/tmp/weft-%s", name);
}

weft_status weft_probe_save(const char *path, const weft_probe_file *p, weft_error *err) {
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:[I,I,I], s:I, s:s}",
                          "device", p->device, "arch", p->arch, "backend", p->backend, "date",
                          p->date, "copy_bytes_per_s", p->r.copy_bytes_per_s, "gemm_bf16_flops",
                          p->r.gemm_bf16_flops, "gemm_fp8_flops", p->r.gemm_fp8_flops,
                          "gemm_f32_flops", p->r.gemm_f32_flops, "host_roundtrip_s",
                          p->r.host_roundtrip_s, "launch_s", p->r.launch_s, "gemm_shape",
                          (json_int_t)p->r.gemm_shape[0], (json_int_t)p->r.gemm_shape[1],
                          (json_int_t)p->r.gemm_shape[2], "copy_bytes",
                          (json_int_t)p->r.copy_bytes, "notes", p->r.notes);
    if (!o) return weft_error_set(err, WEFT_ERR_NOMEM, path, "cannot build the probe JSON");
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    if (rc) return weft_error_set(err, WEFT_ERR_IO, path, "cannot write the probe file");
    return WEFT_OK;
}

static double num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

weft_status weft_probe_load(const char *path, weft_probe_file *out, weft_error *err) {
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o)
        return weft_error_set(err, WEFT_ERR_IO, path, "cannot read the probe (line %d: %s); run "
                              "`weft eval probe` first", je.line, je.text);
    if (!json_is_object(o)) {
        json_decref(o);
        return weft_error_set(err, WEFT_ERR_FORMAT, path, "expected a JSON object");
    }
    memset(out, 0, sizeof(*out));
    const char *s;
    if ((s = json_string_value(json_object_get(o, "device"))))
        snprintf(out->device, sizeof(out->device), "%s", s);
    if ((s = json_string_value(json_object_get(o, "arch"))))
        snprintf(out->arch, sizeof(out->arch), "%s", s);
    if ((s = json_string_value(json_object_get(o, "backend"))))
        snprintf(out->backend, sizeof(out->backend), "%s", s);
    if ((s = json_string_value(json_object_get(o, "date"))))
        snprintf(out->date, sizeof(out->date), "%s", s);
    out->r.size = sizeof(out->r);
    out->r.copy_bytes_per_s = num(o, "copy_bytes_per_s");
    out->r.gemm_bf16_flops = num(o, "gemm_bf16_flops");
    out->r.gemm_fp8_flops = num(o, "gemm_fp8_flops");
    out->r.gemm_f32_flops = num(o, "gemm_f32_flops");
    out->r.host_roundtrip_s = num(o, "host_roundtrip_s");
    out->r.launch_s = num(o, "launch_s");
    json_decref(o);
    if (out->r.copy_bytes_per_s <= 0)
        return weft_error_set(err, WEFT_ERR_FORMAT, path,
                              "field copy_bytes_per_s: expected a positive number");
    return WEFT_OK;
}

void weft_limits_compute(const weft_model_config *c, double weight_bytes_on_disk,
                         uint32_t dtype_bytes, uint32_t kv_bytes, double bandwidth,
                         double gemm_rate, uint32_t context, uint32_t prompt, uint32_t batch,
                         weft_limits *l) {
    memset(l, 0, sizeof(*l));
    double D = c->hidden_size, V = c->vocab_size, L = c->n_layers;
    double hd = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads;
    double attn = D * Hq * hd * 2 + D * Hkv * hd * 2; /* q, o and k, v */
    if (c->attention_bias) attn += Hq * hd + 2 * Hkv * hd;
    if (c->qk_norm) attn += 2 * hd;
    double mlp_dense = 3 * D * c->intermediate_size;
    double mlp_total = mlp_dense, mlp_active = mlp_dense;
    if (c->n_experts) {
        double expert = 3 * D * c->moe_intermediate_size;
        mlp_total = c->n_experts * expert + c->n_experts * D;
        mlp_active = c->n_experts_per_token * expert + c->n_experts * D;
    }
    double layer_total = attn + mlp_total + 2 * D, layer_active = attn + mlp_active + 2 * D;
    double embed = V * D, head = c->tie_embeddings ? 0 : V * D;
    l->params_total = embed + head + L * layer_total + D;
    /* a decode step reads one embedding row, every layer's (active) weights, the final norm
     * and the LM head (the embedding table itself when tied) */
    l->params_active = L * layer_active + D + V * D;
    l->weight_elem_bytes = dtype_bytes;
    l->kv_elem_bytes = kv_bytes;
    l->weight_bytes_total = weight_bytes_on_disk > 0 ? weight_bytes_on_disk
                                                     : l->params_total * dtype_bytes;
    l->weight_bytes_decode = l->params_active * dtype_bytes + D * dtype_bytes;
    l->kv_bytes_per_token = 2 * L * Hkv * hd * kv_bytes;
    l->flops_per_token = 2 * (L * layer_active) + 2 * V * D;
    l->bandwidth = bandwidth;
    l->gemm_rate = gemm_rate;
    l->context = context;
    l->prompt = prompt;
    l->batch = batch ? batch : 1;
    /* decode: weights once per step, each request's KV up to `context` */
    double step_bytes = l->weight_bytes_decode + l->batch * context * l->kv_bytes_per_token;
    double step_flops = l->batch * (l->flops_per_token + 4 * L * Hq * hd * context);
    double t_mem = step_bytes / bandwidth, t_cmp = gemm_rate > 0 ? step_flops / gemm_rate : 0;
    l->decode_s = t_mem > t_cmp ? t_mem : t_cmp;
    l->decode_tokens_per_s = l->batch / l->decode_s;
    /* prefill of `prompt` tokens: linear FLOPs, causal attention (QK^T and PV over P(P+1)/2
     * pairs), one LM head row; bounded below by one read of the weights and the KV write */
    double P = prompt;
    double pf = 2 * L * layer_active * P + 4 * L * Hq * hd * P * (P + 1) / 2 + 2 * V * D;
    double pb = l->weight_bytes_decode + P * l->kv_bytes_per_token;
    double p_cmp = gemm_rate > 0 ? pf / gemm_rate : 0, p_mem = pb / bandwidth;
    l->prefill_s = p_cmp > p_mem ? p_cmp : p_mem;
    l->prefill_tokens_per_s = P / l->prefill_s;
    l->ttft_s = l->prefill_s;
}

void weft_limits_print(FILE *f, const weft_model_config *c, const weft_limits *l) {
    double D = c->hidden_size, V = c->vocab_size, L = c->n_layers;
    fprintf(f, "model: %s (%s), %u layers, hidden %u, heads %u/%u x %u, ffn %u, vocab %u%s\n",
            c->architecture, c->model_type, c->n_layers, c->hidden_size, c->n_heads,
            c->n_kv_heads, c->head_dim, c->intermediate_size, c->vocab_size,
            c->tie_embeddings ? ", tied head" : "");
    if (c->n_experts)
        fprintf(f, "experts: %u, %u per token, expert ffn %u\n", c->n_experts,
                c->n_experts_per_token, c->moe_intermediate_size);
    fprintf(f, "parameters: %.4g total; %.4g read per decode step (layers %.4g + final norm %.0f "
               "+ head %.4g)\n",
            l->params_total, l->params_active, l->params_active - D - V * D, D, V * D);
    fprintf(f, "weights: %.4g bytes total; per decode step %.4g bytes (%u bytes/element, plus "
               "one embedding row)\n",
            l->weight_bytes_total, l->weight_bytes_decode, l->weight_elem_bytes);
    fprintf(f, "kv cache: 2 x %.0f layers x %u kv heads x %u dims x %u bytes = %.0f bytes/token\n",
            L, c->n_kv_heads, c->head_dim, l->kv_elem_bytes, l->kv_bytes_per_token);
    fprintf(f, "machine: copy bandwidth %.4g B/s, GEMM rate %.4g FLOP/s\n", l->bandwidth,
            l->gemm_rate);
    double kv = l->batch * l->context * l->kv_bytes_per_token;
    fprintf(f, "decode floor (batch %u, context %u): (%.4g weight + %.4g kv) bytes / %.4g B/s = "
               "%.4f ms/step = %.1f tokens/s\n",
            l->batch, l->context, l->weight_bytes_decode, kv, l->bandwidth, l->decode_s * 1e3,
            l->decode_tokens_per_s);
    double P = l->prompt;
    double pf = 2 * (l->params_active - D - V * D) * P +
                4 * L * c->n_heads * c->head_dim * P * (P + 1) / 2 + 2 * V * D;
    fprintf(f, "prefill floor (%u tokens): max(%.4g FLOP / %.4g FLOP/s, %.4g bytes / %.4g B/s) = "
               "%.4f ms = %.0f tokens/s\n",
            l->prompt, pf, l->gemm_rate,
            l->weight_bytes_decode + P * l->kv_bytes_per_token, l->bandwidth, l->prefill_s * 1e3,
            l->prefill_tokens_per_s);
    fprintf(f, "time to first token floor (%u-token prompt): %.4f ms\n", l->prompt,
            l->ttft_s * 1e3);
}

static void usage(FILE *f) {
    fprintf(f, "usage: weft eval limits --model DIR [--probe FILE] [--backend cpu|cuda]\n"
               "       [--context N] [--prompt N] [--batch N] [--dtype-bytes N] [--kv-bytes N]"
               " [--json]\n"
               "  --model DIR      a Hugging Face model directory (config.json; safetensors sizes"
               " when present)\n"
               "  --probe FILE     from `weft eval probe` (default: the cached probe of the"
               " backend)\n"
               "  --backend B      which cached probe to read (default cuda)\n"
               "  --context N      tokens in the cache for the decode floor (default 128)\n"
               "  --prompt N       prompt tokens for the prefill and TTFT floors (default 1024)\n"
               "  --batch N        requests decoded together (default 1)\n"
               "  --dtype-bytes N  weight element size (default: from the checkpoint dtype)\n"
               "  --kv-bytes N     kv cache element size (default: as weights)\n");
}

int weft_eval_limits_main(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},   {"probe", required_argument, 0, 'p'},
        {"backend", required_argument, 0, 'b'}, {"context", required_argument, 0, 'c'},
        {"prompt", required_argument, 0, 'P'},  {"batch", required_argument, 0, 'B'},
        {"dtype-bytes", required_argument, 0, 'd'}, {"kv-bytes", required_argument, 0, 'k'},
        {"json", no_argument, 0, 'j'},          {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *model = NULL, *probe = NULL, *backend = "cuda";
    uint32_t context = 128, prompt = 1024, batch = 1, dbytes = 0, kbytes = 0;
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:b:c:P:B:d:k:jh", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': probe = optarg; break;
        case 'b': backend = optarg; break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        case 'c':
            bad =
                weft_cli_parse_u32_range("eval limits", "--context", optarg, 0, 1u << 30, &context);
            break;
        case 'P':
            bad = weft_cli_parse_u32_range("eval limits", "--prompt", optarg, 1, 1u << 30, &prompt);
            break;
        case 'B':
            bad = weft_cli_parse_u32_range("eval limits", "--batch", optarg, 1, 1u << 20, &batch);
            break;
        case 'd':
            bad = weft_cli_parse_u32_range("eval limits", "--dtype-bytes", optarg, 1, 8, &dbytes);
            break;
        case 'k':
            bad = weft_cli_parse_u32_range("eval limits", "--kv-bytes", optarg, 1, 8, &kbytes);
            break;
        default: usage(stderr); return 2;
        }
        if (bad) return 2;
    }
    if (!model) {
        fprintf(stderr, "weft eval limits: --model DIR is required\n");
        usage(stderr);
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_model_config cfg;
    if (weft_config_load(model, &cfg, NULL, &err)) return weft_cli_fail("eval limits", &err);
    char path[1024];
    if (!probe) {
        weft_probe_default_path(backend, path, sizeof(path));
        probe = path;
    }
    weft_probe_file pf;
    if (weft_probe_load(probe, &pf, &err)) return weft_cli_fail("eval limits", &err);
    double disk = 0;
    weft_safetensors *st = NULL;
    uint32_t ckpt_dtype = cfg.dtype;
    if (weft_safetensors_open_dir(model, &st, &err) == WEFT_OK) {
        for (size_t i = 0; i < weft_safetensors_count(st); i++) {
            const weft_st_tensor *t = weft_safetensors_at(st, i);
            disk += (double)t->bytes;
            if (i == 0) ckpt_dtype = t->dtype;
        }
        weft_safetensors_close(st);
    }
    if (!dbytes) {
        size_t es = weft_dtype_size(ckpt_dtype);
        dbytes = es ? (uint32_t)es : 2;
    }
    if (!kbytes) kbytes = dbytes;
    double rate = pf.r.gemm_bf16_flops > 0 ? pf.r.gemm_bf16_flops : pf.r.gemm_f32_flops;
    if (dbytes == 4 && pf.r.gemm_f32_flops > 0) rate = pf.r.gemm_f32_flops;
    weft_limits l;
    weft_limits_compute(&cfg, disk, dbytes, kbytes, pf.r.copy_bytes_per_s, rate, context, prompt,
                        batch, &l);
    if (json) {
        json_t *o = json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f,"
                              " s:f, s:i, s:i, s:i}",
                              "model", model, "probe", probe, "params_total", l.params_total,
                              "weight_bytes_decode", l.weight_bytes_decode, "kv_bytes_per_token",
                              l.kv_bytes_per_token, "bandwidth", l.bandwidth, "gemm_rate",
                              l.gemm_rate, "decode_s", l.decode_s, "decode_tokens_per_s",
                              l.decode_tokens_per_s, "prefill_s", l.prefill_s,
                              "prefill_tokens_per_s", l.prefill_tokens_per_s, "ttft_s", l.ttft_s,
                              "flops_per_token", l.flops_per_token, "weight_bytes_total",
                              l.weight_bytes_total, "context", (int)context, "prompt",
                              (int)prompt, "batch", (int)batch);
        char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
        if (s) puts(s);
        free(s);
        json_decref(o);
        return s ? 0 : 1;
    }
    printf("probe: %s (%s, %s, %s)\n", probe, pf.device, pf.arch, pf.date);
    weft_limits_print(stdout, &cfg, &l);
    return 0;
}
