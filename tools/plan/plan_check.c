/* `weft plan check`: after the next eval, each lever's forecast beside what was measured. The
 * measured speed-up of a KPI is the ratio of the headline values of the two results (rates:
 * after / before; time to first token: before / after), judged against the forecast with the
 * larger noise margin of the two results. A lever is recorded as built when its technique is a
 * plugin of the new candidate, pruned when it was in the old candidate and is gone, deferred
 * otherwise; a plan may state the outcome itself (levers that are changes, not plugins). When
 * several built levers move the same KPI the measurement is theirs together, and it says so. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"
#include "util/error.h"

static const char *const check_kpi_names[WEFT_PLAN_NKPI] = {"decode", "prefill", "ttft"};

static int has_plugin(json_t *result, const char *name) {
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(json_object_get(result, "candidate"), "plugins"), i, p) {
        const char *n = json_string_value(json_object_get(p, "name"));
        if (n && !strcmp(n, name)) return 1;
    }
    return 0;
}

static const char *cand_id(json_t *r) {
    const char *s = json_string_value(json_object_get(json_object_get(r, "candidate"), "id"));
    return s ? s : "";
}

weft_status weft_plan_check(json_t *plan, json_t *before, json_t *after, json_t **check,
                            weft_error *err) {
    *check = NULL;
    weft_plan_kpi kb[WEFT_PLAN_NKPI], ka[WEFT_PLAN_NKPI];
    weft_status st = weft_plan_rank(before, kb, err);
    if (st) return st;
    /* an "after" without speed numbers (a gates-only run) still gets its levers recorded */
    weft_error ignored;
    weft_error_clear(&ignored);
    if (weft_plan_rank(after, ka, &ignored))
        for (int q = 0; q < WEFT_PLAN_NKPI; q++)
            ka[q].present = 0;
    /* validate the plan's shape with the review (against the old result) */
    json_t *rev = NULL;
    if ((st = weft_plan_review(before, plan, NULL, &rev, err))) return st;
    json_decref(rev);

    json_t *kpis = json_object();
    double speedup[WEFT_PLAN_NKPI], margin[WEFT_PLAN_NKPI];
    int have[WEFT_PLAN_NKPI];
    for (int q = 0; q < WEFT_PLAN_NKPI; q++) {
        have[q] = kb[q].present && ka[q].present && kb[q].value > 0 && ka[q].value > 0;
        speedup[q] = NAN;
        margin[q] = kb[q].margin > ka[q].margin ? kb[q].margin : ka[q].margin;
        if (!have[q]) continue;
        speedup[q] = q == WEFT_PLAN_TTFT ? kb[q].value / ka[q].value : ka[q].value / kb[q].value;
        json_object_set_new(kpis, check_kpi_names[q],
                            json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "before", kb[q].value,
                                      "after", ka[q].value, "speedup", speedup[q], "margin",
                                      margin[q], "fraction_before", kb[q].fraction,
                                      "fraction_after", ka[q].fraction));
    }
    json_t *levers = json_array();
    json_t *lv = json_object_get(plan, "levers");
    size_t n = json_array_size(lv);
    int built_on[WEFT_PLAN_NKPI] = {0};
    const char **status = calloc(n ? n : 1, sizeof(char *));
    if (!status) {
        json_decref(kpis);
        json_decref(levers);
        return weft_error_set(err, WEFT_ERR_NOMEM, "plan check", "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *l = json_array_get(lv, i);
        const char *tech = json_string_value(json_object_get(l, "technique"));
        const char *out = json_string_value(json_object_get(l, "outcome"));
        if (out)
            status[i] = out;
        else if (tech && has_plugin(after, tech))
            status[i] = "built";
        else if (tech && has_plugin(before, tech))
            status[i] = "pruned";
        else
            status[i] = "deferred";
        if (!strcmp(status[i], "built")) {
            json_t *kp = json_object_get(l, "kpis");
            for (int q = 0; q < WEFT_PLAN_NKPI; q++) {
                int m = json_is_string(kp) && !strcmp(json_string_value(kp), check_kpi_names[q]);
                size_t j;
                json_t *e;
                json_array_foreach(kp, j, e) m |= !strcmp(json_string_value(e), check_kpi_names[q]);
                built_on[q] += m;
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        json_t *l = json_array_get(lv, i);
        json_t *f = json_object_get(l, "forecast");
        double lo = json_number_value(json_object_get(f, "low"));
        double ex = json_number_value(json_object_get(f, "expected"));
        double hi = json_number_value(json_object_get(f, "high"));
        const char *tech = json_string_value(json_object_get(l, "technique"));
        json_t *o = json_pack("{s:s, s:s, s:{s:f, s:f, s:f}}", "name",
                              json_string_value(json_object_get(l, "name")), "status", status[i],
                              "forecast", "low", lo, "expected", ex, "high", hi);
        if (tech) json_object_set_new(o, "technique", json_string(tech));
        if (!json_object_get(l, "outcome") && !tech)
            json_object_set_new(o, "note",
                                json_string("a change, not a plugin: state its "
                                            "outcome in the plan to record it built"));
        json_t *meas = json_object();
        json_t *kp = json_object_get(l, "kpis");
        for (int q = 0; q < WEFT_PLAN_NKPI; q++) {
            int m = json_is_string(kp) && !strcmp(json_string_value(kp), check_kpi_names[q]);
            size_t j;
            json_t *e;
            json_array_foreach(kp, j, e) m |= !strcmp(json_string_value(e), check_kpi_names[q]);
            if (!m) continue;
            if (!have[q]) {
                json_object_set_new(meas, check_kpi_names[q],
                                    json_pack("{s:s}", "verdict", "not measured in both results"));
                continue;
            }
            const char *verdict;
            double s = speedup[q];
            if (strcmp(status[i], "built"))
                verdict = "not built: the change is not this lever's";
            else if (s < lo - margin[q])
                verdict = "below the forecast";
            else if (s > hi + margin[q])
                verdict = "above the forecast";
            else
                verdict = "within the forecast";
            json_t *mo = json_pack("{s:f, s:f, s:s}", "measured", s, "margin", margin[q], "verdict",
                                   verdict);
            if (!strcmp(status[i], "built") && built_on[q] > 1)
                json_object_set_new(mo, "shared",
                                    json_sprintf("measured together with %d other built levers "
                                                 "on %s",
                                                 built_on[q] - 1, check_kpi_names[q]));
            json_object_set_new(meas, check_kpi_names[q], mo);
        }
        json_object_set_new(o, "measured", meas);
        json_array_append_new(levers, o);
    }
    free(status);
    *check = json_pack("{s:s, s:s, s:o, s:o}", "before", cand_id(before), "after", cand_id(after),
                       "kpis", kpis, "levers", levers);
    return WEFT_OK;
}

void weft_plan_print_check(FILE *f, json_t *check) {
    fprintf(f, "before %s -> after %s\n", json_string_value(json_object_get(check, "before")),
            json_string_value(json_object_get(check, "after")));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(check, "kpis"), k, v) {
        fprintf(f, "  %-8s %.4g -> %.4g  x%.3f (margin %.3f)\n", k,
                json_number_value(json_object_get(v, "before")),
                json_number_value(json_object_get(v, "after")),
                json_number_value(json_object_get(v, "speedup")),
                json_number_value(json_object_get(v, "margin")));
    }
    fprintf(f, "%-24s %-9s %-8s %-22s %9s  %s\n", "lever", "status", "kpi", "forecast", "measured",
            "verdict");
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(check, "levers"), i, l) {
        json_t *fc = json_object_get(l, "forecast");
        char fs[64];
        snprintf(fs, sizeof(fs), "%.3g / %.3g / %.3g",
                 json_number_value(json_object_get(fc, "low")),
                 json_number_value(json_object_get(fc, "expected")),
                 json_number_value(json_object_get(fc, "high")));
        json_t *meas = json_object_get(l, "measured");
        if (json_object_size(meas) == 0)
            fprintf(f, "%-24s %-9s %-8s %-22s\n", json_string_value(json_object_get(l, "name")),
                    json_string_value(json_object_get(l, "status")), "-", fs);
        json_object_foreach(meas, k, v) {
            json_t *ms = json_object_get(v, "measured");
            char mv[32] = "-";
            if (json_is_number(ms)) snprintf(mv, sizeof(mv), "x%.3f", json_number_value(ms));
            fprintf(f, "%-24s %-9s %-8s %-22s %9s  %s\n",
                    json_string_value(json_object_get(l, "name")),
                    json_string_value(json_object_get(l, "status")), k, fs, mv,
                    json_string_value(json_object_get(v, "verdict")));
        }
    }
}
