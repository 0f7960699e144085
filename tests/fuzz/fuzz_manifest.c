/* libFuzzer target: an arbitrary buffer parsed as a plugin manifest and as a candidate
 * manifest, and (when short) as a semver version and range. What parses is exercised further
 * (copy, option building from the candidate's values) so that accepted documents are as well
 * covered as refused ones. Seeds: tests/fuzz/corpus/manifest/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/manifest.h"
#include "plugin/semver.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A fixed schema that candidate option values are checked against. */
static const char schema_text[] =
    "format: 1\nname: kv.paged\nkind: technique\nversion: 1.0.0\nabi: {min: 1, max: 1}\n"
    "library: libkv.so\nbackends: [cpu]\nslots: [kv]\noptions:\n"
    "  page_size: {type: int, default: 16, min: 16, max: 1024}\n"
    "  frac: {type: float, default: 0.5, min: 0, max: 1}\n"
    "  on: {type: bool, default: false}\n"
    "  layout: {type: enum, default: nhd, values: [nhd, hnd]}\n"
    "  label: {type: string, default: x}\n";

static weft_plugin_manifest *schema(void) {
    static weft_plugin_manifest *m;
    if (!m) {
        weft_error err;
        if (weft_plugin_manifest_parse(schema_text, sizeof(schema_text) - 1, "schema.yaml", &m,
                                       &err) != WEFT_OK)
            abort();
    }
    return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    weft_error err;
    memset(&err, 0, sizeof(err));
    const char *text = (const char *)data;

    weft_plugin_manifest *pm = NULL;
    if (weft_plugin_manifest_parse(text, size, "fuzz.yaml", &pm, &err) == WEFT_OK) {
        weft_plugin_manifest *copy = NULL;
        if (weft_plugin_manifest_dup(pm, &copy, &err) != WEFT_OK)
            abort(); /* a re-parse must pass */
        if (strcmp(copy->name, pm->name) || copy->n_options != pm->n_options) abort();
        weft_plugin_manifest_free(copy);
        weft_options opts;
        if (weft_options_build(pm, NULL, 0, "fuzz.yaml", "options", &opts, &err) != WEFT_OK)
            abort(); /* defaults always satisfy their own schema */
        weft_options_free(&opts);
    }

    weft_candidate_manifest *cm = NULL;
    if (weft_candidate_manifest_parse(text, size, "fuzz.yaml", &cm, &err) == WEFT_OK) {
        for (uint32_t i = 0; i < cm->n_techniques; i++) {
            weft_options opts;
            if (weft_options_build(schema(), cm->techniques[i].options, cm->techniques[i].n_options,
                                   "fuzz.yaml", "techniques[0].options", &opts, &err) == WEFT_OK)
                weft_options_free(&opts);
        }
        weft_candidate_manifest_free(cm);
    }
    weft_plugin_manifest_free(pm);

    if (size < 256) {
        char s[256];
        memcpy(s, data, size);
        s[size] = '\0';
        weft_semver v;
        weft_semver_range r;
        if (weft_semver_parse(s, &v, &err) == WEFT_OK) {
            char buf[WEFT_SEMVER_TEXT_MAX];
            weft_semver_format(&v, buf, sizeof(buf));
            weft_semver back;
            if (weft_semver_parse(buf, &back, &err) != WEFT_OK) abort();
            if (weft_semver_compare(&v, &back) != 0) abort();
        }
        if (weft_semver_range_parse(s, &r, &err) == WEFT_OK) {
            weft_semver probe;
            if (weft_semver_parse("1.2.3-rc.1", &probe, &err) == WEFT_OK)
                (void)weft_semver_satisfies(&r, &probe);
        }
    }
    return 0;
}
