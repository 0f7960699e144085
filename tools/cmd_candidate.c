/* `weft candidate`: freeze a candidate manifest into a lock, check a lock against the files it
 * pins, diff two locks, and print a lock's final graph (that last one lives with the engine:
 * weft_cmd_candidate_graph, declared weak so a build without it says so). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plugin/lock.h"
#include "plugin/manifest.h"
#include "plugin/registry.h"
#include "plugin/resolve.h"
#include "util/error.h"

#define MAX_PATHS 32

__attribute__((weak)) int weft_cmd_candidate_graph(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(
        f, "usage: weft candidate <subcommand> ...\n\n"
           "  freeze MANIFEST [-o LOCK] [--path DIR]...  resolve and pin a candidate in a lock\n"
           "  check LOCK [--no-cache]                    re-hash every pinned file\n"
           "  diff A B                                   what differs between two locks\n"
           "  graph LOCK                                 print the candidate's final step graph\n\n"
           "A lock is JSON (docs/ABI.md, \"Locks\"): exact plugin versions, ABI ranges, the\n"
           "SHA-256 of every library, manifest and model file, validated options, chain order,\n"
           "serving defaults, and the candidate id (XXH3-128 of the canonical lock).\n");
}

static void print_line(void *ctx, const char *line) {
    fprintf((FILE *)ctx, "  %s\n", line);
}

static int cmd_freeze(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        fprintf(stdout,
                "usage: weft candidate freeze MANIFEST [-o LOCK] [--path DIR]...\n\n"
                "Resolves the candidate manifest against the plugin search path and writes a\n"
                "lock. The model's files (config.json, *.safetensors, tokenizer files,\n"
                "generation_config.json) are hashed when its directory exists locally, through\n"
                "the hash cache; otherwise the lock records the model as written and no files.\n\n"
                "  -o LOCK      output (default: <manifest dir>/frozen/<candidate>.lock)\n"
                "  --path DIR   search DIR first for plugins (repeatable)\n");
        return 0;
    }
    const char *manifest = NULL, *out = NULL, *paths[MAX_PATHS];
    size_t n_paths = 0;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--path") && i + 1 < argc) {
            if (n_paths == MAX_PATHS) {
                fprintf(stderr, "weft candidate freeze: at most %d --path options\n", MAX_PATHS);
                return 2;
            }
            paths[n_paths++] = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "weft candidate freeze: unknown or incomplete option %s\n", argv[i]);
            return 2;
        } else if (!manifest) {
            manifest = argv[i];
        } else {
            fprintf(stderr, "weft candidate freeze: expected one MANIFEST, found %s too\n",
                    argv[i]);
            return 2;
        }
    }
    if (!manifest) {
        fprintf(stderr, "weft candidate freeze: expected a candidate MANIFEST (see --help)\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_candidate_manifest *cm = NULL;
    if (weft_candidate_manifest_load(manifest, &cm, &err) != WEFT_OK)
        return weft_cli_fail("candidate freeze", &err);
    weft_resolve_options ro;
    memset(&ro, 0, sizeof(ro));
    ro.size = sizeof(ro);
    char model_dir[WEFT_MANIFEST_PATH_MAX];
    weft_error merr;
    weft_error_clear(&merr);
    if (weft_model_dir_resolve(cm->model, cm->path, model_dir, sizeof(model_dir), &merr) ==
        WEFT_ERR_NOT_FOUND) {
        /* not local: pin the plugins, record the model as written, hash no model file */
        ro.flags |= WEFT_RESOLVE_NO_MODEL;
        fprintf(stderr, "weft candidate freeze: note: %s; the lock pins no model files\n",
                merr.message);
    }
    weft_registry *reg = NULL;
    weft_resolved_candidate *rc = NULL;
    weft_lock *lock = NULL;
    int rc_exit = 0;
    if (weft_registry_discover(paths, n_paths, 0, &reg, &err) != WEFT_OK ||
        weft_resolve(cm, reg, &ro, &rc, &err) != WEFT_OK ||
        weft_lock_freeze(rc, &lock, &err) != WEFT_OK) {
        rc_exit = weft_cli_fail("candidate freeze", &err);
        goto done;
    }
    char path[WEFT_LOCK_PATH_MAX];
    if (out)
        snprintf(path, sizeof(path), "%s", out);
    else
        weft_lock_default_path(manifest, lock->candidate, path, sizeof(path));
    if (weft_lock_write(lock, path, &err) != WEFT_OK) {
        rc_exit = weft_cli_fail("candidate freeze", &err);
        goto done;
    }
    printf("froze %s into %s\nid %s\n", lock->candidate, path, lock->id);
    for (uint32_t i = 0; i < lock->n_plugins; i++)
        printf("  %-10s %s %s\n", weft_lock_role_name(lock->plugins[i].role), lock->plugins[i].name,
               lock->plugins[i].version);
    printf("  model      %s (%u file(s) pinned)\n",
           lock->model_dir[0] ? lock->model_dir : lock->model, (unsigned)lock->n_model_files);
done:
    weft_lock_free(lock);
    weft_resolved_free(rc);
    weft_registry_free(reg);
    weft_candidate_manifest_free(cm);
    return rc_exit;
}

static int cmd_check(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        fprintf(stdout, "usage: weft candidate check LOCK [--no-cache]\n\n"
                        "Re-hashes every file the lock pins (candidate manifest, each plugin's\n"
                        "library and manifest, the model files) and checks each plugin's ABI\n"
                        "range against this runtime's. Every difference is listed; exit status\n"
                        "1 when there is any.\n\n"
                        "  --no-cache   re-hash model files even when the hash cache knows them\n");
        return 0;
    }
    const char *path = NULL;
    uint32_t flags = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-cache")) {
            flags |= WEFT_LOCK_CHECK_NO_CACHE;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "weft candidate check: unexpected argument %s (see --help)\n", argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        fprintf(stderr, "weft candidate check: expected a LOCK (see --help)\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_lock *l = NULL;
    if (weft_lock_load(path, &l, &err) != WEFT_OK) return weft_cli_fail("candidate check", &err);
    uint32_t problems = 0;
    printf("lock %s (candidate %s, id %s)\n", path, l->candidate, l->id);
    weft_status st = weft_lock_check(l, flags, print_line, stdout, &problems, &err);
    uint32_t files = 1 + 2 * l->n_plugins + l->n_model_files;
    weft_lock_free(l);
    if (st != WEFT_OK) return weft_cli_fail("candidate check", &err);
    if (problems) {
        printf("%u problem(s): this lock does not describe the files on disk\n",
               (unsigned)problems);
        return 1;
    }
    printf("ok: %u file(s) match the lock\n", (unsigned)files);
    return 0;
}

static int cmd_diff(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        fprintf(stdout, "usage: weft candidate diff A B\n\n"
                        "Lists what differs from lock A to lock B: plugins added or removed,\n"
                        "versions, ABI ranges, chain order, options, library and manifest hashes,\n"
                        "model and model files, serving defaults. Exit status 0 when the locks\n"
                        "describe the same candidate, 1 when they differ.\n");
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "weft candidate diff: expected two locks A B (see --help)\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_lock *a = NULL, *b = NULL;
    if (weft_lock_load(argv[1], &a, &err) != WEFT_OK) return weft_cli_fail("candidate diff", &err);
    if (weft_lock_load(argv[2], &b, &err) != WEFT_OK) {
        weft_lock_free(a);
        return weft_cli_fail("candidate diff", &err);
    }
    uint32_t n = 0;
    int same = !strcmp(a->id, b->id);
    if (same) {
        printf("same candidate: id %s\n", a->id);
    } else {
        printf("id %s -> %s\n", a->id, b->id);
        weft_lock_diff(a, b, print_line, stdout, &n, &err);
    }
    weft_lock_free(a);
    weft_lock_free(b);
    return same ? 0 : 1;
}

int weft_cmd_candidate(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(sub, "freeze")) return cmd_freeze(argc - 1, argv + 1);
    if (!strcmp(sub, "check")) return cmd_check(argc - 1, argv + 1);
    if (!strcmp(sub, "diff")) return cmd_diff(argc - 1, argv + 1);
    if (!strcmp(sub, "graph")) {
        if (weft_cmd_candidate_graph) return weft_cmd_candidate_graph(argc - 1, argv + 1);
        fprintf(stderr, "weft candidate graph: not in this build (the engine provides it)\n");
        return 2;
    }
    fprintf(stderr, "weft candidate: unknown subcommand '%s'\n\n", sub);
    usage(stderr);
    return 2;
}
