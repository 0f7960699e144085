/* `weft eval status RESULT`: a result as terminal tables: who was measured on what, every speed
 * case with its latencies and rates, each KPI as a fraction of its limit with its noise, every
 * gate with its reason, and whether the result counts. Exit 0 when it counts, 1 when a gate
 * failed, 2 when the file is not a result. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "eval/eval.h"
#include "util/error.h"
#include "util/file.h"

json_t *weft_eval_result_load(const char *path, weft_error *err) {
    json_t *r = NULL;
    if (weft_file_read_json(path, 256u << 20, 0, "eval", &r, err) != WEFT_OK) return NULL;
    const char *fmt = json_string_value(json_object_get(r, "format"));
    if (!json_is_object(r) || !fmt || strcmp(fmt, WEFT_EVAL_RESULT_FORMAT)) {
        json_decref(r);
        weft_error_set(err, WEFT_ERR_FORMAT, "eval",
                       "%s: expected \"format\": \"" WEFT_EVAL_RESULT_FORMAT
                       "\" (a `weft eval run` result)",
                       path);
        return NULL;
    }
    return r;
}

static double num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void cell(char *buf, size_t cap, double v, double scale, const char *fmt) {
    if (isfinite(v))
        snprintf(buf, cap, fmt, v * scale);
    else
        snprintf(buf, cap, "-");
}

static void print_result(const char *path, json_t *r) {
    json_t *c = json_object_get(r, "candidate"), *m = json_object_get(r, "model");
    json_t *p = json_object_get(r, "probe");
    printf("result     %s (%s profile, %s)\n", path, str(r, "profile"), str(r, "created"));
    printf("candidate  %s %s  backend %s  %s\n", str(c, "name"), str(c, "id"), str(c, "backend"),
           str(c, "url"));
    printf("model      %s  served as %s, max_model_len %.0f, vocab %.0f\n", str(m, "dir"),
           str(m, "served_name"), num(m, "max_model_len"), num(m, "vocab"));
    if (json_is_object(p))
        printf("probe      %s (%s, %s): copy %.4g B/s, GEMM bf16 %.4g f32 %.4g FLOP/s\n",
               str(p, "device"), str(p, "arch"), str(p, "date"), num(p, "copy_bytes_per_s"),
               num(p, "gemm_bf16_flops"), num(p, "gemm_f32_flops"));
    else
        printf("probe      none: no limits\n");
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(r, "notes"), i, e)
        printf("note       %s\n", json_string_value(e));

    json_t *cases = json_object_get(r, "cases");
    if (json_array_size(cases)) {
        printf("\n%-18s %4s %17s %17s %9s %10s %10s %10s %4s\n", "case", "reps", "ttft p50/p99 ms",
               "itl p50/p99 ms", "e2e p50 s", "tok/s/strm", "tok/s all", "prefill/s", "err");
        json_array_foreach(cases, i, e) {
            json_t *k = json_object_get(e, "kpis");
            json_t *t = json_object_get(k, "ttft_s"), *it = json_object_get(k, "itl_s");
            char a[24], b[24], d[24], f[24], g[24], h[24], q[24];
            cell(a, sizeof(a), num(t, "p50"), 1e3, "%.2f");
            cell(b, sizeof(b), num(t, "p99"), 1e3, "%.2f");
            cell(d, sizeof(d), num(it, "p50"), 1e3, "%.3f");
            cell(f, sizeof(f), num(it, "p99"), 1e3, "%.3f");
            char tt[40], ii[40];
            snprintf(tt, sizeof(tt), "%s/%s", a, b);
            snprintf(ii, sizeof(ii), "%s/%s", d, f);
            cell(g, sizeof(g), num(json_object_get(k, "e2e_s"), "p50"), 1, "%.3f");
            cell(h, sizeof(h), num(json_object_get(k, "decode_tps_stream"), "value"), 1, "%.1f");
            cell(q, sizeof(q), num(json_object_get(k, "decode_tps_total"), "value"), 1, "%.1f");
            char pf[24];
            cell(pf, sizeof(pf), num(json_object_get(k, "prefill_tps"), "value"), 1, "%.0f");
            printf("%-18s %4.0f %17s %17s %9s %10s %10s %10s %4.0f%s\n", str(e, "name"),
                   num(e, "repeats"), tt, ii, g, h, q, pf, num(e, "errors"),
                   json_is_true(json_object_get(e, "adapted")) ? "  (adapted)" : "");
        }
        static const char *const kp[] = {
            "ttft_s", "itl_s", "e2e_s", "decode_tps_stream", "decode_tps_total", "prefill_tps"};
        printf("\nfraction of limit (noise)\n%-18s", "case");
        for (int j = 0; j < 6; j++)
            printf(" %17s", kp[j]);
        printf("\n");
        json_array_foreach(cases, i, e) {
            printf("%-18s", str(e, "name"));
            for (int j = 0; j < 6; j++) {
                json_t *v = json_object_get(json_object_get(e, "kpis"), kp[j]);
                char s[40];
                if (isfinite(num(v, "fraction")))
                    snprintf(s, sizeof(s), "%.3f (%.1f%%)", num(v, "fraction"),
                             100 * num(v, "noise"));
                else
                    snprintf(s, sizeof(s), "- (%.1f%%)", 100 * num(v, "noise"));
                printf(" %17s", s);
            }
            printf("\n");
        }
    }
    printf("\n%-22s %-9s %s\n", "gate", "status", "reason");
    json_array_foreach(json_object_get(r, "gates"), i, e)
        printf("%-22s %-9s %s\n", str(e, "name"), str(e, "status"), str(e, "reason"));
    json_t *s = json_object_get(r, "summary");
    printf("\nheadline\n");
    const char *hk[] = {"decode", "prefill", "ttft"};
    for (int j = 0; j < 3; j++) {
        json_t *v = json_object_get(json_object_get(s, "kpis"), hk[j]);
        if (!v) continue;
        printf("  %-8s %.4g %s = %.3f of the limit %.4g (noise %.1f%%, case %s)\n", hk[j],
               num(v, "value"), str(v, "unit"), num(v, "fraction"), num(v, "limit"),
               100 * num(v, "noise"), str(v, "case"));
    }
    printf("%s\n", json_is_true(json_object_get(s, "counts"))
                       ? "every gate passed: the result counts"
                       : "a gate failed: the result does not count");
}

int weft_eval_status_main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: weft eval status RESULT.json...\n"
                   "  prints each result of `weft eval run` as tables; exit 0 when every one "
                   "counts\n");
        return argc < 2 ? 2 : 0;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        weft_error err;
        weft_error_clear(&err);
        json_t *r = weft_eval_result_load(argv[i], &err);
        if (!r) {
            fprintf(stderr, "weft eval status: %s\n", err.message);
            return 2;
        }
        if (i > 1) printf("\n");
        print_result(argv[i], r);
        if (!json_is_true(json_object_get(json_object_get(r, "summary"), "counts"))) rc = 1;
        json_decref(r);
    }
    return rc;
}
