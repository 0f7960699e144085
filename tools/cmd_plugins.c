/* `weft plugins`: lists the bundles on the plugin search path, shows one manifest, and checks
 * bundles. Listing reads manifests only (a bundle whose library is not built yet still lists
 * as ok); the check of a manifest against its binary lives in cmd_plugins_check.c and is
 * linked weakly, so a build without it still validates manifests and says what it skipped. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "plugin/manifest.h"
#include "plugin/registry.h"
#include "util/error.h"

/* argv[0] = "check"; the rest are bundle directories or manifest paths and options. */
__attribute__((weak)) int weft_cmd_plugins_check(int argc, char **argv);

#define MAX_PATHS 32

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft plugins <subcommand> [options]\n\n"
            "subcommands:\n"
            "  list   [--json] [--path DIR]...   bundles on the search path and their status\n"
            "  show   NAME [--path DIR]...       one plugin's manifest: slots, options, rules\n"
            "  check  [BUNDLE...] [--path DIR]   validate manifests (and binaries, when built)\n\n"
            "Search path: --path dirs, then WEFT_PLUGIN_PATH (colon-separated), then the build\n"
            "tree, the install prefix, and last the bundles of the source tree. Each dir is a\n"
            "bundle (holds manifest.yaml) or holds "
            "bundles one level down. `weft plugins <subcommand> --help` has details.\n");
}

static void usage_list(FILE *f) {
    fprintf(f, "usage: weft plugins list [--json] [--path DIR]...\n\n"
               "Lists every bundle found on the plugin search path with name, version, kind,\n"
               "slots, backends, status (ok, broken, shadowed) and bundle directory. Reads\n"
               "manifests only; libraries are not opened or checked.\n\n"
               "  --json       print JSON instead of a table (default: table)\n"
               "  --path DIR   search DIR first (repeatable; default: none)\n"
               "  --help       this text\n");
}

static void usage_show(FILE *f) {
    fprintf(f, "usage: weft plugins show NAME[@RANGE] [--path DIR]...\n\n"
               "Prints the manifest of the highest installed version of NAME (matching RANGE,\n"
               "e.g. kv.paged@^1.2; default: any version): slots, backends, platforms, rules and\n"
               "the option schema with defaults.\n\n"
               "  --path DIR   search DIR first (repeatable; default: none)\n"
               "  --help       this text\n");
}

static void usage_check(FILE *f) {
    fprintf(f, "usage: weft plugins check [BUNDLE...] [--path DIR]...\n\n"
               "Checks bundles: BUNDLE is a bundle directory or its manifest.yaml (default: every\n"
               "bundle on the search path). The manifest is validated strictly; when this build\n"
               "includes the binary check, the library is also loaded and its descriptor compared\n"
               "with the manifest. Exit status 1 when any bundle fails.\n\n"
               "  --path DIR   search DIR first (repeatable; default: none)\n"
               "  --help       this text\n");
}

/* Collects --path values; leaves other arguments in rest. Returns -1 on a usage error. */
static int parse_paths(int argc, char **argv, const char **paths, size_t *n_paths,
                       const char **rest, int *n_rest, int *json) {
    *n_paths = 0;
    *n_rest = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--path")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft plugins: --path needs a directory\n");
                return -1;
            }
            if (*n_paths >= MAX_PATHS) {
                fprintf(stderr, "weft plugins: at most %d --path options\n", MAX_PATHS);
                return -1;
            }
            paths[(*n_paths)++] = argv[++i];
        } else if (!strncmp(argv[i], "--path=", 7)) {
            if (*n_paths >= MAX_PATHS) {
                fprintf(stderr, "weft plugins: at most %d --path options\n", MAX_PATHS);
                return -1;
            }
            paths[(*n_paths)++] = argv[i] + 7;
        } else if (json && !strcmp(argv[i], "--json")) {
            *json = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "weft plugins %s: unknown option %s (see --help)\n", argv[0], argv[i]);
            return -1;
        } else {
            rest[(*n_rest)++] = argv[i];
        }
    }
    return 0;
}

static const char *entry_name(const weft_registry_entry *e) {
    if (e->manifest) return e->manifest->name;
    const char *base = strrchr(e->bundle_dir, '/');
    return base ? base + 1 : e->bundle_dir;
}

static int cmd_list(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        usage_list(stdout);
        return 0;
    }
    const char *paths[MAX_PATHS], *rest[64];
    size_t n_paths;
    int n_rest, json = 0;
    if (argc > 64 + 2 * MAX_PATHS + 2) {
        fprintf(stderr, "weft plugins list: too many arguments\n");
        return 2;
    }
    if (parse_paths(argc, argv, paths, &n_paths, rest, &n_rest, &json)) return 2;
    if (n_rest) {
        fprintf(stderr, "weft plugins list: unexpected argument %s (see --help)\n", rest[0]);
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_registry *reg = NULL;
    if (weft_registry_discover(paths, n_paths, 0, &reg, &err))
        return weft_cli_fail("plugins", &err);

    if (json) {
        json_t *root = json_object(), *list = json_array(), *dirs = json_array();
        for (size_t i = 0; i < reg->n_dirs; i++)
            json_array_append_new(dirs, json_string(reg->dirs[i]));
        for (size_t i = 0; i < reg->n; i++) {
            const weft_registry_entry *e = &reg->entries[i];
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(entry_name(e)));
            json_object_set_new(o, "status", json_string(weft_bundle_status_name(e->status)));
            json_object_set_new(o, "bundle_dir", json_string(e->bundle_dir));
            json_object_set_new(o, "origin", json_string(weft_registry_origin_name(e->origin)));
            if (e->manifest) {
                const weft_plugin_manifest *m = e->manifest;
                json_object_set_new(o, "version", json_string(m->version_text));
                json_object_set_new(o, "kind", json_string(weft_plugin_kind_name(m->kind)));
                json_t *slots = json_array(), *backends = json_array();
                for (uint32_t bit = 1; bit; bit <<= 1)
                    if ((m->slots & bit) && weft_slot_name(bit))
                        json_array_append_new(slots, json_string(weft_slot_name(bit)));
                for (uint32_t k = 0; k < m->n_backends; k++)
                    json_array_append_new(backends, json_string(m->backends[k]));
                json_object_set_new(o, "slots", slots);
                json_object_set_new(o, "backends", backends);
                json_object_set_new(o, "library", json_string(m->library));
                json_object_set_new(o, "summary", json_string(m->summary));
            }
            if (e->status == WEFT_BUNDLE_BROKEN)
                json_object_set_new(o, "error", json_string(e->error.message));
            if (e->status == WEFT_BUNDLE_SHADOWED && e->shadowed_by >= 0)
                json_object_set_new(o, "shadowed_by",
                                    json_string(reg->entries[e->shadowed_by].bundle_dir));
            json_array_append_new(list, o);
        }
        json_object_set_new(root, "search_path", dirs);
        json_object_set_new(root, "plugins", list);
        char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) printf("%s\n", text);
        free(text);
        json_decref(root);
    } else {
        if (!reg->n) {
            printf("no plugin bundles found; searched:");
            for (size_t i = 0; i < reg->n_dirs; i++)
                printf(" %s", reg->dirs[i]);
            printf("%s\n", reg->n_dirs ? ""
                                       : " (no existing directory: set WEFT_PLUGIN_PATH or "
                                         "pass --path)");
        } else {
            printf("%-24s %-10s %-9s %-22s %-9s %-8s %s\n", "NAME", "VERSION", "KIND", "SLOTS",
                   "BACKENDS", "STATUS", "BUNDLE");
        }
        for (size_t i = 0; i < reg->n; i++) {
            const weft_registry_entry *e = &reg->entries[i];
            char slots[160] = "-", backends[64] = "-";
            if (e->manifest) {
                weft_slots_format(e->manifest->slots, ",", slots, sizeof(slots));
                size_t used = 0;
                for (uint32_t k = 0; k < e->manifest->n_backends && used < sizeof(backends); k++)
                    used += (size_t)snprintf(backends + used, sizeof(backends) - used, "%s%s",
                                             k ? "," : "", e->manifest->backends[k]);
            }
            printf("%-24s %-10s %-9s %-22s %-9s %-8s %s\n", entry_name(e),
                   e->manifest ? e->manifest->version_text : "-",
                   e->manifest ? weft_plugin_kind_name(e->manifest->kind) : "-", slots, backends,
                   weft_bundle_status_name(e->status), e->bundle_dir);
            if (e->status == WEFT_BUNDLE_BROKEN) printf("    error: %s\n", e->error.message);
            if (e->status == WEFT_BUNDLE_SHADOWED && e->shadowed_by >= 0)
                printf("    shadowed by %s\n", reg->entries[e->shadowed_by].bundle_dir);
        }
    }
    weft_registry_free(reg);
    return 0;
}

static void print_option(const weft_option_schema *o) {
    static const char *types[] = {"?", "bool", "int", "float", "string", "enum"};
    printf("  %-20s %-6s default ", o->name, types[o->type <= 5 ? o->type : 0]);
    switch (o->type) {
    case WEFT_SCHEMA_BOOL:
        printf("%s", o->def.i ? "true" : "false");
        break;
    case WEFT_SCHEMA_INT:
        printf("%lld", (long long)o->def.i);
        break;
    case WEFT_SCHEMA_FLOAT:
        printf("%g", o->def.f);
        break;
    default:
        printf("%s", o->def.s ? o->def.s : "");
        break;
    }
    if (o->type == WEFT_SCHEMA_INT && (o->has_min || o->has_max)) {
        printf(", range ");
        if (o->has_min) printf("%lld", (long long)o->imin);
        printf("..");
        if (o->has_max) printf("%lld", (long long)o->imax);
    }
    if (o->type == WEFT_SCHEMA_FLOAT && (o->has_min || o->has_max)) {
        printf(", range ");
        if (o->has_min) printf("%g", o->fmin);
        printf("..");
        if (o->has_max) printf("%g", o->fmax);
    }
    if (o->type == WEFT_SCHEMA_ENUM) {
        printf(", one of ");
        for (uint32_t k = 0; k < o->n_values; k++)
            printf("%s%s", k ? "|" : "", o->values[k]);
    }
    printf("\n");
    if (o->help && o->help[0]) printf("  %-20s %s\n", "", o->help);
}

static void print_deps(const char *label, const weft_manifest_dep *d, uint32_t n) {
    if (!n) return;
    printf("%-14s", label);
    for (uint32_t i = 0; i < n; i++)
        printf("%s%s %s", i ? ", " : "", d[i].name, d[i].range.text);
    printf("\n");
}

static int cmd_show(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        usage_show(stdout);
        return 0;
    }
    const char *paths[MAX_PATHS], *rest[64];
    size_t n_paths;
    int n_rest;
    if (argc > 64 + 2 * MAX_PATHS + 2) {
        fprintf(stderr, "weft plugins show: too many arguments\n");
        return 2;
    }
    if (parse_paths(argc, argv, paths, &n_paths, rest, &n_rest, NULL)) return 2;
    if (n_rest != 1) {
        fprintf(stderr, "weft plugins show: expected one plugin NAME (see --help)\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    char name[WEFT_MANIFEST_NAME_MAX + 1];
    weft_semver_range range;
    weft_semver_range_any(&range);
    const char *at = strchr(rest[0], '@');
    snprintf(name, sizeof(name), "%.*s", (int)(at ? (size_t)(at - rest[0]) : strlen(rest[0])),
             rest[0]);
    if (at && weft_semver_range_parse(at + 1, &range, &err)) {
        weft_error_prefix(&err, "%s", rest[0]);
        return weft_cli_fail("plugins show", &err);
    }
    weft_registry *reg = NULL;
    if (weft_registry_discover(paths, n_paths, 0, &reg, &err))
        return weft_cli_fail("plugins show", &err);
    const weft_registry_entry *e = weft_registry_find(reg, name, &range);
    if (!e) {
        char near[200];
        int n = weft_registry_suggest(reg, name, 0, near, sizeof(near));
        fprintf(stderr, "weft plugins show: no plugin %s%s%s on the plugin path%s%s\n", name,
                at ? " matching " : "", at ? range.text : "", n ? ": did you mean " : "",
                n ? near : "");
        weft_registry_free(reg);
        return 1;
    }
    const weft_plugin_manifest *m = e->manifest;
    char slots[160];
    printf("%-14s%s %s\n", "plugin", m->name, m->version_text);
    printf("%-14s%s\n", "kind", weft_plugin_kind_name(m->kind));
    if (m->summary[0]) printf("%-14s%s\n", "summary", m->summary);
    printf("%-14s%s\n", "bundle", e->bundle_dir);
    printf("%-14s%s\n", "library", m->library);
    printf("%-14s%u..%u\n", "abi", m->abi_min, m->abi_max);
    printf("%-14s%s\n", "slots", weft_slots_format(m->slots, ", ", slots, sizeof(slots)));
    printf("%-14s", "backends");
    for (uint32_t i = 0; i < m->n_backends; i++)
        printf("%s%s", i ? ", " : "", m->backends[i]);
    printf("\n%-14s", "platforms");
    if (!m->n_platforms) printf("any");
    for (uint32_t i = 0; i < m->n_platforms; i++) {
        const weft_manifest_platform *p = &m->platforms[i];
        printf("%s%s", i ? "; " : "", p->arch[0] ? p->arch : "any arch");
        if (p->cuda_major) printf(" cuda %u", p->cuda_major);
        for (uint32_t k = 0; k < p->n_sm; k++)
            printf("%s%u", k ? "," : " sm ", p->sm[k]);
    }
    printf("\n");
    print_deps("requires", m->requires, m->n_requires);
    print_deps("conflicts", m->conflicts, m->n_conflicts);
    if (m->n_after) {
        printf("%-14s", "after");
        for (uint32_t i = 0; i < m->n_after; i++)
            printf("%s%s", i ? ", " : "", m->after[i]);
        printf("\n");
    }
    if (m->services) {
        printf("%-14s", "services");
        int first = 1;
        for (uint32_t id = 1; id <= 10; id++)
            if (m->services & (1u << id)) {
                printf("%s%s", first ? "" : ", ", weft_service_name(id));
                first = 0;
            }
        printf("\n");
    }
    if (m->n_architectures) {
        printf("%-14s", "architectures");
        for (uint32_t i = 0; i < m->n_architectures; i++)
            printf("%s%s", i ? ", " : "", m->architectures[i]);
        printf("\n");
    }
    if (m->helps_when[0]) printf("%-14s%s\n", "helps when", m->helps_when);
    if (m->n_options) {
        printf("options\n");
        for (uint32_t i = 0; i < m->n_options; i++)
            print_option(&m->options[i]);
    }
    weft_registry_free(reg);
    return 0;
}

/* Manifest-only check of one bundle directory or manifest path. */
static int check_one(const char *arg) {
    char path[2048];
    struct stat sb;
    if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(path, sizeof(path), "%s/manifest.yaml", arg);
    else
        snprintf(path, sizeof(path), "%s", arg);
    weft_error err;
    weft_error_clear(&err);
    weft_plugin_manifest *m = NULL;
    if (weft_plugin_manifest_load(path, &m, &err)) {
        printf("FAIL %s\n     %s\n", arg, err.message);
        return 1;
    }
    printf("ok   %s %s (%s): manifest valid\n", m->name, m->version_text, arg);
    weft_plugin_manifest_free(m);
    return 0;
}

static int cmd_check(int argc, char **argv) {
    /* the binary check, when linked, owns the whole subcommand (its --help included) */
    if (weft_cmd_plugins_check) return weft_cmd_plugins_check(argc, argv);
    if (weft_cli_wants_help(argc, argv)) {
        usage_check(stdout);
        return 0;
    }
    const char *paths[MAX_PATHS], *rest[256];
    size_t n_paths;
    int n_rest;
    if (argc > 256) {
        fprintf(stderr, "weft plugins check: too many arguments\n");
        return 2;
    }
    if (parse_paths(argc, argv, paths, &n_paths, rest, &n_rest, NULL)) return 2;
    int failed = 0, total = 0;
    if (n_rest) {
        for (int i = 0; i < n_rest; i++, total++)
            failed += check_one(rest[i]);
    } else {
        weft_error err;
        weft_error_clear(&err);
        weft_registry *reg = NULL;
        if (weft_registry_discover(paths, n_paths, 0, &reg, &err))
            return weft_cli_fail("plugins check", &err);
        for (size_t i = 0; i < reg->n; i++, total++) {
            const weft_registry_entry *e = &reg->entries[i];
            if (e->status == WEFT_BUNDLE_BROKEN) {
                printf("FAIL %s\n     %s\n", e->bundle_dir, e->error.message);
                failed++;
            } else {
                printf("ok   %s %s (%s)%s\n", e->manifest->name, e->manifest->version_text,
                       e->bundle_dir, e->status == WEFT_BUNDLE_SHADOWED ? ": shadowed" : "");
            }
        }
        if (!reg->n) printf("no plugin bundles found on the search path\n");
        weft_registry_free(reg);
    }
    printf("%d of %d bundle(s) passed; the binary check is not in this build, so libraries were "
           "not loaded\n",
           total - failed, total);
    return failed ? 1 : 0;
}

int weft_cmd_plugins(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(sub, "list")) return cmd_list(argc - 1, argv + 1);
    if (!strcmp(sub, "show")) return cmd_show(argc - 1, argv + 1);
    if (!strcmp(sub, "check")) return cmd_check(argc - 1, argv + 1);
    fprintf(stderr, "weft plugins: unknown subcommand '%s'\n\n", sub);
    usage(stderr);
    return 2;
}
