/* `weft eval report RESULT... -o report.html`: one self-contained page (inline CSS and SVG, no
 * scripts, fonts or images from anywhere) that reads offline. Per result: who and what was
 * measured, the gates, the cases, a bar chart of every KPI as a fraction of its limit with its
 * run-to-run noise as an error bar, and the latency distributions (empirical CDFs of time to
 * first token and inter-token latency per case). With two or more results: the headline KPIs of
 * each candidate side by side, and a table of every shared case relative to the first result. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "eval/eval.h"
#include "eval/gates.h"
#include "util/error.h"

static const char *const palette[] = {"#4269d0", "#efb118", "#ff725c", "#6cc5b0",
                                      "#3ca951", "#ff8ab7", "#a463f2", "#97bbf5"};
#define NPAL 8

static void esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&#39;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

static double num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* ---- charts -------------------------------------------------------------------------------- */
/* Grouped bars: ncat groups of nser bars, values in [0, ymax], error bars of +-err (absolute). A
 * dashed line marks 1.0 (the limit). */
static void svg_bars(FILE *f, const char *title, const char *const *cats, size_t ncat,
                     const char *const *series, size_t nser, const double *val, const double *err) {
    const double W = 760, H = 300, L = 50, R = 10, T = 30, B = 60;
    double ymax = 1.0;
    for (size_t i = 0; i < ncat * nser; i++)
        if (isfinite(val[i]) && val[i] + (isfinite(err[i]) ? err[i] : 0) > ymax)
            ymax = val[i] + err[i];
    ymax = ceil(ymax * 5 - 1e-9) / 5; /* a multiple of 0.2, so the ticks below are round */
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
            "viewBox='0 0 %.0f %.0f' role='img'><title>",
            W, H + 12 + 20 * ((nser + 3) / 4), W, H + 12 + 20 * ((nser + 3) / 4));
    esc(f, title);
    fprintf(f, "</title><text x='%.0f' y='18' font-size='13' font-weight='600'>", L);
    esc(f, title);
    fprintf(f, "</text>");
    double ph = H - T - B, pw = W - L - R;
    int nticks = (int)lround(ymax / 0.2);
    for (int g = 0; g <= nticks; g++) {
        double v = 0.2 * g, y = T + ph * (1 - v / ymax);
        fprintf(f,
                "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='#e3e3e3'/>"
                "<text x='%.1f' y='%.1f' font-size='11' fill='#444' text-anchor='end'>%.1f</text>",
                L, L + pw, y, y, L - 4, y + 4, v);
    }
    double y1 = T + ph * (1 - 1.0 / ymax);
    fprintf(
        f,
        "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='#b00020' stroke-dasharray='4 3'/>"
        "<text x='%.1f' y='%.1f' font-size='11' fill='#444' text-anchor='end'>limit</text>",
        L, L + pw, y1, y1, L + pw, y1 - 3);
    double gw = pw / (double)(ncat ? ncat : 1), bw = gw * 0.8 / (double)(nser ? nser : 1);
    for (size_t c = 0; c < ncat; c++) {
        for (size_t s = 0; s < nser; s++) {
            double v = val[c * nser + s], e = err[c * nser + s];
            double x = L + gw * (double)c + gw * 0.1 + bw * (double)s;
            if (!isfinite(v)) {
                fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' fill='#444'>n/a</text>", x,
                        T + ph - 2);
                continue;
            }
            double h = ph * v / ymax;
            fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'><title>", x,
                    T + ph - h, bw * 0.95, h, palette[s % NPAL]);
            esc(f, series[s]);
            fprintf(f, " %s: %.3f (noise +-%.3f)</title></rect>", cats[c], v, isfinite(e) ? e : 0);
            if (isfinite(e) && e > 0) {
                double xm = x + bw * 0.475, ya = T + ph * (1 - (v + e) / ymax);
                double yb = T + ph * (1 - fmax(v - e, 0) / ymax);
                fprintf(f, "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='#222'/>", xm, xm,
                        ya, yb);
            }
        }
        fprintf(f,
                "<text x='%.1f' y='%.1f' font-size='11' fill='#444' text-anchor='end' "
                "transform='rotate(-20 %.1f %.1f)'>",
                L + gw * ((double)c + 0.5), T + ph + 14, L + gw * ((double)c + 0.5), T + ph + 14);
        esc(f, cats[c]);
        fprintf(f, "</text>");
    }
    for (size_t s = 0; s < nser; s++) {
        double x = L + 180 * (double)(s % 4), y = H + 8 + 20 * (double)(s / 4);
        fprintf(f,
                "<rect x='%.0f' y='%.0f' width='10' height='10' fill='%s'/>"
                "<text x='%.0f' y='%.0f' font-size='11' fill='#444'>",
                x, y - 10, palette[s % NPAL], x + 14, y);
        esc(f, series[s]);
        fprintf(f, "</text>");
    }
    fprintf(f, "</svg>\n");
}

/* Empirical CDFs of samples (seconds, drawn in ms), one line per series; the x axis ends at the
 * largest p99 so one outlier cannot flatten the rest (the title says so). */
static void svg_ecdf(FILE *f, const char *title, const char *const *series, size_t nser,
                     double *const *samples, const size_t *ns) {
    const double W = 760, H = 300, L = 60, R = 40, T = 30, B = 40;
    double xmax = 0;
    for (size_t s = 0; s < nser; s++) {
        if (!ns[s]) continue;
        double *c = malloc(ns[s] * sizeof(double));
        if (!c) continue;
        memcpy(c, samples[s], ns[s] * sizeof(double));
        double p = weft_eval_quantile(c, ns[s], 0.99);
        free(c);
        if (p > xmax) xmax = p;
    }
    if (!(xmax > 0)) xmax = 1e-3;
    xmax *= 1.05;
    double ph = H - T - B, pw = W - L - R;
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
            "viewBox='0 0 %.0f %.0f' role='img'><title>",
            W, H + 12 + 20 * ((nser + 3) / 4), W, H + 12 + 20 * ((nser + 3) / 4));
    esc(f, title);
    fprintf(f, "</title><text x='%.0f' y='18' font-size='13' font-weight='600'>", L);
    esc(f, title);
    fprintf(f, " (x axis to the largest p99)</text>");
    for (int g = 0; g <= 4; g++) {
        double y = T + ph * (1 - g / 4.0), x = L + pw * g / 4.0;
        fprintf(f,
                "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='#e3e3e3'/>"
                "<text x='%.1f' y='%.1f' font-size='11' fill='#444' text-anchor='end'>%.2f</text>"
                "<text x='%.1f' y='%.1f' font-size='11' fill='#444' text-anchor='middle'>%.3g "
                "ms</text>",
                L, L + pw, y, y, L - 4, y + 4, g / 4.0, x, T + ph + 16, xmax * 1e3 * g / 4.0);
    }
    for (size_t s = 0; s < nser; s++) {
        if (!ns[s]) continue;
        double *c = malloc(ns[s] * sizeof(double));
        if (!c) continue;
        memcpy(c, samples[s], ns[s] * sizeof(double));
        weft_eval_quantile(c, ns[s], 0.5); /* sorts */
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='",
                palette[s % NPAL]);
        for (size_t i = 0; i < ns[s]; i++) {
            double x = L + pw * fmin(c[i] / xmax, 1.0);
            double y0 = T + ph * (1 - (double)i / (double)ns[s]);
            double y1 = T + ph * (1 - (double)(i + 1) / (double)ns[s]);
            fprintf(f, "%.1f,%.1f %.1f,%.1f ", x, y0, x, y1);
        }
        fprintf(f, "'><title>");
        esc(f, series[s]);
        fprintf(f, "</title></polyline>");
        free(c);
        double x = L + 180 * (double)(s % 4), y = H + 8 + 20 * (double)(s / 4);
        fprintf(f,
                "<rect x='%.0f' y='%.0f' width='10' height='10' fill='%s'/>"
                "<text x='%.0f' y='%.0f' font-size='11' fill='#444'>",
                x, y - 10, palette[s % NPAL], x + 14, y);
        esc(f, series[s]);
        fprintf(f, "</text>");
    }
    fprintf(f, "</svg>\n");
}

/* ---- sections ------------------------------------------------------------------------------ */
static const char *const kpis[] = {"ttft_s",           "itl_s",      "e2e_s", "decode_tps_stream",
                                   "decode_tps_total", "prefill_tps"};
#define NKPI 6
static const char *const kpi_labels[] = {"TTFT",          "ITL",        "E2E",
                                         "decode/stream", "decode/all", "prefill"};

static void section(FILE *f, const char *path, json_t *r, size_t idx) {
    json_t *c = json_object_get(r, "candidate"), *m = json_object_get(r, "model");
    json_t *s = json_object_get(r, "summary");
    int counts = json_is_true(json_object_get(s, "counts"));
    fprintf(f, "<section><h2>%zu. ", idx + 1);
    esc(f, str(c, "name"));
    fprintf(f, " <span class='%s'>%s</span></h2>\n<table class='kv'>", counts ? "ok" : "bad",
            counts ? "counts" : "does not count");
    struct {
        const char *k, *v;
    } rows[] = {{"file", path},
                {"candidate id", str(c, "id")},
                {"backend", str(c, "backend")},
                {"server", str(c, "url")},
                {"model", str(m, "dir")},
                {"profile", str(r, "profile")},
                {"created", str(r, "created")},
                {"probe", str(json_object_get(r, "probe"), "device")}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        fprintf(f, "<tr><th>%s</th><td>", rows[i].k);
        esc(f, rows[i].v);
        fprintf(f, "</td></tr>");
    }
    json_t *vs = json_object_get(r, "versions");
    fprintf(f, "<tr><th>versions</th><td>weft ");
    esc(f, str(vs, "weft"));
    fprintf(f, ", ABI ");
    esc(f, str(vs, "abi"));
    fprintf(f, ", libcurl ");
    esc(f, str(vs, "libcurl"));
    fprintf(f, ", ");
    esc(f, str(vs, "host"));
    fprintf(f, "</td></tr></table>\n");
    size_t i;
    json_t *e;
    if (json_array_size(json_object_get(r, "notes"))) {
        fprintf(f, "<ul class='notes'>");
        json_array_foreach(json_object_get(r, "notes"), i, e) {
            fprintf(f, "<li>");
            esc(f, json_string_value(e));
            fprintf(f, "</li>");
        }
        fprintf(f, "</ul>\n");
    }
    fprintf(f, "<h3>Gates</h3><table><tr><th>gate</th><th>status</th><th>reason</th></tr>");
    json_array_foreach(json_object_get(r, "gates"), i, e) {
        const char *st = str(e, "status");
        fprintf(f, "<tr><td>");
        esc(f, str(e, "name"));
        fprintf(f, "</td><td class='%s'>",
                !strcmp(st, "fail")   ? "bad"
                : !strcmp(st, "pass") ? "ok"
                                      : "");
        esc(f, st);
        fprintf(f, "</td><td>");
        esc(f, str(e, "reason"));
        fprintf(f, "</td></tr>");
    }
    fprintf(f, "</table>\n");
    json_t *cases = json_object_get(r, "cases");
    size_t nc = json_array_size(cases);
    if (!nc) {
        fprintf(f, "<p>No speed cases in this result.</p></section>\n");
        return;
    }
    fprintf(f, "<h3>Speed cases</h3><table><tr><th>case</th><th>repeats</th><th>TTFT p50 / p90 / "
               "p99 ms</th><th>ITL p50 / p90 / p99 ms</th><th>E2E p50 s</th><th>decode tok/s "
               "per stream</th><th>tok/s all</th><th>prefill tok/s</th><th>errors</th></tr>");
    json_array_foreach(cases, i, e) {
        json_t *k = json_object_get(e, "kpis");
        json_t *t = json_object_get(k, "ttft_s"), *it = json_object_get(k, "itl_s");
        fprintf(f, "<tr><td>");
        esc(f, str(e, "name"));
        if (json_is_true(json_object_get(e, "adapted"))) fprintf(f, " (adapted)");
        fprintf(f,
                "</td><td>%.0f</td><td>%.2f / %.2f / %.2f</td><td>%.3f / %.3f / %.3f</td>"
                "<td>%.3f</td><td>%.1f</td><td>%.1f</td><td>%.0f</td><td>%.0f</td></tr>",
                num(e, "repeats"), 1e3 * num(t, "p50"), 1e3 * num(t, "p90"), 1e3 * num(t, "p99"),
                1e3 * num(it, "p50"), 1e3 * num(it, "p90"), 1e3 * num(it, "p99"),
                num(json_object_get(k, "e2e_s"), "p50"),
                num(json_object_get(k, "decode_tps_stream"), "value"),
                num(json_object_get(k, "decode_tps_total"), "value"),
                num(json_object_get(k, "prefill_tps"), "value"), num(e, "errors"));
    }
    fprintf(f, "</table>\n");
    /* fraction of limit: one group per KPI, one bar per case */
    const char **names = calloc(nc, sizeof(char *));
    double *val = calloc(nc * NKPI, sizeof(double)), *err = calloc(nc * NKPI, sizeof(double));
    double **ttft = calloc(nc, sizeof(double *)), **itl = calloc(nc, sizeof(double *));
    size_t *nt = calloc(nc, sizeof(size_t)), *ni = calloc(nc, sizeof(size_t));
    if (names && val && err && ttft && itl && nt && ni) {
        json_array_foreach(cases, i, e) {
            names[i] = str(e, "name");
            for (int q = 0; q < NKPI; q++) {
                json_t *v = json_object_get(json_object_get(e, "kpis"), kpis[q]);
                val[q * nc + i] = num(v, "fraction");
                err[q * nc + i] = num(v, "fraction") * num(v, "noise");
            }
            json_t *sm = json_object_get(e, "samples");
            json_t *a = json_object_get(sm, "ttft_s"), *b = json_object_get(sm, "itl_s");
            nt[i] = json_array_size(a);
            ni[i] = json_array_size(b);
            ttft[i] = calloc(nt[i] + 1, sizeof(double));
            itl[i] = calloc(ni[i] + 1, sizeof(double));
            for (size_t j = 0; ttft[i] && j < nt[i]; j++)
                ttft[i][j] = json_number_value(json_array_get(a, j));
            for (size_t j = 0; itl[i] && j < ni[i]; j++)
                itl[i][j] = json_number_value(json_array_get(b, j));
            if (!ttft[i]) nt[i] = 0;
            if (!itl[i]) ni[i] = 0;
        }
        fprintf(f, "<h3>Fraction of limit per KPI</h3>\n");
        svg_bars(f, "fraction of the limit (1 = at the floor); error bar: run-to-run noise",
                 kpi_labels, NKPI, names, nc, val, err);
        fprintf(f, "<h3>Latency distributions</h3>\n");
        svg_ecdf(f, "time to first token, CDF per case", names, nc, ttft, nt);
        svg_ecdf(f, "inter-token latency (per request), CDF per case", names, nc, itl, ni);
        for (size_t q = 0; q < nc; q++) {
            free(ttft[q]);
            free(itl[q]);
        }
    }
    free(names);
    free(val);
    free(err);
    free(ttft);
    free(itl);
    free(nt);
    free(ni);
    fprintf(f, "</section>\n");
}

static void comparison(FILE *f, json_t **rs, const char *const *paths, size_t n) {
    fprintf(f, "<section><h2>Candidates side by side</h2>\n");
    static const char *const hk[] = {"decode", "prefill", "ttft"};
    const char **names = calloc(n, sizeof(char *));
    char(*labels)[96] = calloc(n, sizeof(*labels));
    double *val = calloc(n * 3, sizeof(double)), *err = calloc(n * 3, sizeof(double));
    if (!names || !labels || !val || !err) goto out;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_object_get(rs[i], "candidate");
        snprintf(labels[i], sizeof(labels[i]), "%zu. %.40s %.8s", i + 1, str(c, "name"),
                 str(c, "id"));
        names[i] = labels[i];
        for (int q = 0; q < 3; q++) {
            json_t *v =
                json_object_get(json_object_get(json_object_get(rs[i], "summary"), "kpis"), hk[q]);
            val[q * n + i] = num(v, "fraction");
            err[q * n + i] = num(v, "fraction") * num(v, "noise");
        }
    }
    svg_bars(f, "headline KPIs as fractions of their limits", hk, 3, names, n, val, err);
    fprintf(f, "<table><tr><th>case</th><th>KPI</th>");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "<th>");
        esc(f, labels[i]);
        fprintf(f, "<br><small>");
        esc(f, paths[i]);
        fprintf(f, "</small></th>");
    }
    fprintf(f, "</tr>");
    size_t ci;
    json_t *c0;
    json_array_foreach(json_object_get(rs[0], "cases"), ci, c0) {
        for (int q = 0; q < NKPI; q++) {
            double base = num(json_object_get(json_object_get(c0, "kpis"), kpis[q]), "value");
            fprintf(f, "<tr><td>");
            esc(f, str(c0, "name"));
            fprintf(f, "</td><td>%s</td>", kpis[q]);
            for (size_t i = 0; i < n; i++) {
                json_t *match = NULL;
                size_t k;
                json_t *ck;
                json_array_foreach(json_object_get(rs[i], "cases"), k, ck) {
                    if (!strcmp(str(ck, "name"), str(c0, "name"))) match = ck;
                }
                double v =
                    match ? num(json_object_get(json_object_get(match, "kpis"), kpis[q]), "value")
                          : NAN;
                if (!isfinite(v))
                    fprintf(f, "<td>-</td>");
                else if (i == 0 || !(base > 0))
                    fprintf(f, "<td>%.4g</td>", v);
                else
                    fprintf(f, "<td>%.4g (x%.3f)</td>", v, v / base);
            }
            fprintf(f, "</tr>");
        }
    }
    fprintf(f, "</table><p>Ratios are against the first result; for latencies (_s) lower is "
               "better, for rates (_tps) higher is better.</p>\n");
out:
    free(names);
    free(labels);
    free(val);
    free(err);
    fprintf(f, "</section>\n");
}

int weft_eval_report_main(int argc, char **argv) {
    const char *out = NULL;
    const char *paths[64];
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: weft eval report RESULT.json... -o report.html\n"
                   "  one self-contained HTML page (inline SVG, no external assets)\n");
            return 0;
        }
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft eval report: -o needs a file\n");
                return 2;
            }
            out = argv[++i];
        } else if (n < 64) {
            paths[n++] = argv[i];
        } else {
            fprintf(stderr, "weft eval report: at most 64 results\n");
            return 2;
        }
    }
    if (!out || n == 0) {
        fprintf(stderr, "usage: weft eval report RESULT.json... -o report.html\n");
        return 2;
    }
    json_t *rs[64];
    for (size_t i = 0; i < n; i++) {
        weft_error err;
        weft_error_clear(&err);
        rs[i] = weft_eval_result_load(paths[i], &err);
        if (!rs[i]) {
            fprintf(stderr, "weft eval report: %s\n", err.message);
            for (size_t j = 0; j < i; j++)
                json_decref(rs[j]);
            return 2;
        }
    }
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "weft eval report: %s: cannot write\n", out);
        for (size_t j = 0; j < n; j++)
            json_decref(rs[j]);
        return 1;
    }
    char now[40];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof(now), "%Y-%m-%d %H:%M UTC", &tm);
    fprintf(f,
            "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<title>weft eval report</title><style>\n"
            "body{font:14px/1.4 system-ui,sans-serif;margin:24px;max-width:1100px;color:#222}\n"
            "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;"
            "padding:3px 6px;text-align:left;vertical-align:top}th{background:#f4f4f4}\n"
            ".ok{color:#176f2c;font-weight:600}.bad{color:#b00020;font-weight:600}\n"
            "svg{display:block;margin:8px 0}svg .t{font-size:13px;font-weight:600}"
            "svg .ax{font-size:11px;fill:#444}svg .grid{stroke:#e3e3e3}"
            "svg .lim{stroke:#b00020;stroke-dasharray:4 3}svg .eb{stroke:#222}\n"
            ".notes{color:#555}section{margin-bottom:32px}\n"
            "</style></head><body>\n<h1>weft eval report</h1>\n<p>%zu result%s, written "
            "%s by <code>weft eval report</code>. Fractions are of the limits computed by "
            "<code>weft eval limits</code> from the model and the probe; 1 is the floor no "
            "implementation can beat.</p>\n",
            n, n == 1 ? "" : "s", now);
    for (size_t i = 0; i < n; i++)
        section(f, paths[i], rs[i], i);
    if (n >= 2) comparison(f, rs, paths, n);
    fprintf(f, "</body></html>\n");
    int bad = ferror(f);
    if (fclose(f) || bad) {
        fprintf(stderr, "weft eval report: %s: write failed\n", out);
        for (size_t j = 0; j < n; j++)
            json_decref(rs[j]);
        return 1;
    }
    for (size_t j = 0; j < n; j++)
        json_decref(rs[j]);
    fprintf(stderr, "weft eval report: wrote %s\n", out);
    return 0;
}
