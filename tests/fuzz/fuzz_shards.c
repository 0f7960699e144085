/* libFuzzer target for sharded checkpoints: the input is a model.safetensors.index.json, written
 * into a private model directory that also holds fixed shards (a.safetensors with tensors x and
 * y, b.safetensors with z, c.safetensors with another x), an empty file e.safetensors and a
 * subdirectory d. weft_safetensors_open_dir must refuse with a message, or give a tensor set in
 * which every tensor lies inside its shard's mapping (first and last byte read), is found again
 * by name, and sits in the shard the index names. Files live under $TMPDIR (or /tmp), removed at
 * exit; WEFT_FUZZ_VERBOSE prints each refusal. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "files/safetensors.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[512];
static const char *const shard_files[] = {"a.safetensors", "b.safetensors", "c.safetensors",
                                          "e.safetensors"};

static void path_of(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static void remove_all(void) {
    char p[700];
    for (size_t i = 0; i < sizeof(shard_files) / sizeof(shard_files[0]); i++) {
        path_of(p, sizeof(p), shard_files[i]);
        unlink(p);
    }
    path_of(p, sizeof(p), "model.safetensors.index.json");
    unlink(p);
    path_of(p, sizeof(p), "d");
    rmdir(p);
    rmdir(dir);
}

static void write_shard(const char *name, const char *const *tensors, size_t n) {
    weft_st_writer *w = weft_st_writer_new();
    weft_error err = fuzz_error();
    float v[6] = {1, 2, 3, 4, 5, 6};
    for (size_t i = 0; i < n; i++) {
        int64_t shape[2] = {2, (int64_t)(1 + i)};
        if (weft_st_writer_add(w, tensors[i], WEFT_DTYPE_F32, 2, shape, v,
                               (uint64_t)(2 * (1 + i)) * sizeof(float), &err) != WEFT_OK)
            __builtin_trap();
    }
    char p[700];
    path_of(p, sizeof(p), name);
    if (weft_st_writer_write(w, p, NULL, &err) != WEFT_OK) __builtin_trap();
    weft_st_writer_free(w);
}

static void setup(void) {
    if (!fuzz_private_dir(dir, sizeof(dir), "shards")) return;
    atexit(remove_all);
    static const char *const a[] = {"x", "y"}, *const b[] = {"z"}, *const c[] = {"x"};
    write_shard("a.safetensors", a, 2);
    write_shard("b.safetensors", b, 1);
    write_shard("c.safetensors", c, 1);
    char p[700];
    path_of(p, sizeof(p), "e.safetensors");
    fuzz_write_file(p, NULL, 0);
    path_of(p, sizeof(p), "d");
    if (mkdir(p, 0755)) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    char p[700];
    path_of(p, sizeof(p), "model.safetensors.index.json");
    fuzz_write_file(p, data, size);
    weft_safetensors *st = NULL;
    weft_error err = fuzz_error();
    if (weft_safetensors_open_dir(dir, &st, &err) != WEFT_OK) {
        if (st) __builtin_trap();
        fuzz_refused(&err);
        return 0;
    }
    /* accepted: the index must be a JSON object whose weight_map names exactly these tensors */
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) != weft_safetensors_count(st))
        __builtin_trap();
    fuzz_touch_tensors(st);
    for (size_t i = 0; i < weft_safetensors_count(st); i++) { /* each in the shard named */
        const weft_st_tensor *t = weft_safetensors_at(st, i);
        const char *want = json_string_value(json_object_get(map, t->name));
        const char *have = weft_safetensors_file_path(st, t->file);
        const char *slash = have ? strrchr(have, '/') : NULL;
        if (!want || !slash || strcmp(slash + 1, want)) __builtin_trap();
    }
    json_decref(root);
    weft_safetensors_close(st);
    return 0;
}
