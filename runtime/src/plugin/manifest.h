/* Plugin manifests (manifest.yaml in a bundle dir) and candidate manifests (manifests/NAME.yaml):
 * strict YAML parsing into plain structs. Parsing checks everything that one document can check
 * on its own (types, unknown and duplicate keys, required fields, semver and ranges, option
 * defaults inside their own schema); what needs other documents (a candidate's option values
 * against a plugin's schema, requires, conflicts) is the resolver's job (resolve.h). Every
 * error reads "FILE:LINE:COLUMN: FIELD.PATH: expected X, found Y". Anchors, aliases, tags,
 * several documents, more than WEFT_MANIFEST_MAX_BYTES of text or nesting deeper than
 * WEFT_MANIFEST_MAX_DEPTH are refused. docs/MANIFEST.md is the reference of both formats. */
#ifndef WEFT_PLUGIN_MANIFEST_H
#define WEFT_PLUGIN_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "plugin/semver.h"
#include "weft/plugin.h"

#define WEFT_MANIFEST_FORMAT 1 /* the format major this runtime reads */
#define WEFT_MANIFEST_MAX_BYTES (1u << 20)
#define WEFT_MANIFEST_MAX_DEPTH 16
#define WEFT_MANIFEST_MAX_NODES 20000
#define WEFT_MANIFEST_NAME_MAX 64    /* plugin, option and candidate names, with the NUL */
#define WEFT_MANIFEST_BACKEND_MAX 24 /* a backend name, with the NUL (= weft_op_impl) */
#define WEFT_MANIFEST_MAX_BACKENDS 8
#define WEFT_MANIFEST_MAX_SM 32
#define WEFT_MANIFEST_PATH_MAX 1024

/* A position in a manifest (1-based; 0 = not written). */
typedef struct weft_manifest_pos {
    uint32_t line;
    uint32_t column;
} weft_manifest_pos;

/* ---- plugin manifest ------------------------------------------------------------------- */
typedef struct weft_manifest_platform {
    char arch[16];       /* "x86_64", "aarch64"; "" = any */
    uint32_t cuda_major; /* 0 = no CUDA requirement */
    uint32_t n_sm;
    uint32_t sm[WEFT_MANIFEST_MAX_SM]; /* compute capabilities (90 = sm_90); empty = any */
} weft_manifest_platform;

/* requires / conflicts entries. */
typedef struct weft_manifest_dep {
    char name[WEFT_MANIFEST_NAME_MAX];
    weft_semver_range range; /* "*" when the manifest gave no version */
    weft_manifest_pos pos;
} weft_manifest_dep;

/* Schema types: ENUM is passed to the plugin as a WEFT_OPTION_STRING. */
typedef enum weft_option_schema_type {
    WEFT_SCHEMA_BOOL = 1,
    WEFT_SCHEMA_INT = 2,
    WEFT_SCHEMA_FLOAT = 3,
    WEFT_SCHEMA_STRING = 4,
    WEFT_SCHEMA_ENUM = 5,
} weft_option_schema_type;

typedef struct weft_option_schema {
    char name[WEFT_MANIFEST_NAME_MAX];
    uint32_t type; /* weft_option_schema_type */
    uint32_t has_min, has_max;
    int64_t imin, imax; /* int bounds (inclusive) */
    double fmin, fmax;  /* float bounds (inclusive) */
    /* The default, already typed: key = name, type = the weft_option_type passed to plugins,
     * s owned by the manifest. Every option has a default (the parser requires it). */
    weft_option def;
    uint32_t n_values;
    char **values; /* enum: the allowed strings */
    char *help;    /* "" when absent */
    weft_manifest_pos pos;
} weft_option_schema;

typedef struct weft_plugin_manifest {
    char path[WEFT_MANIFEST_PATH_MAX]; /* the file ("<buffer>" or the name given) */
    uint32_t format;
    char name[WEFT_MANIFEST_NAME_MAX];
    uint32_t kind; /* weft_plugin_kind */
    char version_text[WEFT_SEMVER_TEXT_MAX];
    weft_semver version;
    uint32_t abi_min, abi_max; /* plugin ABI versions the library speaks */
    char library[256];         /* a file name inside the bundle dir */
    char *summary;             /* "" when absent */
    uint32_t n_platforms;      /* 0 = any machine */
    weft_manifest_platform *platforms;
    uint32_t n_backends;
    char backends[WEFT_MANIFEST_MAX_BACKENDS][WEFT_MANIFEST_BACKEND_MAX];
    uint32_t slots; /* weft_slot bits */
    uint32_t n_requires;
    weft_manifest_dep *requires;
    uint32_t n_conflicts;
    weft_manifest_dep *conflicts;
    uint32_t n_after;
    char **after;      /* plugin names that run before it in chains */
    uint32_t services; /* bit (1u << weft_service_id) per needed service */
    uint32_t n_options;
    weft_option_schema *options;
    char *helps_when; /* "" when absent */
    uint32_t n_architectures;
    char **architectures; /* model plugins: HF architectures[] names */
    /* The text it was parsed from (owned, NUL-terminated), so a copy is a re-parse. */
    char *text;
    size_t text_len;
} weft_plugin_manifest;

/* Reads and parses path. *out is allocated; free with weft_plugin_manifest_free. */
weft_status weft_plugin_manifest_load(const char *path, weft_plugin_manifest **out,
                                      weft_error *err);
/* Parses len bytes of text (need not be NUL-terminated); name is used as the file in errors. */
weft_status weft_plugin_manifest_parse(const char *text, size_t len, const char *name,
                                       weft_plugin_manifest **out, weft_error *err);
/* A deep copy (re-parses m->text under m->path). */
weft_status weft_plugin_manifest_dup(const weft_plugin_manifest *m, weft_plugin_manifest **out,
                                     weft_error *err);
void weft_plugin_manifest_free(weft_plugin_manifest *m);

/* The schema entry of option key, or NULL. */
const weft_option_schema *weft_plugin_manifest_option(const weft_plugin_manifest *m,
                                                      const char *key);
/* 1 when the manifest's backends list names backend. */
int weft_plugin_manifest_has_backend(const weft_plugin_manifest *m, const char *backend);

/* ---- names shared by both formats --------------------------------------------------------- */
/* "backend", "model", "technique", "feature"; NULL for an unknown kind. */
const char *weft_plugin_kind_name(uint32_t kind);
/* The weft_slot bit of "kv", "pass", ...; 0 when unknown. */
uint32_t weft_slot_from_name(const char *name);
/* The name of one weft_slot bit; NULL when not exactly one known bit. */
const char *weft_slot_name(uint32_t bit);
/* 1 for slots that take a chain of providers (pass, ops, feature). */
int weft_slot_is_chain(uint32_t bit);
/* Writes "kv,pass" style lists of slot bits (sep between names); returns buf. */
char *weft_slots_format(uint32_t slots, const char *sep, char *buf, size_t cap);
/* The weft_service_id of "graph", "weights", ...; 0 when unknown. */
uint32_t weft_service_from_name(const char *name);
const char *weft_service_name(uint32_t id);
/* 1 when name is a valid plugin name: 1..63 chars of [a-z0-9._-], starting with [a-z0-9]. */
int weft_plugin_name_valid(const char *name);

/* ---- option values ------------------------------------------------------------------------ */
/* One option value as written in a candidate manifest or a lock: the raw scalar text plus
 * whether it was quoted, so that `8` and `"8"` stay different types. */
typedef struct weft_manifest_value {
    char key[WEFT_MANIFEST_NAME_MAX];
    char *text;      /* owned */
    uint32_t quoted; /* 1 for '...' or "..." scalars */
    weft_manifest_pos pos;
} weft_manifest_value;

/* Builds the options a plugin receives: every option of m's schema in schema order, set from
 * values where given, else its default. Refuses keys not in the schema and values outside it.
 * file and field (e.g. "techniques[0].options") prefix errors together with each value's pos:
 * "manifests/x.yaml:7:12: techniques[0].options.page_size: expected an integer in 1..1024,
 * found 0". out is one allocation: free with weft_options_free. */
weft_status weft_options_build(const weft_plugin_manifest *m, const weft_manifest_value *values,
                               uint32_t n_values, const char *file, const char *field,
                               weft_options *out, weft_error *err);
/* A self-contained copy (one allocation) of opts. */
weft_status weft_options_dup(const weft_options *src, weft_options *out, weft_error *err);
void weft_options_free(weft_options *opts);
/* The option named key, or NULL (matches weft_host_services.option). */
const weft_option *weft_options_find(const weft_options *opts, const char *key);

/* ---- candidate manifest ------------------------------------------------------------------- */
/* A plugin named by the candidate: backend, model_plugin or one technique. */
typedef struct weft_candidate_ref {
    char name[WEFT_MANIFEST_NAME_MAX]; /* "" = not given (model_plugin only) */
    weft_semver_range range;           /* "*" when not given */
    uint32_t n_options;
    weft_manifest_value *options;
    weft_manifest_pos pos; /* where the reference was written */
} weft_candidate_ref;

typedef struct weft_candidate_manifest {
    char path[WEFT_MANIFEST_PATH_MAX];
    uint32_t format;
    char candidate[WEFT_MANIFEST_NAME_MAX];
    char model[WEFT_MANIFEST_PATH_MAX]; /* a directory, a cache name or a hub id org/name */
    weft_manifest_pos model_pos;
    weft_candidate_ref backend;      /* `backend: cpu` or {name, version, options} */
    weft_candidate_ref model_plugin; /* name "" = chosen from config.json's architecture */
    uint32_t n_techniques;
    weft_candidate_ref *techniques;
    /* serving: 0 = unset (the engine's default) */
    uint32_t max_model_len;
    uint32_t max_concurrency;
    uint32_t threads;
    /* quality gate overrides */
    uint32_t has_mean_kl, has_p99_kl, has_ppl_ratio;
    double mean_kl, p99_kl, ppl_ratio;
    char *text; /* owned, NUL-terminated */
    size_t text_len;
} weft_candidate_manifest;

weft_status weft_candidate_manifest_load(const char *path, weft_candidate_manifest **out,
                                         weft_error *err);
weft_status weft_candidate_manifest_parse(const char *text, size_t len, const char *name,
                                          weft_candidate_manifest **out, weft_error *err);
void weft_candidate_manifest_free(weft_candidate_manifest *m);

#endif
