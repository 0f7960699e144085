/* `weft runs`: run records, the memory of a search for a faster engine. runs/NAME/ holds one
 * folder per candidate, in the order they were tried (NN-<candidate>), each with what made it
 * and what it scored: manifest.yaml, candidate.lock, result.json (weft eval run), plan.yaml (the
 * plan made from this result, for the next candidate) and check.json (weft plan check of the
 * previous plan against this result). `weft runs show NAME` prints the history: what each
 * candidate changed against the one before, what the plan forecast, what was measured, gates. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "cli.h"
#include "plan/plan.h"
#include "plugin/lock.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f, "usage: weft runs new NAME [--dir DIR]\n"
               "       weft runs add NAME --lock LOCK [--result R] [--plan P] [--check C] "
               "[--dir DIR]\n"
               "       weft runs show NAME [--dir DIR] [--json]\n"
               "  new   creates DIR/NAME/ (DIR defaults to ./runs)\n"
               "  add   a folder NN-<candidate>/ with the lock, its manifest and the files given\n"
               "  show  the history as a table: changed, forecast, measured, gates\n");
}

static int valid_name(const char *s) {
    if (!s || !*s || strlen(s) > 100 || s[0] == '.') return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return 0;
    return 1;
}

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb");
    if (!a) return -1;
    FILE *b = fopen(to, "wb");
    if (!b) {
        fclose(a);
        return -1;
    }
    char buf[65536];
    size_t n;
    int bad = 0;
    while ((n = fread(buf, 1, sizeof(buf), a)) > 0)
        if (fwrite(buf, 1, n, b) != n) bad = 1;
    if (ferror(a)) bad = 1;
    fclose(a);
    if (fclose(b)) bad = 1;
    return bad ? -1 : 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The candidate folders of a run, sorted (NN- prefixes keep the order). */
static char **list_folders(const char *dir, size_t *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **v = NULL;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[2048];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) || !S_ISDIR(st.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, cap * sizeof(char *));
            if (!nv) break;
            v = nv;
        }
        v[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    if (*n) qsort(v, *n, sizeof(char *), cmp_str);
    return v;
}

static int runs_new(const char *root, const char *name) {
    char dir[2048];
    mkdir(root, 0755);
    snprintf(dir, sizeof(dir), "%s/%s", root, name);
    if (mkdir(dir, 0755)) {
        fprintf(stderr, "weft runs new: %s: %s\n", dir,
                errno == EEXIST ? "already exists" : strerror(errno));
        return 1;
    }
    char p[2100], when[40];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(p, sizeof(p), "%s/run.json", dir);
    json_t *o = json_pack("{s:s, s:s, s:i}", "name", name, "created", when, "format", 1);
    int rc = json_dump_file(o, p, JSON_INDENT(2));
    json_decref(o);
    if (rc) {
        fprintf(stderr, "weft runs new: %s: cannot write\n", p);
        return 1;
    }
    printf("%s\n", dir);
    return 0;
}

static int runs_add(const char *root, const char *name, const char *lock_path, const char *result,
                    const char *plan, const char *check) {
    char dir[2048];
    snprintf(dir, sizeof(dir), "%s/%s", root, name);
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "weft runs add: %s: no such run (weft runs new %s)\n", dir, name);
        return 1;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_lock *l = NULL;
    if (weft_lock_load(lock_path, &l, &err)) return weft_cli_fail("runs add", &err);
    size_t n = 0;
    char **fs = list_folders(dir, &n);
    for (size_t i = 0; i < n; i++)
        free(fs[i]);
    free(fs);
    char sub[2300];
    snprintf(sub, sizeof(sub), "%s/%02zu-%s", dir, n + 1, l->candidate);
    if (mkdir(sub, 0755)) {
        fprintf(stderr, "weft runs add: %s: %s\n", sub, strerror(errno));
        weft_lock_free(l);
        return 1;
    }
    struct {
        const char *from, *to;
    } files[] = {{lock_path, "candidate.lock"},
                 {l->source.path, "manifest.yaml"},
                 {result, "result.json"},
                 {plan, "plan.yaml"},
                 {check, "check.json"}};
    int rc = 0;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (!files[i].from || !*files[i].from) continue;
        char to[2400];
        snprintf(to, sizeof(to), "%s/%s", sub, files[i].to);
        if (copy_file(files[i].from, to)) {
            fprintf(stderr, "weft runs add: cannot copy %s to %s: %s\n", files[i].from, to,
                    strerror(errno));
            rc = 1;
        }
    }
    weft_lock_free(l);
    if (!rc) printf("%s\n", sub);
    return rc;
}

static json_t *load_json(const char *dir, const char *file) {
    char p[2400];
    snprintf(p, sizeof(p), "%s/%s", dir, file);
    json_error_t je;
    return json_load_file(p, 0, &je);
}

/* The plugin names of a folder's candidate: from its result, else from its lock. */
static json_t *plugins_of(const char *dir, json_t *result) {
    json_t *a = json_array();
    size_t i;
    json_t *p;
    json_t *from = json_object_get(json_object_get(result, "candidate"), "plugins");
    if (!from) {
        json_t *lk = load_json(dir, "candidate.lock");
        json_array_foreach(json_object_get(lk, "plugins"), i, p)
            json_array_append(a, json_object_get(p, "name"));
        json_decref(lk);
        return a;
    }
    json_array_foreach(from, i, p) json_array_append(a, json_object_get(p, "name"));
    return a;
}

static int in_list(json_t *a, const char *s) {
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) if (!strcmp(json_string_value(e), s)) return 1;
    return 0;
}

static void cat(char *buf, size_t cap, const char *fmt, const char *s) {
    size_t l = strlen(buf);
    if (l < cap) snprintf(buf + l, cap - l, fmt, s);
}

static int runs_show(const char *root, const char *name, int as_json) {
    char dir[2048];
    snprintf(dir, sizeof(dir), "%s/%s", root, name);
    size_t n = 0;
    char **fs = list_folders(dir, &n);
    if (!fs && n == 0) {
        struct stat st;
        if (stat(dir, &st)) {
            fprintf(stderr, "weft runs show: %s: no such run\n", dir);
            return 1;
        }
    }
    json_t *rows = json_array(), *prev_plugins = NULL, *prev_plan = NULL;
    for (size_t i = 0; i < n; i++) {
        char sub[2300];
        snprintf(sub, sizeof(sub), "%s/%s", dir, fs[i]);
        json_t *res = load_json(sub, "result.json"), *chk = load_json(sub, "check.json");
        json_t *plugins = plugins_of(sub, res);
        char changed[512] = "", forecast[512] = "", measured[512] = "", gates[512] = "";
        /* changed: plugins added (+) and removed (-) against the previous candidate */
        if (!prev_plugins)
            snprintf(changed, sizeof(changed), "(first)");
        else {
            size_t k;
            json_t *e;
            json_array_foreach(plugins, k, e) if (!in_list(prev_plugins, json_string_value(e)))
                cat(changed, sizeof(changed), "+%s ", json_string_value(e));
            json_array_foreach(prev_plugins, k, e) if (!in_list(plugins, json_string_value(e)))
                cat(changed, sizeof(changed), "-%s ", json_string_value(e));
            if (!changed[0]) snprintf(changed, sizeof(changed), "(same plugins)");
        }
        /* forecast: the previous folder's plan */
        size_t k;
        json_t *lv;
        json_array_foreach(json_object_get(prev_plan, "levers"), k, lv) {
            json_t *f = json_object_get(lv, "forecast");
            char one[160];
            snprintf(one, sizeof(one), "%s x%.3g ", json_string_value(json_object_get(lv, "name")),
                     json_number_value(json_object_get(f, "expected")));
            cat(forecast, sizeof(forecast), "%s", one);
        }
        if (!prev_plan) snprintf(forecast, sizeof(forecast), "-");
        /* measured: headline fractions, and speed-ups when a check exists */
        json_t *kp = json_object_get(json_object_get(res, "summary"), "kpis");
        if (!res) snprintf(measured, sizeof(measured), "(no result)");
        const char *hk[] = {"decode", "prefill"};
        for (int q = 0; res && q < 2; q++) {
            json_t *v = json_object_get(kp, hk[q]);
            char one[120];
            if (json_is_number(json_object_get(v, "fraction")))
                snprintf(one, sizeof(one), "%s %.3f+-%.3f ", hk[q],
                         json_number_value(json_object_get(v, "fraction")),
                         json_number_value(json_object_get(v, "noise")));
            else
                snprintf(one, sizeof(one), "%s - ", hk[q]);
            cat(measured, sizeof(measured), "%s", one);
            json_t *s =
                json_object_get(json_object_get(json_object_get(chk, "kpis"), hk[q]), "speedup");
            if (json_is_number(s)) {
                snprintf(one, sizeof(one), "(x%.3f) ", json_number_value(s));
                cat(measured, sizeof(measured), "%s", one);
            }
        }
        if (res) {
            json_t *failed = json_object_get(json_object_get(res, "summary"), "failed_gates");
            if (json_array_size(failed) == 0)
                snprintf(gates, sizeof(gates), "pass (%zu)",
                         json_array_size(json_object_get(res, "gates")));
            else {
                snprintf(gates, sizeof(gates), "FAIL: ");
                json_t *e;
                json_array_foreach(failed, k, e)
                    cat(gates, sizeof(gates), "%s ", json_string_value(e));
            }
        } else {
            snprintf(gates, sizeof(gates), "-");
        }
        const char *cid =
            json_string_value(json_object_get(json_object_get(res, "candidate"), "id"));
        json_array_append_new(rows, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "folder", fs[i],
                                              "id", cid ? cid : "", "changed", changed, "forecast",
                                              forecast, "measured", measured, "gates", gates));
        json_decref(prev_plugins);
        prev_plugins = plugins;
        json_decref(prev_plan);
        char pp[2400];
        snprintf(pp, sizeof(pp), "%s/plan.yaml", sub);
        weft_error err;
        weft_error_clear(&err);
        prev_plan = NULL;
        struct stat st;
        if (!stat(pp, &st) && weft_plan_yaml_load(pp, &prev_plan, &err))
            fprintf(stderr, "weft runs show: %s: %s\n", pp, err.message);
        json_decref(res);
        json_decref(chk);
        free(fs[i]);
    }
    free(fs);
    json_decref(prev_plugins);
    json_decref(prev_plan);
    if (as_json) {
        char *s = json_dumps(rows, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
    } else {
        printf("run %s (%zu candidates)\n", dir, n);
        printf("%-24s %-28s %-30s %-40s %s\n", "candidate", "changed", "forecast", "measured",
               "gates");
        size_t i;
        json_t *r;
        json_array_foreach(rows, i, r)
            printf("%-24s %-28s %-30s %-40s %s\n", json_string_value(json_object_get(r, "folder")),
                   json_string_value(json_object_get(r, "changed")),
                   json_string_value(json_object_get(r, "forecast")),
                   json_string_value(json_object_get(r, "measured")),
                   json_string_value(json_object_get(r, "gates")));
    }
    json_decref(rows);
    return 0;
}

int weft_cmd_runs(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    static const struct option opts[] = {
        {"dir", required_argument, 0, 'd'},    {"lock", required_argument, 0, 'l'},
        {"result", required_argument, 0, 'r'}, {"plan", required_argument, 0, 'p'},
        {"check", required_argument, 0, 'c'},  {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    const char *root = "runs", *lock = NULL, *result = NULL, *plan = NULL, *check = NULL;
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc - 1, argv + 1, "d:l:r:p:c:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            root = optarg;
            break;
        case 'l':
            lock = optarg;
            break;
        case 'r':
            result = optarg;
            break;
        case 'p':
            plan = optarg;
            break;
        case 'c':
            check = optarg;
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
    const char *name = optind < argc - 1 ? argv[1 + optind] : NULL;
    if (!valid_name(name)) {
        fprintf(stderr, "weft runs %s: expected a NAME of letters, digits, '-', '_' and '.'\n",
                sub);
        return 2;
    }
    if (!strcmp(sub, "new")) return runs_new(root, name);
    if (!strcmp(sub, "show")) return runs_show(root, name, json);
    if (!strcmp(sub, "add")) {
        if (!lock) {
            fprintf(stderr, "weft runs add: --lock LOCK is required\n");
            return 2;
        }
        return runs_add(root, name, lock, result, plan, check);
    }
    fprintf(stderr, "weft runs: unknown subcommand '%s'\n", sub);
    usage(stderr);
    return 2;
}
