/* The stories260K fixture of the engine tests (included, not compiled alone): where the shared
 * data is (WEFT_SHARED_DIR at run time, else the build's ../shared), the llama2.c checkpoint
 * converted into a fresh temporary directory, a candidate manifest for it, and that directory
 * removed again with the files a test wrote beside the model. */
#ifndef WEFT_STORIES_FIXTURE_H
#define WEFT_STORIES_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files/llama2c.h"
#include "util/error.h"

static inline const char *fixture_shared_dir(void) {
    const char *d = getenv("WEFT_SHARED_DIR");
    return d && d[0] ? d : WEFT_SHARED_DIR;
}

/* stories260K in Hugging Face layout in a new directory /tmp/<prefix>-XXXXXX (dir receives its
 * name); 0, or -1 with the reason on stderr. */
static inline int stories_convert(char dir[64], const char *prefix) {
    snprintf(dir, 64, "/tmp/%s-XXXXXX", prefix);
    if (!mkdtemp(dir)) return -1;
    char model[1024], tok[1024];
    snprintf(model, sizeof(model), "%s/models/stories260K/stories260K.bin", fixture_shared_dir());
    snprintf(tok, sizeof(tok), "%s/models/stories260K/tok512.bin", fixture_shared_dir());
    weft_error err;
    weft_error_clear(&err);
    if (weft_llama2c_convert(model, tok, dir, &err) != WEFT_OK) {
        fprintf(stderr, "convert: %s\n", err.message);
        return -1;
    }
    return 0;
}

/* Writes a candidate manifest for the model directory `model` to path: backend "cpu" (one
 * thread) or "cuda" (device-side step inputs), the llama plugin, `techniques` as the body of a
 * YAML flow list ("" = none), max_model_len 512 and one request at a time. 0, or -1 when path
 * cannot be written. */
static inline int stories_manifest(const char *path, const char *candidate, const char *model,
                                   const char *backend, const char *techniques) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "format: 1\ncandidate: %s\nmodel: %s\n", candidate, model);
    if (!strcmp(backend, "cpu"))
        fprintf(f, "backend: {name: cpu, options: {threads: 1}}\nmodel_plugin: llama\n");
    else
        fprintf(f, "backend: %s\nmodel_plugin:\n  name: llama\n  options: {activation_dtype: "
                   "auto, device_inputs: true}\n",
                backend);
    fprintf(f, "techniques: [%s]\nserving: {max_model_len: 512, max_concurrency: 1, threads: 1}\n",
            techniques);
    return fclose(f) ? -1 : 0;
}

/* Removes the converted model's files, the extra file a test wrote there (or NULL), and dir. */
static inline void stories_remove(const char *dir, const char *extra) {
    static const char *const files[] = {"config.json", "generation_config.json",
                                        "model.safetensors", "tokenizer.json",
                                        "tokenizer_config.json"};
    char p[1200];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
        unlink(p);
    }
    if (extra) {
        snprintf(p, sizeof(p), "%s/%s", dir, extra);
        unlink(p);
    }
    rmdir(dir);
}

#endif
