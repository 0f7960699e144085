/* libFuzzer target for `weft plan`'s inputs, which agents write: the plan (YAML), a profile
 * (`weft bench decode --profile` text or JSON) and the eval results it answers (JSON). The input
 * is up to four parts split at lines "#--": plan, profile, the result before, the result after.
 * Each part goes through its parser (a refusal must say why); a result goes through the ranking;
 * a plan and a result through the review (and the profile when it parsed), and with a second
 * result through plan check; every answer and its printed form must come out whole: the review
 * an object with a boolean "accepted" and arrays "findings" and "levers", the check an object
 * with an array "levers". Build as the other targets (tests/fuzz/fuzz_tokenizer.c says how). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "plan/plan.c"
#include "plan/plan_check.c"
#include "plan/plan_yaml.c"

static FILE *sink;

static json_t *load_json(const uint8_t *p, size_t n) {
    return p ? json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!sink && !(sink = fopen("/dev/null", "w"))) __builtin_trap();
    const uint8_t *part[4];
    size_t len[4];
    fuzz_split(data, size, part, len, 4);

    weft_error err = fuzz_error();
    json_t *plan = NULL;
    if (weft_plan_yaml_parse((const char *)part[0], len[0], "plan.yaml", &plan, &err) != WEFT_OK) {
        fuzz_refused(&err);
        plan = NULL;
    }
    weft_plan_profile prof;
    const weft_plan_profile *pp = NULL;
    if (part[1]) {
        err = fuzz_error();
        if (weft_plan_profile_parse((const char *)part[1], len[1], "profile", &prof, &err) ==
            WEFT_OK) {
            if (prof.n > 64) __builtin_trap();
            pp = &prof;
        } else {
            fuzz_refused(&err);
        }
    }
    json_t *before = load_json(part[2], len[2]), *after = load_json(part[3], len[3]);

    if (before) {
        weft_plan_kpi k[WEFT_PLAN_NKPI];
        err = fuzz_error();
        if (weft_plan_rank(before, k, &err) == WEFT_OK)
            weft_plan_print_ranking(sink, k);
        else
            fuzz_refused(&err);
    }
    if (plan && before) {
        json_t *rev = NULL;
        err = fuzz_error();
        if (weft_plan_review(before, plan, pp, &rev, &err) == WEFT_OK) {
            if (!json_is_object(rev) || !json_is_boolean(json_object_get(rev, "accepted")) ||
                !json_is_array(json_object_get(rev, "findings")) ||
                !json_is_array(json_object_get(rev, "levers")))
                __builtin_trap();
            weft_plan_print_review(sink, rev);
            json_decref(rev);
        } else {
            fuzz_refused(&err);
        }
    }
    if (plan && before && after) {
        json_t *chk = NULL;
        err = fuzz_error();
        if (weft_plan_check(plan, before, after, &chk, &err) == WEFT_OK) {
            if (!json_is_object(chk) || !json_is_array(json_object_get(chk, "levers")))
                __builtin_trap();
            weft_plan_print_check(sink, chk);
            json_decref(chk);
        } else {
            fuzz_refused(&err);
        }
    }
    json_decref(plan);
    json_decref(before);
    json_decref(after);
    return 0;
}
