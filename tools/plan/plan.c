/* The planner's rules (plan.h; docs/PLAN.md explains each). Ranking: decode and prefill by
 * their gap to the limit (1 - fraction), the larger first, both leading when the gaps differ by
 * less than the noise margin; time to first token is listed but never leads. Review: a plan is
 * refused when it stops with a gap above noise, leaves such a gap without a lever, forecasts no
 * gain beyond noise, moves only time to first token, forecasts past a limit, or asks a kernel
 * lever for more than Amdahl's law allows on its hotspot's share of the profile. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan/plan.h"
#include "util/error.h"

static const char *const kpi_names[WEFT_PLAN_NKPI] = {"decode", "prefill", "ttft"};

static int kpi_index(const char *s) {
    for (int i = 0; i < WEFT_PLAN_NKPI; i++)
        if (s && !strcmp(s, kpi_names[i])) return i;
    return -1;
}

static double margin_of(double noise) {
    double m = WEFT_PLAN_NOISE_SIGMAS * (isfinite(noise) ? noise : 0);
    return m > WEFT_PLAN_MIN_MARGIN ? m : WEFT_PLAN_MIN_MARGIN;
}

weft_status weft_plan_rank(json_t *result, weft_plan_kpi k[WEFT_PLAN_NKPI], weft_error *err) {
    memset(k, 0, sizeof(*k) * WEFT_PLAN_NKPI);
    json_t *kp = json_object_get(json_object_get(result, "summary"), "kpis");
    for (int i = 0; i < WEFT_PLAN_NKPI; i++) {
        k[i].name = kpi_names[i];
        json_t *o = json_object_get(kp, kpi_names[i]);
        json_t *f = json_object_get(o, "fraction");
        if (!json_is_number(f)) continue;
        k[i].present = 1;
        k[i].fraction = json_number_value(f);
        k[i].value = json_number_value(json_object_get(o, "value"));
        k[i].limit = json_number_value(json_object_get(o, "limit"));
        k[i].noise = json_number_value(json_object_get(o, "noise"));
        k[i].gap = k[i].fraction < 1 ? 1 - k[i].fraction : 0;
        k[i].margin = margin_of(k[i].noise);
        k[i].above_noise = k[i].gap > k[i].margin;
    }
    if (!k[WEFT_PLAN_DECODE].present && !k[WEFT_PLAN_PREFILL].present)
        return weft_error_set(err, WEFT_ERR_INVALID, "result",
                              "summary.kpis has neither decode nor prefill with a fraction of "
                              "its limit (was the eval run with --model and a probe?)");
    weft_plan_kpi *d = &k[WEFT_PLAN_DECODE], *p = &k[WEFT_PLAN_PREFILL];
    if (d->present && p->present) {
        double m = d->margin > p->margin ? d->margin : p->margin;
        if (fabs(d->gap - p->gap) <= m) {
            d->leads = p->leads = 1;
            d->rank = p->rank = 1;
        } else if (d->gap > p->gap) {
            d->leads = 1, d->rank = 1, p->rank = 2;
        } else {
            p->leads = 1, p->rank = 1, d->rank = 2;
        }
    } else if (d->present) {
        d->leads = 1, d->rank = 1;
    } else {
        p->leads = 1, p->rank = 1;
    }
    if (k[WEFT_PLAN_TTFT].present) k[WEFT_PLAN_TTFT].rank = (d->present && p->present) ? 3 : 2;
    return WEFT_OK;
}

void weft_plan_amdahl(double f, double s, double *s_max, double *kernel_speedup) {
    *s_max = f >= 1 ? INFINITY : 1 / (1 - f);
    double denom = 1 / s - (1 - f);
    *kernel_speedup = (f <= 0 || denom <= 0) ? INFINITY : f / denom;
}

/* ---- profiles ------------------------------------------------------------------------------ */
static int profile_add(weft_plan_profile *p, const char *name, double s) {
    for (uint32_t i = 0; i < p->n; i++)
        if (!strcasecmp(p->names[i], name)) {
            p->seconds[i] += s;
            p->total += s;
            return 0;
        }
    if (p->n == 64) return -1;
    snprintf(p->names[p->n], sizeof(p->names[0]), "%s", name);
    p->seconds[p->n++] = s;
    p->total += s;
    return 0;
}

weft_status weft_plan_profile_parse(const char *text, size_t len, const char *name,
                                    weft_plan_profile *p, weft_error *err) {
    memset(p, 0, sizeof(*p));
    json_error_t je;
    json_t *o = json_loadb(text, len, 0, &je);
    if (o) {
        json_t *c = json_object_get(o, "classes");
        const char *k;
        json_t *v;
        if (!json_is_object(c)) {
            json_decref(o);
            return weft_error_set(err, WEFT_ERR_FORMAT, name,
                                  "expected {\"classes\": {\"op class\": seconds, ...}}");
        }
        json_object_foreach(c, k, v) {
            if (!json_is_number(v) || json_number_value(v) < 0 ||
                profile_add(p, k, json_number_value(v))) {
                weft_status st = weft_error_set(err, WEFT_ERR_FORMAT, name,
                                                "classes.%s: expected non-negative seconds (at "
                                                "most 64 classes)",
                                                k);
                json_decref(o);
                return st;
            }
        }
        json_decref(o);
    } else {
        /* `weft bench decode --profile`: "    linear   12.345 ms  45.6%  1234 calls" */
        const char *s = text, *end = text + len;
        while (s < end) {
            const char *nl = memchr(s, '\n', (size_t)(end - s));
            size_t ll = nl ? (size_t)(nl - s) : (size_t)(end - s);
            char line[256];
            snprintf(line, sizeof(line), "%.*s", (int)(ll < 255 ? ll : 255), s);
            char cls[64];
            double ms, pct;
            unsigned long long calls;
            if (sscanf(line, " %63s %lf ms %lf%% %llu calls", cls, &ms, &pct, &calls) == 4 &&
                ms >= 0 && profile_add(p, cls, ms * 1e-3)) {
                return weft_error_set(err, WEFT_ERR_FORMAT, name, "more than 64 op classes");
            }
            s = nl ? nl + 1 : end;
        }
    }
    if (p->n == 0 || !(p->total > 0))
        return weft_error_set(err, WEFT_ERR_FORMAT, name,
                              "no op class times found: expected the table of `weft bench "
                              "decode --profile` or {\"classes\": {...}}");
    return WEFT_OK;
}

weft_status weft_plan_profile_load(const char *path, weft_plan_profile *p, weft_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return weft_error_set(err, WEFT_ERR_IO, path, "cannot open: %s", strerror(errno));
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    return weft_plan_profile_parse(buf, n, path, p, err);
}

/* ---- review -------------------------------------------------------------------------------- */
static void finding(json_t *fs, const char *rule, const char *lever, int refuse, const char *fmt,
                    ...) __attribute__((format(printf, 5, 6)));
static void finding(json_t *fs, const char *rule, const char *lever, int refuse, const char *fmt,
                    ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *o = json_pack("{s:s, s:b, s:s}", "rule", rule, "refuse", refuse, "message", msg);
    if (lever) json_object_set_new(o, "lever", json_string(lever));
    json_array_append_new(fs, o);
}

typedef struct plan_lever {
    const char *name, *technique, *change, *outcome;
    int moves[WEFT_PLAN_NKPI];
    double low, expected, high;
    json_t *hotspot; /* array of strings, or NULL */
} plan_lever;

static weft_status parse_lever(json_t *lj, size_t i, plan_lever *l, weft_error *err) {
    memset(l, 0, sizeof(*l));
    char where[64];
    snprintf(where, sizeof(where), "levers[%zu]", i);
    if (!json_is_object(lj))
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan", "%s: expected a mapping", where);
    static const char *const known[] = {"name",   "technique", "change", "kpis", "forecast",
                                        "kernel", "outcome",   "notes",  NULL};
    const char *key;
    json_t *v;
    json_object_foreach(lj, key, v) {
        int ok = 0;
        for (int k = 0; known[k]; k++)
            ok |= !strcmp(key, known[k]);
        if (!ok)
            return weft_error_set(err, WEFT_ERR_FORMAT, "plan",
                                  "%s.%s: unknown field (known: name, technique, change, kpis, "
                                  "forecast, kernel, outcome, notes)",
                                  where, key);
    }
    l->name = json_string_value(json_object_get(lj, "name"));
    if (!l->name || !*l->name)
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan", "%s.name: expected a string", where);
    l->technique = json_string_value(json_object_get(lj, "technique"));
    l->change = json_string_value(json_object_get(lj, "change"));
    if (!l->technique && !l->change)
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan",
                              "%s (%s): give technique (a plugin name) or change (what is done)",
                              where, l->name);
    l->outcome = json_string_value(json_object_get(lj, "outcome"));
    if (json_object_get(lj, "outcome") &&
        (!l->outcome || (strcmp(l->outcome, "built") && strcmp(l->outcome, "pruned") &&
                         strcmp(l->outcome, "deferred"))))
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan",
                              "%s.outcome: expected built, pruned or deferred", where);
    json_t *kp = json_object_get(lj, "kpis");
    if (json_is_string(kp)) {
        int k = kpi_index(json_string_value(kp));
        if (k < 0) goto bad_kpi;
        l->moves[k] = 1;
    } else if (json_is_array(kp) && json_array_size(kp) > 0) {
        size_t q;
        json_t *e;
        json_array_foreach(kp, q, e) {
            int k = kpi_index(json_string_value(e));
            if (k < 0) goto bad_kpi;
            l->moves[k] = 1;
        }
    } else {
    bad_kpi:
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan",
                              "%s.kpis: expected a list of decode, prefill, ttft", where);
    }
    json_t *f = json_object_get(lj, "forecast");
    json_t *lo = json_object_get(f, "low"), *ex = json_object_get(f, "expected"),
           *hi = json_object_get(f, "high");
    if (!json_is_number(lo) || !json_is_number(ex) || !json_is_number(hi))
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan",
                              "%s.forecast: expected {low, expected, high} speed-ups (1.10 = "
                              "10%% faster)",
                              where);
    l->low = json_number_value(lo);
    l->expected = json_number_value(ex);
    l->high = json_number_value(hi);
    if (!(l->low > 0) || !(l->low <= l->expected) || !(l->expected <= l->high) ||
        !isfinite(l->high))
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan",
                              "%s.forecast: expected 0 < low <= expected <= high, found %g, %g, "
                              "%g",
                              where, l->low, l->expected, l->high);
    json_t *kern = json_object_get(lj, "kernel");
    if (kern) {
        json_t *h = json_object_get(kern, "hotspot");
        if (json_is_string(h)) {
            l->hotspot = json_array();
            json_array_append(l->hotspot, h);
        } else if (json_is_array(h) && json_array_size(h) > 0) {
            l->hotspot = json_incref(h);
            size_t q;
            json_t *e;
            json_array_foreach(h, q, e) {
                if (!json_is_string(e)) {
                    json_decref(l->hotspot);
                    l->hotspot = NULL;
                    break;
                }
            }
        }
        if (!l->hotspot)
            return weft_error_set(err, WEFT_ERR_FORMAT, "plan",
                                  "%s.kernel.hotspot: expected the op classes it speeds up "
                                  "(names from the profile)",
                                  where);
    }
    return WEFT_OK;
}

static json_t *ranking_json(const weft_plan_kpi k[WEFT_PLAN_NKPI]) {
    json_t *a = json_array();
    for (int i = 0; i < WEFT_PLAN_NKPI; i++) {
        if (!k[i].present) continue;
        json_array_append_new(a, json_pack("{s:s, s:i, s:b, s:f, s:f, s:f, s:f, s:f, s:b, s:f}",
                                           "kpi", k[i].name, "rank", k[i].rank, "leads", k[i].leads,
                                           "fraction", k[i].fraction, "gap", k[i].gap, "noise",
                                           k[i].noise, "margin", k[i].margin, "value", k[i].value,
                                           "above_noise", k[i].above_noise, "limit", k[i].limit));
    }
    return a;
}

weft_status weft_plan_review(json_t *result, json_t *plan, const weft_plan_profile *profile,
                             json_t **review, weft_error *err) {
    *review = NULL;
    weft_plan_kpi k[WEFT_PLAN_NKPI];
    weft_status st = weft_plan_rank(result, k, err);
    if (st) return st;
    if (!json_is_object(plan))
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan", "expected a mapping at the top");
    json_t *fmt = json_object_get(plan, "format");
    if (fmt && json_integer_value(fmt) != 1)
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan", "format: expected 1");
    json_t *stopj = json_object_get(plan, "stop");
    if (stopj && !json_is_boolean(stopj))
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan", "stop: expected true or false");
    int stop = json_is_true(stopj);
    json_t *lv = json_object_get(plan, "levers");
    if (lv && !json_is_array(lv))
        return weft_error_set(err, WEFT_ERR_FORMAT, "plan", "levers: expected a list");
    size_t n = json_array_size(lv);
    plan_lever *L = calloc(n ? n : 1, sizeof(plan_lever));
    if (!L) return weft_error_set(err, WEFT_ERR_NOMEM, "plan", "out of memory");
    for (size_t i = 0; i < n; i++) {
        if ((st = parse_lever(json_array_get(lv, i), i, &L[i], err))) {
            for (size_t j = 0; j < i; j++)
                json_decref(L[j].hotspot);
            free(L);
            return st;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(L[j].name, L[i].name)) {
                st = weft_error_set(err, WEFT_ERR_FORMAT, "plan",
                                    "levers[%zu].name: '%s' is already levers[%zu]'s", i, L[i].name,
                                    j);
                for (size_t q = 0; q <= i; q++)
                    json_decref(L[q].hotspot);
                free(L);
                return st;
            }
    }
    json_t *fs = json_array(), *levers = json_array();
    const int gapped[2] = {WEFT_PLAN_DECODE, WEFT_PLAN_PREFILL};

    /* stopping with a gap above noise */
    if (stop || n == 0)
        for (int g = 0; g < 2; g++) {
            weft_plan_kpi *q = &k[gapped[g]];
            if (q->present && q->above_noise)
                finding(fs, "stop", NULL, 1,
                        "the plan stops while %s is at %.3f of its limit: the gap %.3f is above "
                        "noise (margin %.3f)",
                        q->name, q->fraction, q->gap, q->margin);
        }
    if (stop && n > 0)
        finding(fs, "stop", NULL, 1, "the plan says stop and lists %zu levers: choose one", n);

    /* every gap above noise needs a lever */
    for (int g = 0; g < 2 && n > 0; g++) {
        weft_plan_kpi *q = &k[gapped[g]];
        if (!q->present || !q->above_noise) continue;
        int answered = 0;
        for (size_t i = 0; i < n; i++)
            answered |= L[i].moves[gapped[g]];
        if (!answered)
            finding(fs, "unanswered", NULL, 1,
                    "%s is at %.3f of its limit (gap %.3f, above the noise margin %.3f) and no "
                    "lever moves it",
                    q->name, q->fraction, q->gap, q->margin);
    }

    /* time to first token alone */
    int moves_dp = 0, moves_t = 0;
    for (size_t i = 0; i < n; i++) {
        moves_dp |= L[i].moves[WEFT_PLAN_DECODE] | L[i].moves[WEFT_PLAN_PREFILL];
        moves_t |= L[i].moves[WEFT_PLAN_TTFT];
    }
    if (n > 0 && moves_t && !moves_dp)
        finding(fs, "ttft_alone", NULL, 1,
                "every lever moves only time to first token; it follows from prefill and is "
                "never chased alone: name the prefill (or decode) gain behind it");

    /* order: the first lever should answer a leading gap */
    if (n > 0) {
        int first_leads = 0;
        for (int g = 0; g < 2; g++)
            first_leads |= k[gapped[g]].leads && L[0].moves[gapped[g]];
        if (!first_leads) {
            const char *lead = k[WEFT_PLAN_DECODE].leads ? "decode" : "prefill";
            finding(fs, "order", L[0].name, 0,
                    "the first lever does not move %s, which is furthest from its limit", lead);
        }
    }

    /* forecasts: beyond noise, within the limit, possible by Amdahl */
    int any_beyond = 0;
    for (size_t i = 0; i < n; i++) {
        plan_lever *l = &L[i];
        json_t *lj = json_pack("{s:s, s:s?, s:s?, s:{s:f, s:f, s:f}}", "name", l->name, "technique",
                               l->technique, "change", l->change, "forecast", "low", l->low,
                               "expected", l->expected, "high", l->high);
        json_t *moves = json_array();
        int beyond = 0;
        for (int q = 0; q < WEFT_PLAN_NKPI; q++) {
            if (!l->moves[q]) continue;
            json_array_append_new(moves, json_string(kpi_names[q]));
            double m = k[q].present ? k[q].margin : WEFT_PLAN_MIN_MARGIN;
            if (l->expected - 1 > m) beyond = 1;
            if (k[q].present && k[q].fraction * l->high > 1 + 1e-9)
                finding(fs, "limit", l->name, 1,
                        "the high forecast %.3gx on %s would pass its limit: %.3f of the limit x "
                        "%.3g = %.3f > 1",
                        l->high, kpi_names[q], k[q].fraction, l->high, k[q].fraction * l->high);
        }
        json_object_set_new(lj, "kpis", moves);
        if (beyond)
            any_beyond = 1;
        else
            finding(fs, "noise", l->name, 0,
                    "the expected gain %.1f%% is within the noise margin of what it moves: the "
                    "next eval cannot confirm it",
                    (l->expected - 1) * 100);
        if (l->hotspot) {
            if (!profile) {
                finding(fs, "amdahl", l->name, 1,
                        "a kernel lever needs a profile (--profile, from `weft bench decode "
                        "--profile`) to check its hotspot's share");
            } else {
                double t = 0;
                int missing = 0;
                size_t q;
                json_t *h;
                json_array_foreach(l->hotspot, q, h) {
                    const char *hn = json_string_value(h);
                    int found = 0;
                    for (uint32_t c = 0; c < profile->n; c++)
                        if (!strcasecmp(profile->names[c], hn)) {
                            t += profile->seconds[c];
                            found = 1;
                        }
                    if (!found) {
                        char have[1024] = "";
                        size_t w = 0;
                        for (uint32_t c = 0; c < profile->n && w < sizeof(have); c++)
                            w += (size_t)snprintf(have + w, sizeof(have) - w, "%s%s", c ? ", " : "",
                                                  profile->names[c]);
                        finding(fs, "amdahl", l->name, 1,
                                "hotspot '%s' is not an op class of the profile (it has: %s)", hn,
                                have);
                        missing = 1;
                    }
                }
                if (!missing) {
                    double f = t / profile->total, smax, kx, kh;
                    weft_plan_amdahl(f, l->expected, &smax, &kx);
                    weft_plan_amdahl(f, l->high, &smax, &kh);
                    json_object_set_new(lj, "amdahl",
                                        json_pack("{s:f, s:f, s:o, s:o}", "fraction", f, "s_max",
                                                  smax, "kernel_speedup_expected",
                                                  isfinite(kx) ? json_real(kx) : json_null(),
                                                  "kernel_speedup_high",
                                                  isfinite(kh) ? json_real(kh) : json_null()));
                    if (l->expected >= smax)
                        finding(fs, "amdahl", l->name, 1,
                                "the hotspot takes f = %.3f of the time, so even an infinitely "
                                "fast kernel gives at most S_max = 1/(1-f) = %.3fx; the "
                                "expected %.3fx cannot be reached",
                                f, smax, l->expected);
                    else if (l->high >= smax)
                        finding(fs, "amdahl", l->name, 1,
                                "the high forecast %.3fx is at or past S_max = 1/(1-f) = %.3fx "
                                "(f = %.3f)",
                                l->high, smax, f);
                    else
                        finding(fs, "amdahl", l->name, 0,
                                "f = %.3f, S_max = %.3fx; the expected %.3fx needs the kernel "
                                "%.2fx faster (f / (1/S - (1-f))), the high %.3fx needs %.2fx",
                                f, smax, l->expected, kx, l->high, kh);
                }
            }
        }
        json_array_append_new(levers, lj);
    }
    if (n > 0 && !any_beyond)
        finding(fs, "noise", NULL, 1,
                "no lever forecasts an expected gain beyond the noise margin of what it moves");

    int accepted = 1;
    size_t i;
    json_t *e;
    json_array_foreach(fs, i, e) if (json_is_true(json_object_get(e, "refuse"))) accepted = 0;
    *review = json_pack("{s:b, s:b, s:o, s:o, s:o}", "accepted", accepted, "stop", stop, "ranking",
                        ranking_json(k), "findings", fs, "levers", levers);
    for (size_t j = 0; j < n; j++)
        json_decref(L[j].hotspot);
    free(L);
    return WEFT_OK;
}

/* ---- printing ------------------------------------------------------------------------------ */
void weft_plan_print_ranking(FILE *f, const weft_plan_kpi k[WEFT_PLAN_NKPI]) {
    fprintf(f, "%-8s %-4s %12s %12s %9s %7s %7s %7s  %s\n", "kpi", "rank", "value", "limit",
            "fraction", "gap", "noise", "margin", "");
    for (int i = 0; i < WEFT_PLAN_NKPI; i++) {
        if (!k[i].present) {
            fprintf(f, "%-8s      (not in the result)\n", k[i].name);
            continue;
        }
        const char *why = i == WEFT_PLAN_TTFT ? "follows prefill; never leads alone"
                          : k[i].leads       ? (k[i].above_noise ? "leads" : "leads (within noise)")
                          : k[i].above_noise ? "gap above noise"
                                             : "within noise";
        fprintf(f, "%-8s %-4d %12.4g %12.4g %9.3f %7.3f %7.3f %7.3f  %s\n", k[i].name, k[i].rank,
                k[i].value, k[i].limit, k[i].fraction, k[i].gap, k[i].noise, k[i].margin, why);
    }
}

void weft_plan_print_review(FILE *f, json_t *review) {
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(review, "findings"), i, e) {
        const char *lever = json_string_value(json_object_get(e, "lever"));
        fprintf(f, "%s %-10s %s%s%s\n",
                json_is_true(json_object_get(e, "refuse")) ? "REFUSED" : "note   ",
                json_string_value(json_object_get(e, "rule")), lever ? lever : "",
                lever ? ": " : "", json_string_value(json_object_get(e, "message")));
    }
    fprintf(f, "plan %s\n",
            json_is_true(json_object_get(review, "accepted")) ? "accepted" : "refused");
}
