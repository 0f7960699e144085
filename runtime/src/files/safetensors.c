/* safetensors: maps checkpoint files read-only and checks every byte of their JSON header before
 * any tensor is handed out (header length bounds, dtype, shape overflow, offsets inside the data
 * section and matching the shape, no overlaps), joins the shards of a
 * model.safetensors.index.json, and writes files in the same format, either from copied buffers
 * or streamed chunk by chunk through a callback so that multi-gigabyte files never sit in
 * memory. The rules are listed in docs/MODEL_FILES.md. */
#include "files/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/file.h"

#define SRC "safetensors"
/* The reference implementation refuses headers above 100 MB; so do we. */
#define HEADER_MAX 100000000ull
#define INDEX_MAX (64ull << 20)
/* Chunk handed to a fill callback when streaming a tensor. */
#define FILL_CHUNK (16ull << 20)

typedef struct st_file {
    char *path;
    const uint8_t *base;
    size_t len;
    int mapped;
} st_file;

struct weft_safetensors {
    st_file *files;
    size_t n_files;
    weft_st_tensor *tensors; /* sorted by name once open */
    size_t n_tensors, cap_tensors;
    json_t *metadata; /* merged __metadata__ (first file wins on a repeated key) */
};

/* ---- dtypes ------------------------------------------------------------------------------ */
static const struct {
    uint32_t dtype;
    const char *name;
    size_t size;
} dtype_table[] = {
    {WEFT_DTYPE_F64, "F64", 8},         {WEFT_DTYPE_F32, "F32", 4},
    {WEFT_DTYPE_F16, "F16", 2},         {WEFT_DTYPE_BF16, "BF16", 2},
    {WEFT_DTYPE_I64, "I64", 8},         {WEFT_DTYPE_I32, "I32", 4},
    {WEFT_DTYPE_I16, "I16", 2},         {WEFT_DTYPE_I8, "I8", 1},
    {WEFT_DTYPE_U8, "U8", 1},           {WEFT_DTYPE_BOOL, "BOOL", 1},
    {WEFT_DTYPE_F8_E4M3, "F8_E4M3", 1}, {WEFT_DTYPE_F8_E5M2, "F8_E5M2", 1},
};
#define N_DTYPES (sizeof(dtype_table) / sizeof(dtype_table[0]))

size_t weft_dtype_size(uint32_t dtype) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dtype == dtype) return dtype_table[i].size;
    return 0;
}

const char *weft_dtype_name(uint32_t dtype) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dtype == dtype) return dtype_table[i].name;
    switch (dtype) {
    case WEFT_DTYPE_Q8_0:
        return "Q8_0";
    case WEFT_DTYPE_Q4_K:
        return "Q4_K";
    case WEFT_DTYPE_Q4_G128:
        return "Q4_G128";
    default:
        return "INVALID";
    }
}

uint32_t weft_dtype_from_name(const char *name) {
    if (!name) return WEFT_DTYPE_INVALID;
    for (size_t i = 0; i < N_DTYPES; i++)
        if (!strcmp(dtype_table[i].name, name)) return dtype_table[i].dtype;
    return WEFT_DTYPE_INVALID;
}

/* Element count and byte size with every multiplication checked; 0 = overflow or bad input. */
static int shape_bytes(uint32_t dtype, uint32_t rank, const int64_t *shape, uint64_t *bytes) {
    size_t esize = weft_dtype_size(dtype);
    if (!esize || rank > WEFT_MAX_DIMS || (rank && !shape)) return 0;
    uint64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (shape[i] < 0) return 0;
        if (__builtin_mul_overflow(n, (uint64_t)shape[i], &n)) return 0;
    }
    if (__builtin_mul_overflow(n, (uint64_t)esize, &n)) return 0;
    if (n > (uint64_t)INT64_MAX) return 0;
    *bytes = n;
    return 1;
}

uint64_t weft_dtype_bytes(uint32_t dtype, uint32_t rank, const int64_t *shape) {
    uint64_t b = 0;
    return shape_bytes(dtype, rank, shape, &b) ? b : 0;
}

/* ---- 16-bit floats ----------------------------------------------------------------------- */
static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static float bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

float weft_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t weft_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    /* A NaN must stay a NaN even when its payload sits in the dropped bits: force quiet. */
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float weft_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (!man) return bits_f32(sign);
        /* Subnormal: value = man * 2^-24, exact in f32. */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t weft_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) /* Inf stays Inf; NaN keeps its top payload bits and is made quiet */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 112; /* rebias 127 -> 15 */
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* Result is subnormal (or zero): mantissa units of 2^-24. */
        if (e < -10) return sign;
        uint32_t full = man | 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t m = full >> shift;
        uint32_t rem = full & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (m & 1u))) m++; /* 1024 carries into the exponent */
        return (uint16_t)(sign | m);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may round up to Inf: correct */
    return (uint16_t)(sign | h);
}

/* ---- reading ----------------------------------------------------------------------------- */
static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static weft_status push_tensor(weft_safetensors *st, weft_error *err) {
    if (st->n_tensors < st->cap_tensors) return WEFT_OK;
    size_t cap = st->cap_tensors ? st->cap_tensors * 2 : 64;
    weft_st_tensor *t = realloc(st->tensors, cap * sizeof(*t));
    if (!t) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory for the tensor table");
    st->tensors = t;
    st->cap_tensors = cap;
    return WEFT_OK;
}

typedef struct st_range {
    uint64_t b, e;
    size_t idx; /* into st->tensors */
} st_range;

static int cmp_by_begin(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    if (x->e != y->e) return x->e < y->e ? -1 : 1;
    return 0;
}

/* Formats a shape as "[5, 6]" for messages. */
static void fmt_shape(char *buf, size_t n, uint32_t rank, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (uint32_t i = 0; i < rank && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static weft_status parse_metadata(weft_safetensors *st, json_t *meta, const char *name,
                                  weft_error *err) {
    if (!json_is_object(meta))
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: __metadata__: expected an object of strings, got a %s", name,
                              json_is_array(meta) ? "list" : "non-object value");
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                  "%s: __metadata__: key '%.80s': expected a string value", name,
                                  k);
        if (!json_object_get(st->metadata, k)) json_object_set(st->metadata, k, v);
    }
    return WEFT_OK;
}

/* One tensor entry of a header: dtype, shape and data_offsets checked against data_len. */
static weft_status parse_entry(const char *name, const char *key, json_t *v, uint64_t data_len,
                               weft_st_tensor *t, uint64_t *begin, weft_error *err) {
    if (!json_is_object(v))
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: tensor '%.80s': expected an object with dtype, shape and "
                              "data_offsets",
                              name, key);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: tensor '%.80s': dtype: expected a string such as \"F32\"", name,
                              key);
    t->dtype = weft_dtype_from_name(json_string_value(jd));
    if (t->dtype == WEFT_DTYPE_INVALID)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: tensor '%.80s': unknown dtype '%.32s' (expected F64, F32, F16, "
                              "BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3 or F8_E5M2)",
                              name, key, json_string_value(jd));
    if (!json_is_array(js))
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: tensor '%.80s': shape: expected a list of integers", name, key);
    size_t rank = json_array_size(js);
    if (rank > WEFT_MAX_DIMS)
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, SRC,
                              "%s: tensor '%.80s': shape has %zu dimensions, at most %d supported",
                              name, key, rank, WEFT_MAX_DIMS);
    t->rank = (uint32_t)rank;
    for (size_t i = 0; i < rank; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                  "%s: tensor '%.80s': shape[%zu]: expected a non-negative "
                                  "integer",
                                  name, key, i);
        t->shape[i] = (int64_t)json_integer_value(d);
    }
    for (size_t i = rank; i < WEFT_MAX_DIMS; i++)
        t->shape[i] = 0;
    char sh[128];
    fmt_shape(sh, sizeof(sh), t->rank, t->shape);
    uint64_t need;
    if (!shape_bytes(t->dtype, t->rank, t->shape, &need))
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: tensor '%.80s': %s %s overflows 64-bit byte counts", name, key,
                              weft_dtype_name(t->dtype), sh);
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)) || json_integer_value(json_array_get(jo, 0)) < 0 ||
        json_integer_value(json_array_get(jo, 1)) < 0)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: tensor '%.80s': data_offsets: expected [begin, end], two "
                              "non-negative integers",
                              name, key);
    uint64_t b = (uint64_t)json_integer_value(json_array_get(jo, 0));
    uint64_t e = (uint64_t)json_integer_value(json_array_get(jo, 1));
    if (e < b)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: tensor '%.80s': data_offsets [%llu, %llu]: end before begin",
                              name, key, (unsigned long long)b, (unsigned long long)e);
    if (e > data_len)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: tensor '%.80s': data_offsets [%llu, %llu] run past the data "
                              "section of %llu bytes (truncated file?)",
                              name, key, (unsigned long long)b, (unsigned long long)e,
                              (unsigned long long)data_len);
    if (e - b != need)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: tensor '%.80s': data_offsets [%llu, %llu] but %s %s needs "
                              "%llu bytes",
                              name, key, (unsigned long long)b, (unsigned long long)e,
                              weft_dtype_name(t->dtype), sh, (unsigned long long)need);
    t->bytes = need;
    *begin = b;
    return WEFT_OK;
}

/* Parses one file image and appends its tensors (tagged with file index fi) to st. */
static weft_status parse_image(weft_safetensors *st, uint32_t fi, const uint8_t *buf, size_t len,
                               const char *name, weft_error *err) {
    if (len < 8)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: truncated: %zu bytes, expected at least the 8-byte header "
                              "length",
                              name, len);
    uint64_t hlen = le64(buf);
    if (hlen > HEADER_MAX)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: header length %llu exceeds the limit of %llu bytes", name,
                              (unsigned long long)hlen, HEADER_MAX);
    if (hlen > len - 8)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: header length %llu but only %zu bytes follow it (truncated "
                              "file?)",
                              name, (unsigned long long)hlen, len - 8);
    if (hlen < 2 || buf[8] != '{')
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: header: expected a JSON object starting with '{'", name);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: header is not valid JSON: %s (byte %d)", name, jerr.text,
                              jerr.position);
    weft_status rc = WEFT_OK;
    uint64_t data_len = (uint64_t)(len - 8 - hlen);
    const uint8_t *data = buf + 8 + hlen;
    size_t n_keys = json_object_size(root);
    st_range *ranges = NULL;
    if (!json_is_object(root)) {
        rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: header: expected a JSON object", name);
        goto done;
    }
    ranges = malloc((n_keys ? n_keys : 1) * sizeof(*ranges));
    if (!ranges) {
        rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s: out of memory", name);
        goto done;
    }
    size_t n_ranges = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if ((rc = parse_metadata(st, v, name, err))) goto done;
            continue;
        }
        if ((rc = push_tensor(st, err))) goto done;
        weft_st_tensor *t = &st->tensors[st->n_tensors];
        memset(t, 0, sizeof(*t));
        uint64_t begin = 0;
        if ((rc = parse_entry(name, key, v, data_len, t, &begin, err))) goto done;
        char *nm = strdup(key);
        if (!nm) {
            rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s: out of memory", name);
            goto done;
        }
        t->name = nm;
        t->data = data + begin;
        t->file = fi;
        st->n_tensors++;
        if (t->bytes) {
            ranges[n_ranges].b = begin;
            ranges[n_ranges].e = begin + t->bytes;
            ranges[n_ranges].idx = st->n_tensors - 1;
            n_ranges++;
        }
    }
    /* Empty tensors occupy no bytes and may share an offset with anything. */
    if (n_ranges) qsort(ranges, n_ranges, sizeof(*ranges), cmp_by_begin);
    size_t far = 0; /* the range reaching furthest so far */
    for (size_t i = 1; i < n_ranges; i++) {
        if (ranges[i].b < ranges[far].e) {
            rc = weft_error_set(
                err, WEFT_ERR_FORMAT, SRC,
                "%s: tensor '%.80s': data_offsets [%llu, %llu] overlap tensor "
                "'%.80s' at [%llu, %llu]",
                name, st->tensors[ranges[i].idx].name, (unsigned long long)ranges[i].b,
                (unsigned long long)ranges[i].e, st->tensors[ranges[far].idx].name,
                (unsigned long long)ranges[far].b, (unsigned long long)ranges[far].e);
            goto done;
        }
        if (ranges[i].e > ranges[far].e) far = i;
    }
done:
    free(ranges);
    json_decref(root);
    return rc;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const weft_st_tensor *)a)->name, ((const weft_st_tensor *)b)->name);
}

/* Sorts by name and refuses a name that appears twice (two shards holding one tensor). */
static weft_status finish(weft_safetensors *st, weft_error *err) {
    if (st->n_tensors) qsort(st->tensors, st->n_tensors, sizeof(*st->tensors), cmp_tensor_name);
    for (size_t i = 1; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, st->tensors[i - 1].name)) {
            uint32_t fa = st->tensors[i - 1].file, fb = st->tensors[i].file;
            return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                  "tensor '%.80s' appears in both %s and %s", st->tensors[i].name,
                                  st->files[fa].path, st->files[fb].path);
        }
    return WEFT_OK;
}

static weft_safetensors *st_new(size_t n_files) {
    weft_safetensors *st = calloc(1, sizeof(*st));
    if (!st) return NULL;
    st->files = calloc(n_files ? n_files : 1, sizeof(*st->files));
    st->metadata = json_object();
    if (!st->files || !st->metadata) {
        free(st->files);
        json_decref(st->metadata);
        free(st);
        return NULL;
    }
    return st;
}

/* Maps path read-only into f. An empty file cannot be mapped; it is reported as truncated. */
static weft_status map_file(st_file *f, const char *path, weft_error *err) {
    f->path = strdup(path);
    if (!f->path) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return weft_error_set(err, errno == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO, SRC,
                              "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: not a regular file", path);
    }
    if (sb.st_size < 8) {
        close(fd);
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "%s: truncated: %lld bytes, expected at least the 8-byte header "
                              "length",
                              path, (long long)sb.st_size);
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: mmap failed: %s", path, strerror(errno));
    f->base = p;
    f->len = (size_t)sb.st_size;
    f->mapped = 1;
    return WEFT_OK;
}

weft_status weft_safetensors_parse(const uint8_t *buf, size_t len, const char *name,
                                   weft_safetensors **out, weft_error *err) {
    *out = NULL;
    if (!name) name = "safetensors";
    weft_safetensors *st = st_new(1);
    if (!st) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    st->n_files = 1;
    st->files[0].path = strdup(name);
    st->files[0].base = buf;
    st->files[0].len = len;
    weft_status rc =
        st->files[0].path ? WEFT_OK : weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    if (!rc) rc = parse_image(st, 0, buf, len, name, err);
    if (!rc) rc = finish(st, err);
    if (rc) {
        weft_safetensors_close(st);
        return rc;
    }
    *out = st;
    return WEFT_OK;
}

weft_status weft_safetensors_open_file(const char *path, weft_safetensors **out, weft_error *err) {
    *out = NULL;
    weft_safetensors *st = st_new(1);
    if (!st) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    st->n_files = 1;
    weft_status rc = map_file(&st->files[0], path, err);
    if (!rc) rc = parse_image(st, 0, st->files[0].base, st->files[0].len, path, err);
    if (!rc) rc = finish(st, err);
    if (rc) {
        weft_safetensors_close(st);
        return rc;
    }
    *out = st;
    return WEFT_OK;
}

static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t o = a;
    if (a && dir[a - 1] != '/') p[o++] = '/';
    memcpy(p + o, name, b + 1);
    return p;
}

/* A shard name must name a file directly inside the model directory. */
static int shard_name_ok(const char *s) {
    if (!s[0] || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
    return strchr(s, '/') == NULL && strchr(s, '\\') == NULL;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static weft_status open_sharded(const char *dir, const char *index_path, weft_safetensors **out,
                                weft_error *err) {
    char *text = NULL;
    size_t len = 0;
    weft_status rc =
        weft_file_read(index_path, INDEX_MAX, "a safetensors index", SRC, &text, &len, err);
    if (rc) return rc;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: not valid JSON: %s (line %d)",
                              index_path, jerr.text, jerr.line);
    weft_safetensors *st = NULL;
    const char **shards = NULL;
    size_t n_shards = 0;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(map) || json_object_size(map) == 0) {
        rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                            "%s: weight_map: expected a non-empty object of tensor name -> "
                            "shard file",
                            index_path);
        goto done;
    }
    size_t n_map = json_object_size(map);
    shards = malloc(n_map * sizeof(*shards));
    if (!shards) {
        rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        if (!json_is_string(v) || !shard_name_ok(json_string_value(v))) {
            rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                "%s: weight_map: tensor '%.80s': expected a file name inside the "
                                "model directory, got %s%.80s%s",
                                index_path, key, json_is_string(v) ? "'" : "a non-string",
                                json_is_string(v) ? json_string_value(v) : "",
                                json_is_string(v) ? "'" : "");
            goto done;
        }
        shards[n_shards++] = json_string_value(v);
    }
    qsort(shards, n_shards, sizeof(*shards), cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n_shards; i++)
        if (!u || strcmp(shards[u - 1], shards[i])) shards[u++] = shards[i];
    n_shards = u;
    st = st_new(n_shards);
    if (!st) {
        rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_shards; i++) {
        char *p = join_path(dir, shards[i]);
        if (!p) {
            rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
            goto done;
        }
        st->n_files = i + 1;
        rc = map_file(&st->files[i], p, err);
        if (!rc) rc = parse_image(st, (uint32_t)i, st->files[i].base, st->files[i].len, p, err);
        free(p);
        if (rc) goto done;
    }
    if ((rc = finish(st, err))) goto done;
    json_object_foreach(map, key, v) {
        const weft_st_tensor *t = weft_safetensors_find(st, key);
        const char *want = json_string_value(v);
        if (!t) {
            rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                "%s: weight_map maps tensor '%.80s' to %s, which has no such "
                                "tensor",
                                index_path, key, want);
            goto done;
        }
        const char *have = strrchr(st->files[t->file].path, '/');
        have = have ? have + 1 : st->files[t->file].path;
        if (strcmp(have, want)) {
            rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                "%s: weight_map maps tensor '%.80s' to %s, but it is in %s",
                                index_path, key, want, have);
            goto done;
        }
    }
    if (st->n_tensors != n_map) {
        /* Every mapped name was found in its shard, so the extra ones are unmapped. */
        for (size_t i = 0; i < st->n_tensors; i++)
            if (!json_object_get(map, st->tensors[i].name)) {
                rc = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                    "%s: tensor '%.80s' of %s is missing from weight_map",
                                    index_path, st->tensors[i].name,
                                    st->files[st->tensors[i].file].path);
                goto done;
            }
    }
done:
    free(shards);
    json_decref(root);
    if (rc) {
        weft_safetensors_close(st);
        return rc;
    }
    *out = st;
    return WEFT_OK;
}

weft_status weft_safetensors_open_dir(const char *dir, weft_safetensors **out, weft_error *err) {
    *out = NULL;
    char *index = join_path(dir, "model.safetensors.index.json");
    char *single = join_path(dir, "model.safetensors");
    weft_status rc;
    struct stat sb;
    if (!index || !single)
        rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "out of memory");
    else if (stat(index, &sb) == 0)
        rc = open_sharded(dir, index, out, err);
    else if (stat(single, &sb) == 0)
        rc = weft_safetensors_open_file(single, out, err);
    else
        rc = weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                            "%s: no model.safetensors or model.safetensors.index.json", dir);
    free(index);
    free(single);
    return rc;
}

size_t weft_safetensors_count(const weft_safetensors *st) {
    return st ? st->n_tensors : 0;
}

const weft_st_tensor *weft_safetensors_at(const weft_safetensors *st, size_t i) {
    return st && i < st->n_tensors ? &st->tensors[i] : NULL;
}

const weft_st_tensor *weft_safetensors_find(const weft_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    weft_st_tensor key = {.name = name};
    return bsearch(&key, st->tensors, st->n_tensors, sizeof(key), cmp_tensor_name);
}

size_t weft_safetensors_file_count(const weft_safetensors *st) {
    return st ? st->n_files : 0;
}

const char *weft_safetensors_file_path(const weft_safetensors *st, size_t i) {
    return st && i < st->n_files ? st->files[i].path : NULL;
}

const char *weft_safetensors_metadata(const weft_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    return json_string_value(json_object_get(st->metadata, key));
}

void weft_safetensors_close(weft_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_tensors; i++)
        free((char *)st->tensors[i].name);
    free(st->tensors);
    for (size_t i = 0; i < st->n_files; i++) {
        if (st->files[i].mapped) munmap((void *)st->files[i].base, st->files[i].len);
        free(st->files[i].path);
    }
    free(st->files);
    json_decref(st->metadata);
    free(st);
}

/* ---- writing ----------------------------------------------------------------------------- */
typedef struct st_wtensor {
    char *name;
    uint32_t dtype, rank;
    int64_t shape[WEFT_MAX_DIMS];
    uint8_t *data; /* NULL: produced by the fill callback at write time */
    uint64_t bytes;
} st_wtensor;

struct weft_st_writer {
    st_wtensor *t;
    size_t n, cap;
};

weft_st_writer *weft_st_writer_new(void) {
    return calloc(1, sizeof(weft_st_writer));
}

void weft_st_writer_free(weft_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w);
}

static weft_status writer_add(weft_st_writer *w, const char *name, uint32_t dtype, uint32_t rank,
                              const int64_t *shape, const void *data, uint64_t bytes, int deferred,
                              weft_error *err) {
    if (!w || !name || !name[0] || !strcmp(name, "__metadata__"))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "writer: tensor name must be non-empty and not __metadata__");
    uint64_t need;
    if (rank > WEFT_MAX_DIMS || !shape_bytes(dtype, rank, shape, &need))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "writer: tensor '%.80s': bad dtype %u or shape (rank %u)", name,
                              dtype, rank);
    if (!deferred && bytes != need)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "writer: tensor '%.80s': %llu bytes given, %s shape needs %llu", name,
                              (unsigned long long)bytes, weft_dtype_name(dtype),
                              (unsigned long long)need);
    if (!deferred && need && !data)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "writer: tensor '%.80s': no data", name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 32;
        st_wtensor *t = realloc(w->t, cap * sizeof(*t));
        if (!t) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "writer: out of memory");
        w->t = t;
        w->cap = cap;
    }
    st_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!deferred && need) {
        t->data = malloc(need);
        if (t->data) memcpy(t->data, data, need);
    }
    if (!t->name || (!deferred && need && !t->data)) {
        free(t->name);
        free(t->data);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "writer: out of memory");
    }
    t->dtype = dtype;
    t->rank = rank;
    for (uint32_t i = 0; i < rank; i++)
        t->shape[i] = shape[i];
    t->bytes = need;
    w->n++;
    return WEFT_OK;
}

weft_status weft_st_writer_add(weft_st_writer *w, const char *name, uint32_t dtype, uint32_t rank,
                               const int64_t *shape, const void *data, uint64_t bytes,
                               weft_error *err) {
    return writer_add(w, name, dtype, rank, shape, data, bytes, 0, err);
}

weft_status weft_st_writer_add_deferred(weft_st_writer *w, const char *name, uint32_t dtype,
                                        uint32_t rank, const int64_t *shape, weft_error *err) {
    return writer_add(w, name, dtype, rank, shape, NULL, 0, 1, err);
}

uint64_t weft_st_writer_data_bytes(const weft_st_writer *w) {
    uint64_t s = 0;
    for (size_t i = 0; w && i < w->n; i++)
        s += w->t[i].bytes;
    return s;
}

static int cmp_wtensor(const void *a, const void *b) {
    return strcmp(((const st_wtensor *)a)->name, ((const st_wtensor *)b)->name);
}

/* The header JSON with sorted keys and contiguous offsets in name order. */
static weft_status build_header(weft_st_writer *w, const char *metadata_json, char **out,
                                weft_error *err) {
    json_t *root = json_object();
    if (!root) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "writer: out of memory");
    if (metadata_json) {
        json_error_t jerr;
        json_t *meta = json_loads(metadata_json, JSON_REJECT_DUPLICATES, &jerr);
        const char *k;
        json_t *v;
        int ok = json_is_object(meta);
        if (ok) json_object_foreach(meta, k, v) ok = ok && json_is_string(v);
        if (!ok) {
            json_decref(meta);
            json_decref(root);
            return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                  "writer: metadata: expected a JSON object of string values");
        }
        json_object_set_new(root, "__metadata__", meta);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        st_wtensor *t = &w->t[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->rank; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", weft_dtype_name(t->dtype), "shape",
                              shape, "data_offsets", (json_int_t)off, (json_int_t)(off + t->bytes));
        if (!e || json_object_set_new(root, t->name, e)) {
            json_decref(root);
            return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "writer: out of memory");
        }
        off += t->bytes;
    }
    *out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    if (!*out) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "writer: out of memory");
    return WEFT_OK;
}

weft_status weft_st_writer_write_fill(weft_st_writer *w, const char *path,
                                      const char *metadata_json, weft_st_fill_fn fill, void *ctx,
                                      weft_error *err) {
    if (!w || !path) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "writer: no path");
    if (w->n) qsort(w->t, w->n, sizeof(*w->t), cmp_wtensor);
    for (size_t i = 1; i < w->n; i++)
        if (!strcmp(w->t[i].name, w->t[i - 1].name))
            return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                  "writer: %s: tensor '%.80s' added twice", path, w->t[i].name);
    for (size_t i = 0; i < w->n; i++)
        if (!w->t[i].data && w->t[i].bytes && !fill)
            return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                  "writer: %s: tensor '%.80s' has no data and no fill callback",
                                  path, w->t[i].name);
    char *header = NULL;
    weft_status rc = build_header(w, metadata_json, &header, err);
    if (rc) return rc;
    size_t hlen = strlen(header);
    size_t padded = hlen + (8 - (8 + hlen) % 8) % 8; /* data section starts 8-aligned */
    /* Write beside the target and rename, so a failed write never leaves a valid-looking file. */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 6);
    uint8_t *chunk = NULL;
    FILE *f = NULL;
    if (!tmp) {
        free(header);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "writer: out of memory");
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".part", 6);
    f = fopen(tmp, "wb");
    if (!f) {
        rc = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(header, 1, hlen, f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++)
        ok = fputc(' ', f) != EOF;
    for (size_t i = 0; ok && i < w->n; i++) {
        st_wtensor *t = &w->t[i];
        if (t->data || !t->bytes) {
            ok = !t->bytes || fwrite(t->data, 1, t->bytes, f) == t->bytes;
            continue;
        }
        if (!chunk && !(chunk = malloc(FILL_CHUNK))) {
            rc = weft_error_set(err, WEFT_ERR_NOMEM, SRC, "writer: out of memory");
            goto done;
        }
        for (uint64_t o = 0; ok && o < t->bytes; o += FILL_CHUNK) {
            uint64_t n = t->bytes - o < FILL_CHUNK ? t->bytes - o : FILL_CHUNK;
            if ((rc = fill(ctx, t->name, t->dtype, t->rank, t->shape, o, chunk, n, err))) goto done;
            ok = fwrite(chunk, 1, n, f) == n;
        }
    }
    if (!ok || fflush(f) != 0) {
        rc = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: write failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (fclose(f) != 0) {
        f = NULL;
        rc = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: write failed: %s", tmp, strerror(errno));
        goto done;
    }
    f = NULL;
    if (rename(tmp, path) != 0)
        rc = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot rename to %s: %s", tmp, path,
                            strerror(errno));
done:
    if (f) fclose(f);
    if (rc) remove(tmp);
    free(chunk);
    free(tmp);
    free(header);
    return rc;
}

weft_status weft_st_writer_write(weft_st_writer *w, const char *path, const char *metadata_json,
                                 weft_error *err) {
    return weft_st_writer_write_fill(w, path, metadata_json, NULL, NULL, err);
}
