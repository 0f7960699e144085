/* `weft plan`: ranks the gaps of the last eval result and reviews a plan against them;
 * `weft plan check`: forecast beside measured after the next eval. The rules are in
 * tools/plan/plan.c and docs/PLAN.md. Without --result, the last result is the newest
 * runs/NAME/CANDIDATE/result.json under the current directory. */
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "eval/eval.h"
#include "plan/plan.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f, "usage: weft plan [--result RESULT.json] [--profile FILE] [--json] [PLAN.yaml]\n"
               "       weft plan check PLAN.yaml --before RESULT.json --after RESULT.json\n"
               "                       [-o CHECK.json] [--json]\n"
               "  Without a plan: the ranking of decode and prefill by their distance to their "
               "limits.\n"
               "  With a plan: accepted (exit 0) or refused (exit 1), with every reason.\n"
               "  --result    the result the plan answers (default: the newest\n"
               "              runs/*/*/result.json here)\n"
               "  --profile   time per op class (`weft bench decode --profile` output or\n"
               "              {\"classes\": {...}}) for the Amdahl gate on kernel levers\n"
               "  check       records each lever as built, pruned or deferred and sets its "
               "forecast\n"
               "              beside the measured speed-up (docs/PLAN.md)\n");
}

/* The newest runs/<name>/<candidate>/result.json. */
static int newest_result(char *out, size_t cap) {
    DIR *d = opendir("runs");
    if (!d) return -1;
    struct dirent *e;
    double best = -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[1024];
        snprintf(sub, sizeof(sub), "runs/%s", e->d_name);
        DIR *d2 = opendir(sub);
        if (!d2) continue;
        struct dirent *c;
        while ((c = readdir(d2))) {
            if (c->d_name[0] == '.') continue;
            char p[2048];
            snprintf(p, sizeof(p), "%s/%s/result.json", sub, c->d_name);
            struct stat st;
            if (stat(p, &st)) continue;
            double t = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
            if (t > best) {
                best = t;
                snprintf(out, cap, "%s", p);
            }
        }
        closedir(d2);
    }
    closedir(d);
    return best < 0 ? -1 : 0;
}

static int plan_check_main(int argc, char **argv) {
    static const struct option opts[] = {
        {"before", required_argument, 0, 'b'}, {"after", required_argument, 0, 'a'},
        {"output", required_argument, 0, 'o'}, {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    const char *before = NULL, *after = NULL, *out = NULL;
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "b:a:o:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'b':
            before = optarg;
            break;
        case 'a':
            after = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind + 1 != argc || !before || !after) {
        fprintf(stderr, "weft plan check: expected PLAN.yaml, --before RESULT and --after "
                        "RESULT\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    json_t *plan = NULL, *rb = NULL, *ra = NULL, *chk = NULL;
    int rc = 1;
    if (weft_plan_yaml_load(argv[optind], &plan, &err) ||
        !(rb = weft_eval_result_load(before, &err)) || !(ra = weft_eval_result_load(after, &err)) ||
        weft_plan_check(plan, rb, ra, &chk, &err)) {
        rc = weft_cli_fail("plan check", &err);
        goto done;
    }
    json_object_set_new(chk, "plan", json_string(argv[optind]));
    if (out && json_dump_file(chk, out, JSON_INDENT(2))) {
        fprintf(stderr, "weft plan check: %s: cannot write\n", out);
        goto done;
    }
    if (json) {
        char *s = json_dumps(chk, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
    } else {
        weft_plan_print_check(stdout, chk);
    }
    rc = 0;
done:
    json_decref(plan);
    json_decref(rb);
    json_decref(ra);
    json_decref(chk);
    return rc;
}

int weft_cmd_plan(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "check")) return plan_check_main(argc - 1, argv + 1);
    static const struct option opts[] = {{"result", required_argument, 0, 'r'},
                                         {"profile", required_argument, 0, 'p'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *result = NULL, *profile = NULL;
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "r:p:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            result = optarg;
            break;
        case 'p':
            profile = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (argc - optind > 1) {
        fprintf(stderr, "weft plan: at most one plan file\n");
        return 2;
    }
    const char *plan_path = optind < argc ? argv[optind] : NULL;
    char found[2048];
    if (!result) {
        if (newest_result(found, sizeof(found))) {
            fprintf(stderr, "weft plan: no --result and no runs/*/*/result.json here\n");
            return 2;
        }
        result = found;
    }
    weft_error err;
    weft_error_clear(&err);
    json_t *r = weft_eval_result_load(result, &err), *plan = NULL, *rev = NULL;
    if (!r) return weft_cli_fail("plan", &err);
    int rc = 1;
    weft_plan_profile prof;
    weft_plan_kpi k[WEFT_PLAN_NKPI];
    if (weft_plan_rank(r, k, &err) || (profile && weft_plan_profile_load(profile, &prof, &err)) ||
        (plan_path && weft_plan_yaml_load(plan_path, &plan, &err)) ||
        (plan && weft_plan_review(r, plan, profile ? &prof : NULL, &rev, &err))) {
        rc = weft_cli_fail("plan", &err);
        goto done;
    }
    const char *counts = json_is_false(json_object_get(json_object_get(r, "summary"), "counts"))
                             ? " (a gate failed: this result does not count)"
                             : "";
    if (json) {
        json_t *o = rev ? json_incref(rev) : json_object();
        json_object_set_new(o, "result", json_string(result));
        char *s = json_dumps(o, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
        json_decref(o);
    } else {
        printf("result: %s%s\n", result, counts);
        weft_plan_print_ranking(stdout, k);
        if (rev) weft_plan_print_review(stdout, rev);
    }
    rc = rev && !json_is_true(json_object_get(rev, "accepted")) ? 1 : 0;
    if (!plan_path && *counts) rc = 1;
done:
    json_decref(r);
    json_decref(plan);
    json_decref(rev);
    return rc;
}
