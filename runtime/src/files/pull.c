/* `weft pull`: gets a model's files into the model cache. A pull first settles the source (the
 * hub, a mirror URL or a mirror folder) and the list of files with every expected hash it can
 * learn (an alias's pinned SHA-256, the hub's LFS sha256 or git blob id, SHA256SUMS files, the
 * hub's X-Linked-Etag), then fetches each file into FILE.part, continuing a partial .part with
 * a Range request (HTTP) or an offset copy (folder), checks the result against every expected
 * hash and renames it into place. A file that fails a check is removed and the pull fails; a
 * resumed file that fails is fetched once more from the start, since the old .part may have
 * come from another version. The record <dir>/.weft-pull.json lists what was verified and how,
 * and lets a later pull skip files without hashing them again. See docs/PULL.md. */
#include "files/pull.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/evp.h>

#include "util/cache.h"
#include "util/error.h"
#include "util/file.h"

#define SRC "pull"
#define DEFAULT_ENDPOINT "https://huggingface.co"
#define MAX_FILES 512
#define MAX_EXPECT 3
#define MAX_SMALL_DOC (64u << 20) /* API answers, SHA256SUMS and index files */

/* ---- built-in aliases --------------------------------------------------------------------- */

typedef struct alias_file {
    const char *name;   /* in the cache folder */
    const char *remote; /* in the hub repository */
    int64_t size;
    const char *sha256;
} alias_file;

typedef struct alias {
    const char *alias;      /* lower case */
    const char *repo;       /* hub repository */
    const char *mirror_sub; /* folder under a mirror */
    alias_file files[4];
    size_t n_files;
} alias;

/* Hashes and sizes of karpathy/tinyllamas stories260K/ (docs/PULL.md): pinned so that a
 * mirror without SHA256SUMS is still verified. */
static const alias aliases[] = {
    {"stories260k",
     "karpathy/tinyllamas",
     "stories260K",
     {{"stories260K.bin", "stories260K/stories260K.bin", 1056540,
       "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696"},
      {"tok512.bin", "stories260K/tok512.bin", 6227,
       "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312"}},
     2},
};

static const alias *find_alias(const char *id) {
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (!strcasecmp(id, aliases[i].alias)) return &aliases[i];
    return NULL;
}

/* ---- names and the cache ------------------------------------------------------------------ */

static int name_char(int c) {
    return isalnum(c) || c == '.' || c == '_' || c == '-';
}

/* A revision as the hub takes it in a URL and git in a ref name: under cap characters of
 * [A-Za-z0-9._-] in '/'-separated components, none empty and none starting with '.' (so no "."
 * or ".." that a URL would resolve, nothing hidden), and no ".." anywhere (git refuses it). A
 * longer one is refused, never cut to a different revision. */
static int revision_ok(const char *rev, size_t cap) {
    size_t n = strlen(rev);
    if (n == 0 || n >= cap || strstr(rev, "..")) return 0;
    for (size_t i = 0; i < n; i++) {
        int start = i == 0 || rev[i - 1] == '/';
        if (rev[i] == '/') {
            if (start || i + 1 == n) return 0; /* empty component */
        } else if (!name_char((unsigned char)rev[i]) || (start && rev[i] == '.')) {
            return 0;
        }
    }
    return 1;
}

/* A single path component we are willing to create: [A-Za-z0-9._-]+, not "." or "..". */
static int safe_component(const char *s, size_t n) {
    if (n == 0 || n > 200) return 0;
    if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) return 0;
    for (size_t i = 0; i < n; i++)
        if (!name_char((unsigned char)s[i])) return 0;
    return 1;
}

void weft_pull_options_default(weft_pull_options *o) {
    memset(o, 0, sizeof(*o));
    o->progress = -1;
}

weft_status weft_pull_cache_root(char *out, size_t cap, weft_error *err) {
    return weft_cache_root(out, cap, err);
}

weft_status weft_pull_cache_name(const char *id, char *out, size_t cap, weft_error *err) {
    if (!id || !*id)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "model id: expected org/name, got ''");
    const alias *a = find_alias(id);
    if (a) {
        if (strlen(a->alias) >= cap)
            return weft_error_set(err, WEFT_ERR_INVALID, SRC, "model id: buffer too small");
        strcpy(out, a->alias);
        return WEFT_OK;
    }
    const char *slash = strchr(id, '/');
    size_t len = strlen(id);
    int ok = slash ? safe_component(id, (size_t)(slash - id)) &&
                         safe_component(slash + 1, len - (size_t)(slash - id) - 1)
                   : safe_component(id, len);
    if (!ok)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "model id '%s': expected an alias (stories260k) or a hub id "
                              "org/name made of letters, digits, '.', '_' and '-'",
                              id);
    int n = slash ? snprintf(out, cap, "%.*s--%s", (int)(slash - id), id, slash + 1)
                  : snprintf(out, cap, "%s", id);
    if (n < 0 || (size_t)n >= cap)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "model id '%s' is too long", id);
    return WEFT_OK;
}

weft_status weft_pull_model_dir(const char *id, char *out, size_t cap, weft_error *err) {
    char root[4096], name[512];
    weft_status st = weft_pull_cache_name(id, name, sizeof(name), err);
    if (st == WEFT_OK) st = weft_pull_cache_root(root, sizeof(root), err);
    if (st != WEFT_OK) return st;
    int n = snprintf(out, cap, "%s/models/%s", root, name);
    if (n < 0 || (size_t)n >= cap)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "model folder path is too long");
    return WEFT_OK;
}

static weft_status mkdir_p(const char *path, weft_error *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "%s: path too long", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST)
            return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot create folder: %s", tmp,
                                  strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot create folder: %s", tmp,
                              strerror(errno));
    return WEFT_OK;
}

/* ---- hashing ------------------------------------------------------------------------------ */

static void hex(const unsigned char *d, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = '\0';
}

/* SHA-256 of a file and, when blob is non-NULL, its git blob id (SHA-1 of "blob <size>\0" and
 * the bytes), which is how the hub names files that are not in LFS. */
static weft_status hash_file(const char *path, char sha256[65], char *blob, int64_t *size_out,
                             weft_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb)) {
        fclose(f);
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: %s", path, strerror(errno));
    }
    EVP_MD_CTX *a = EVP_MD_CTX_new(), *b = blob ? EVP_MD_CTX_new() : NULL;
    weft_status st = WEFT_OK;
    if (!a || (blob && !b) || !EVP_DigestInit_ex(a, EVP_sha256(), NULL) ||
        (b && !EVP_DigestInit_ex(b, EVP_sha1(), NULL))) {
        st = weft_error_set(err, WEFT_ERR_INTERNAL, SRC, "OpenSSL digest setup failed");
        goto done;
    }
    if (b) {
        char head[64];
        int n = snprintf(head, sizeof(head), "blob %lld", (long long)sb.st_size);
        EVP_DigestUpdate(b, head, (size_t)n + 1); /* with the NUL */
    }
    static __thread unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
        EVP_DigestUpdate(a, buf, got);
        if (b) EVP_DigestUpdate(b, buf, got);
    }
    if (ferror(f)) {
        st = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: read error", path);
        goto done;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_DigestFinal_ex(a, md, &mdlen);
    hex(md, mdlen, sha256);
    if (b) {
        EVP_DigestFinal_ex(b, md, &mdlen);
        hex(md, mdlen, blob);
    }
    if (size_out) *size_out = (int64_t)sb.st_size;
done:
    EVP_MD_CTX_free(a);
    if (b) EVP_MD_CTX_free(b);
    fclose(f);
    return st;
}

static int is_hex(const char *s, size_t n) {
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* ---- the file list ------------------------------------------------------------------------ */

typedef struct expect {
    char sha256[65];
    char by[256]; /* who says so: "alias pin", "hub LFS", "SHA256SUMS (<url or path>)", ... */
} expect;

typedef struct want {
    char name[256];   /* in the destination folder */
    char remote[768]; /* hub: path in the repository; mirror: path under the mirror root */
    int64_t size;     /* -1 unknown */
    expect ex[MAX_EXPECT];
    int n_ex;
    char blob[41]; /* expected git blob id, "" unknown */
    int optional;  /* URL-mirror probe: absence is not an error */
    /* outcome */
    char sha256[65];
    int64_t got_size;
    char verified[256];
    int present;
} want;

typedef enum { KIND_HUB, KIND_URL, KIND_FOLDER } source_kind;

typedef struct puller {
    const weft_pull_options *o;
    const alias *al;
    source_kind kind;
    char base[4096]; /* hub endpoint, mirror URL or mirror folder, without trailing '/' */
    char host[256];  /* for "cannot reach" */
    char repo[256];  /* hub repository */
    char revision[256];
    char rev_escaped[768];
    char commit[64]; /* the hub's resolved commit, when it says */
    char dir[4096];
    char sub[512]; /* model folder under a mirror */
    want *w;
    size_t n;
    int progress;
    weft_pull_stats *stats;
    json_t *record; /* previous .weft-pull.json files object, or NULL */
} puller;

static int wanted_name(const char *n) {
    static const char *fixed[] = {"config.json", "generation_config.json", "tokenizer.json",
                                  "tokenizer_config.json", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (!strcmp(n, fixed[i])) return 1;
    size_t l = strlen(n), s = strlen(".safetensors");
    return l > s && !strcmp(n + l - s, ".safetensors");
}

static want *find_want(puller *p, const char *name) {
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->w[i].name, name)) return &p->w[i];
    return NULL;
}

static weft_status add_want(puller *p, const char *name, const char *remote, int64_t size,
                            want **out, weft_error *err) {
    if (!safe_component(name, strlen(name)))
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                              "file name '%s' from %s: expected [A-Za-z0-9._-]+ (refusing to "
                              "write outside the model folder)",
                              name, p->base);
    want *w = find_want(p, name);
    if (!w) {
        if (p->n == MAX_FILES)
            return weft_error_set(err, WEFT_ERR_UNSUPPORTED, SRC, "%s: more than %d files to fetch",
                                  p->o->id, MAX_FILES);
        w = &p->w[p->n++];
        memset(w, 0, sizeof(*w));
        snprintf(w->name, sizeof(w->name), "%s", name);
        w->size = -1;
        w->got_size = -1;
    }
    snprintf(w->remote, sizeof(w->remote), "%s", remote);
    if (size >= 0) w->size = size;
    if (out) *out = w;
    return WEFT_OK;
}

static void add_expect(want *w, const char *sha, const char *by) {
    if (!is_hex(sha, 64) || w->n_ex == MAX_EXPECT) return;
    for (int i = 0; i < w->n_ex; i++)
        if (!strcasecmp(w->ex[i].sha256, sha)) { /* same value: name both sources */
            size_t l = strlen(w->ex[i].by);
            snprintf(w->ex[i].by + l, sizeof(w->ex[i].by) - l, " and %s", by);
            return;
        }
    for (int i = 0; i < 64; i++)
        w->ex[w->n_ex].sha256[i] = (char)tolower((unsigned char)sha[i]);
    w->ex[w->n_ex].sha256[64] = '\0';
    snprintf(w->ex[w->n_ex].by, sizeof(w->ex[w->n_ex].by), "%s", by);
    w->n_ex++;
}

/* Applies a SHA256SUMS text: "<64 hex> [ *]<path>" per line. prefix is stripped from paths
 * (so a mirror-root file names "stories260K/tok512.bin"); with list, unknown names that the
 * model wants are added to the file list. */
static weft_status apply_sums(puller *p, const char *text, size_t len, const char *prefix,
                              const char *by, int list, weft_error *err) {
    size_t plen = prefix ? strlen(prefix) : 0;
    const char *s = text, *end = text + len;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        char line[1024];
        size_t ll = (size_t)(le - s);
        if (ll >= sizeof(line)) ll = sizeof(line) - 1;
        memcpy(line, s, ll);
        line[ll] = '\0';
        while (ll && (line[ll - 1] == '\r' || line[ll - 1] == ' '))
            line[--ll] = '\0';
        s = nl ? nl + 1 : end;
        if (ll < 66 || line[0] == '#') continue;
        char sha[65];
        memcpy(sha, line, 64);
        sha[64] = '\0';
        if (!is_hex(sha, 64) || line[64] != ' ') continue;
        const char *path = line + 65;
        if (*path == ' ' || *path == '*') path++;
        if (plen) {
            if (strncmp(path, prefix, plen) || path[plen] != '/') continue;
            path += plen + 1;
        }
        want *w = find_want(p, path);
        if (!w && list && wanted_name(path)) {
            char remote[768];
            snprintf(remote, sizeof(remote), "%s/%s", p->sub, path);
            weft_status st = add_want(p, path, remote, -1, &w, err);
            if (st != WEFT_OK) return st;
        }
        if (w) add_expect(w, sha, by);
    }
    return WEFT_OK;
}

/* ---- HTTP --------------------------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct http {
    /* body to a file ... */
    FILE *f;
    uint64_t off;  /* bytes already in f when the request was made */
    int restarted; /* the server ignored Range: f was emptied */
    /* ... or to memory */
    char *mem;
    size_t mem_len, mem_cap;
    /* response */
    long status;
    int64_t cr_start; /* Content-Range start, -1 none */
    char linked_etag[96];
    int64_t linked_size;
    char errbody[256];
    size_t errbody_len;
    int bad; /* why the write callback stopped the transfer */
    uint64_t written;
    long retry_after; /* Retry-After in seconds, -1 none */
    int retries;      /* the retries spent when the last attempt still failed */
    int transient;    /* no answer, or a cut-off one, of the kind a retry may cure */
    /* progress */
    int progress;
    const char *label;
    int last_pct;
} http;

static size_t on_header(char *data, size_t size, size_t n, void *ud) {
    http *h = ud;
    size_t len = size * n;
    char line[512];
    size_t l = len < sizeof(line) - 1 ? len : sizeof(line) - 1;
    memcpy(line, data, l);
    line[l] = '\0';
    while (l && (line[l - 1] == '\r' || line[l - 1] == '\n'))
        line[--l] = '\0';
    if (!strncmp(line, "HTTP/", 5)) {
        const char *sp = strchr(line, ' ');
        h->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        h->cr_start = -1;
        h->retry_after = -1;
        return len;
    }
    char *colon = strchr(line, ':');
    if (!colon) return len;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (!strcasecmp(line, "content-range")) {
        long long a;
        if (sscanf(v, "bytes %lld-", &a) == 1) h->cr_start = a;
    } else if (!strcasecmp(line, "x-linked-etag")) {
        if (!strncmp(v, "W/", 2)) v += 2;
        if (*v == '"') v++;
        size_t k = 0;
        while (v[k] && v[k] != '"' && k < sizeof(h->linked_etag) - 1)
            k++;
        memcpy(h->linked_etag, v, k);
        h->linked_etag[k] = '\0';
    } else if (!strcasecmp(line, "x-linked-size")) {
        h->linked_size = strtoll(v, NULL, 10);
    } else if (!strcasecmp(line, "retry-after")) {
        char *end;
        long secs = strtol(v, &end, 10);
        if (end != v && secs >= 0) h->retry_after = secs; /* an HTTP date is not read */
    }
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
    http *h = ud;
    size_t len = size * n;
    if (h->status >= 300 || h->status < 200) {
        size_t room = sizeof(h->errbody) - 1 - h->errbody_len;
        size_t k = len < room ? len : room;
        memcpy(h->errbody + h->errbody_len, data, k);
        h->errbody_len += k;
        h->errbody[h->errbody_len] = '\0';
        return len;
    }
    if (h->f) {
        if (h->written == 0 && h->off > 0) {
            if (h->status == 200) {
                /* The server sent the whole file: start the .part over. */
                if (fflush(h->f) || ftruncate(fileno(h->f), 0) || fseek(h->f, 0, SEEK_SET)) {
                    h->bad = 1;
                    return 0;
                }
                h->off = 0;
                h->restarted = 1;
            } else if (h->status == 206 && h->cr_start != (int64_t)h->off) {
                h->bad = 2;
                return 0;
            }
        }
        if (fwrite(data, 1, len, h->f) != len) {
            h->bad = 3;
            return 0;
        }
    } else {
        if (h->mem_len + len > MAX_SMALL_DOC) {
            h->bad = 4;
            return 0;
        }
        if (h->mem_len + len + 1 > h->mem_cap) {
            size_t cap = (h->mem_len + len + 1) * 2;
            char *m = realloc(h->mem, cap);
            if (!m) {
                h->bad = 5;
                return 0;
            }
            h->mem = m;
            h->mem_cap = cap;
        }
        memcpy(h->mem + h->mem_len, data, len);
        h->mem_len += len;
        h->mem[h->mem_len] = '\0';
    }
    h->written += len;
    return len;
}

static void show_progress(const char *label, uint64_t done, uint64_t total, int *last_pct) {
    int pct = total ? (int)(done * 100 / total) : -1;
    if (pct == *last_pct) return;
    *last_pct = pct;
    char bar[31];
    int fill = pct < 0 ? 0 : pct * 30 / 100;
    for (int i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    if (pct >= 0)
        fprintf(stderr, "\r%-32.32s [%s] %3d%% %8.1f/%.1f MB", label, bar, pct, done / 1e6,
                total / 1e6);
    else
        fprintf(stderr, "\r%-32.32s %8.1f MB", label, done / 1e6);
    fflush(stderr);
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    http *h = ud;
    if (h->progress && dltotal > 0)
        show_progress(h->label, h->off + (uint64_t)dlnow, h->off + (uint64_t)dltotal, &h->last_pct);
    return 0;
}

static int unreachable(CURLcode rc) {
    return rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY ||
           rc == CURLE_COULDNT_CONNECT || rc == CURLE_OPERATION_TIMEDOUT ||
           rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR;
}

/* One GET. what names the file in messages. Returns WEFT_OK with h->status set for any HTTP
 * answer (the caller judges it); an error only when no answer came. */
static weft_status http_get(puller *p, const char *url, const char *what, http *h,
                            weft_error *err) {
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return weft_error_set(err, WEFT_ERR_INTERNAL, SRC, "libcurl initialisation failed: %s",
                              curl_easy_strerror(curl_init_rc));
    CURL *c = curl_easy_init();
    if (!c) return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "libcurl: no handle");
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *hdr = NULL;
    const char *token = getenv("HF_TOKEN");
    if (p->kind == KIND_HUB && token && *token) {
        char auth[1024];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hdr = curl_slist_append(hdr, auth);
    }
    char range[64];
    if (h->f && h->off > 0) {
        snprintf(range, sizeof(range), "%llu-", (unsigned long long)h->off);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    h->cr_start = -1;
    h->retry_after = -1;
    h->transient = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "weft/" WEFT_VERSION_STRING);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (hdr) curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    if (h->progress) {
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
    }
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdr);
    if (h->progress && h->last_pct != -2) fputc('\n', stderr);
    if (rc == CURLE_WRITE_ERROR && h->bad) {
        static const char *why[] = {"",
                                    "cannot restart the .part file",
                                    "the server answered a Range request at another offset",
                                    "cannot write the .part file (disk full?)",
                                    "the answer is larger than 64 MiB",
                                    "out of memory"};
        return weft_error_set(err, h->bad == 5 ? WEFT_ERR_NOMEM : WEFT_ERR_IO, SRC,
                              "%s from %s: %s", what, url, why[h->bad]);
    }
    if (rc != CURLE_OK) {
        const char *msg = errbuf[0] ? errbuf : curl_easy_strerror(rc);
        /* A connection that broke once an answer had begun, or closed with none: the host is
         * there, so a retry may cure it. A host that cannot be reached at all is not retried. */
        h->transient =
            rc == CURLE_PARTIAL_FILE || rc == CURLE_GOT_NOTHING ||
            ((rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR || rc == CURLE_OPERATION_TIMEDOUT) &&
             h->status > 0);
        if (unreachable(rc) && !h->transient) {
            if (p->kind == KIND_HUB)
                return weft_error_set(err, WEFT_ERR_IO, SRC,
                                      "cannot reach %s: %s; set WEFT_MODEL_MIRROR to a folder or "
                                      "URL holding the model",
                                      p->host, msg);
            return weft_error_set(err, WEFT_ERR_IO, SRC,
                                  "cannot reach the mirror %s (WEFT_MODEL_MIRROR): %s", p->host,
                                  msg);
        }
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s from %s: %s", what, url, msg);
    }
    h->status = code;
    return WEFT_OK;
}

static weft_status http_status_error(puller *p, const char *what, const char *url, http *h,
                                     weft_error *err) {
    const char *body = h->errbody_len ? h->errbody : "";
    if (h->status == 401 || h->status == 403)
        return weft_error_set(
            err, WEFT_ERR_IO, SRC, "HTTP %ld for %s at %s: %s%s%s", h->status, what, url,
            p->kind == KIND_HUB ? "the repository is private or gated, or the id is wrong; "
                                  "set HF_TOKEN to a token with access"
                                : "the mirror refused access",
            *body ? "; server said: " : "", body);
    if (h->status == 404)
        return weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                              "HTTP 404 for %s at %s: not found; check the model id%s", what, url,
                              p->kind == KIND_HUB ? " and --revision"
                                                  : " and the mirror layout "
                                                    "(docs/PULL.md)");
    return weft_error_set(err, WEFT_ERR_IO, SRC, "HTTP %ld for %s at %s%s%s", h->status, what, url,
                          *body ? ": " : "", body);
}

/* An integer from the environment, or def when unset or not a number in [lo, hi]. */
static int env_int(const char *name, int def, int lo, int hi) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    return (*end || x < lo || x > hi) ? def : (int)x;
}

/* Answers that say "not now" rather than "no": a retry may get the file. */
static int busy_status(long status) {
    return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
           status == 504;
}

/* The wait before retry tryno + 1: the server's Retry-After (at most 60 s) when it sent one,
 * else WEFT_PULL_BACKOFF_MS (default 1,000) doubled each time, at most 30 s. */
static long retry_delay_ms(int tryno, long retry_after) {
    if (retry_after >= 0) return retry_after > 60 ? 60000 : retry_after * 1000;
    long ms = env_int("WEFT_PULL_BACKOFF_MS", 1000, 0, 60000);
    for (int i = 0; i < tryno && ms < 30000; i++)
        ms *= 2;
    return ms > 30000 ? 30000 : ms;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* After attempt tryno of a request for `what` (http_get's status st, its answer in h): 1 when it
 * is to be made again (a busy answer or a cut-off transfer, with WEFT_PULL_RETRIES not spent),
 * once the retry is logged, counted and waited for; 0 when the answer stands, with h->retries
 * the retries spent if it is still a busy or cut-off one. */
static int retry_wait(puller *p, http *h, weft_status st, int tryno, const char *what,
                      weft_error *err) {
    const int retries = env_int("WEFT_PULL_RETRIES", 4, 0, 20);
    int cut = st != WEFT_OK && h->transient, busy = st == WEFT_OK && busy_status(h->status);
    if (!(cut || busy) || tryno >= retries) {
        if (cut || busy) h->retries = tryno;
        return 0;
    }
    long ms = retry_delay_ms(tryno, busy ? h->retry_after : -1);
    if (cut)
        weft_log(WEFT_LOG_WARN, SRC, "%s; retry %d of %d in %.1f s", err->message, tryno + 1,
                 retries, ms / 1e3);
    else
        weft_log(WEFT_LOG_WARN, SRC, "HTTP %ld for %s; retry %d of %d in %.1f s", h->status, what,
                 tryno + 1, retries, ms / 1e3);
    sleep_ms(ms);
    weft_error_clear(err);
    p->stats->retries++;
    return 1;
}

/* A small document (JSON, SHA256SUMS) into memory, retried like a file (retry_wait). *found = 0
 * on HTTP 404 when optional. */
static weft_status http_small(puller *p, const char *url, const char *what, int optional,
                              char **text, size_t *len, int *found, weft_error *err) {
    http h;
    *text = NULL;
    *found = 0;
    weft_status st;
    for (int tryno = 0;; tryno++) {
        memset(&h, 0, sizeof(h));
        h.last_pct = -2;
        st = http_get(p, url, what, &h, err);
        if (!retry_wait(p, &h, st, tryno, what, err)) break;
        free(h.mem);
    }
    if (st != WEFT_OK && h.retries) weft_error_prefix(err, "after %d retries", h.retries);
    if (st == WEFT_OK && h.status == 200) {
        *text = h.mem ? h.mem : calloc(1, 1);
        *len = h.mem_len;
        *found = 1;
        return *text ? WEFT_OK : weft_error_set(err, WEFT_ERR_NOMEM, SRC, "%s", what);
    }
    free(h.mem);
    if (st != WEFT_OK) return st;
    if (optional && h.status == 404) return WEFT_OK;
    st = http_status_error(p, what, url, &h, err);
    if (h.retries) weft_error_prefix(err, "after %d retries", h.retries);
    return st;
}

/* ---- local files -------------------------------------------------------------------------- */

/* A local SHA256SUMS file: *text NULL when there is none; one that exists but cannot be read,
 * is not a regular file or passes MAX_SMALL_DOC is an error, not a file skipped. */
static weft_status read_sums_file(const char *path, char **text, size_t *len, weft_error *err) {
    weft_error fe = {.size = sizeof(fe)};
    return weft_file_absent_ok(
        weft_file_read(path, MAX_SMALL_DOC, "a SHA256SUMS file", SRC, text, len, &fe), &fe, err);
}

static int is_dir(const char *path) {
    struct stat sb;
    return !stat(path, &sb) && S_ISDIR(sb.st_mode);
}

/* Copies src from byte `off` onward to the end of dst (opened for append). */
static weft_status copy_from(const char *src, const char *dst, uint64_t off, puller *p,
                             const char *label, uint64_t *copied, weft_error *err) {
    FILE *in = fopen(src, "rb");
    if (!in) return weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC, "%s: %s", src, strerror(errno));
    struct stat sb;
    if (fstat(fileno(in), &sb)) {
        fclose(in);
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: %s", src, strerror(errno));
    }
    FILE *out = fopen(dst, off ? "ab" : "wb");
    if (!out) {
        fclose(in);
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: %s", dst, strerror(errno));
    }
    weft_status st = WEFT_OK;
    if (off && fseeko(in, (off_t)off, SEEK_SET)) {
        st = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot seek to %llu", src,
                            (unsigned long long)off);
        goto done;
    }
    static __thread unsigned char buf[1 << 16];
    uint64_t done_bytes = off, total = (uint64_t)sb.st_size;
    int last = -1;
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), in)) > 0) {
        if (fwrite(buf, 1, got, out) != got) {
            st = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: write failed (disk full?)", dst);
            goto done;
        }
        done_bytes += got;
        *copied += got;
        if (p->progress) show_progress(label, done_bytes, total, &last);
    }
    if (ferror(in)) st = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: read error", src);
    if (p->progress) fputc('\n', stderr);
done:
    fclose(in);
    if (fflush(out) || fsync(fileno(out))) {
        if (st == WEFT_OK)
            st = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: %s", dst, strerror(errno));
    }
    fclose(out);
    return st;
}

/* ---- listing the model -------------------------------------------------------------------- */

static weft_status list_alias(puller *p, weft_error *err) {
    for (size_t i = 0; i < p->al->n_files; i++) {
        const alias_file *f = &p->al->files[i];
        char remote[768];
        if (p->kind == KIND_HUB)
            snprintf(remote, sizeof(remote), "%s", f->remote);
        else
            snprintf(remote, sizeof(remote), "%s/%s", p->sub, f->name);
        want *w;
        weft_status st = add_want(p, f->name, remote, f->size, &w, err);
        if (st != WEFT_OK) return st;
        add_expect(w, f->sha256, "weft's pinned hash for the alias");
    }
    return WEFT_OK;
}

static weft_status list_hub(puller *p, weft_error *err) {
    char url[8192];
    snprintf(url, sizeof(url), "%s/api/models/%s/revision/%s?blobs=true", p->base, p->repo,
             p->rev_escaped);
    char *text;
    size_t len;
    int found;
    weft_status st = http_small(p, url, "the file list", 0, &text, &len, &found, err);
    if (st != WEFT_OK) return st;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    if (!root)
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: not JSON (%s, line %d)", url, je.text,
                              je.line);
    json_t *sib = json_object_get(root, "siblings");
    if (!json_is_array(sib)) {
        json_decref(root);
        return weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: expected a 'siblings' array of files",
                              url);
    }
    const char *sha = json_string_value(json_object_get(root, "sha"));
    if (sha) snprintf(p->commit, sizeof(p->commit), "%s", sha);
    size_t i;
    json_t *e;
    json_array_foreach(sib, i, e) {
        const char *name = json_string_value(json_object_get(e, "rfilename"));
        if (!name || strchr(name, '/') || !wanted_name(name)) continue;
        json_t *lfs = json_object_get(e, "lfs");
        json_t *jsize = json_object_get(lfs ? lfs : e, "size");
        int64_t size = json_is_integer(jsize) ? (int64_t)json_integer_value(jsize) : -1;
        want *w;
        st = add_want(p, name, name, size, &w, err);
        if (st != WEFT_OK) break;
        if (lfs) {
            const char *h = json_string_value(json_object_get(lfs, "sha256"));
            if (!h) h = json_string_value(json_object_get(lfs, "oid"));
            if (h) add_expect(w, h, "the hub's LFS sha256");
        } else {
            const char *b = json_string_value(json_object_get(e, "blobId"));
            if (b && is_hex(b, 40)) snprintf(w->blob, sizeof(w->blob), "%s", b);
        }
    }
    json_decref(root);
    return st;
}

static weft_status list_folder(puller *p, weft_error *err) {
    char model[8192];
    if (p->al) {
        /* The hub folder name (stories260K), the alias itself, or the hub layout
         * karpathy/tinyllamas/stories260K: the first that exists. */
        char cands[3][512];
        snprintf(cands[0], sizeof(cands[0]), "%s", p->al->mirror_sub);
        snprintf(cands[1], sizeof(cands[1]), "%s", p->al->alias);
        snprintf(cands[2], sizeof(cands[2]), "%s/%s", p->al->repo, p->al->mirror_sub);
        snprintf(p->sub, sizeof(p->sub), "%s", cands[0]);
        for (int i = 0; i < 3; i++) {
            snprintf(model, sizeof(model), "%s/%s", p->base, cands[i]);
            if (is_dir(model)) {
                snprintf(p->sub, sizeof(p->sub), "%s", cands[i]);
                break;
            }
        }
    } else {
        /* <mirror>/<org>/<name>, <mirror>/<org>--<name>, <mirror>/<name>: the first folder. */
        char cands[3][512];
        const char *slash = strchr(p->o->id, '/');
        snprintf(cands[0], sizeof(cands[0]), "%s", p->o->id);
        weft_pull_cache_name(p->o->id, cands[1], sizeof(cands[1]), NULL);
        snprintf(cands[2], sizeof(cands[2]), "%s", slash ? slash + 1 : p->o->id);
        p->sub[0] = '\0';
        for (int i = 0; i < 3 && !p->sub[0]; i++) {
            snprintf(model, sizeof(model), "%s/%s", p->base, cands[i]);
            if (is_dir(model)) snprintf(p->sub, sizeof(p->sub), "%s", cands[i]);
        }
        if (!p->sub[0])
            return weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                                  "mirror folder %s has no folder for %s (looked for %s, %s and "
                                  "%s)",
                                  p->base, p->o->id, cands[0], cands[1], cands[2]);
    }
    snprintf(model, sizeof(model), "%s/%s", p->base, p->sub);
    if (!is_dir(model))
        return weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                              "mirror folder %s has no folder %s for %s", p->base, p->sub,
                              p->o->id);
    weft_status st = WEFT_OK;
    if (p->al) {
        st = list_alias(p, err);
    } else {
        DIR *d = opendir(model);
        if (!d) return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: %s", model, strerror(errno));
        struct dirent *de;
        while (st == WEFT_OK && (de = readdir(d))) {
            if (!wanted_name(de->d_name)) continue;
            char remote[768];
            snprintf(remote, sizeof(remote), "%s/%s", p->sub, de->d_name);
            st = add_want(p, de->d_name, remote, -1, NULL, err);
        }
        closedir(d);
    }
    if (st != WEFT_OK) return st;
    /* SHA256SUMS beside the files, and at the mirror root with paths under it. */
    char path[8192], *text = NULL;
    size_t len;
    snprintf(path, sizeof(path), "%s/SHA256SUMS", model);
    st = read_sums_file(path, &text, &len, err);
    if (st == WEFT_OK && text) {
        char by[96];
        snprintf(by, sizeof(by), "SHA256SUMS (%.80s)", path);
        st = apply_sums(p, text, len, NULL, by, 0, err);
        free(text);
        text = NULL;
    }
    snprintf(path, sizeof(path), "%s/SHA256SUMS", p->base);
    if (st == WEFT_OK) st = read_sums_file(path, &text, &len, err);
    if (st == WEFT_OK && text) {
        char by[96];
        snprintf(by, sizeof(by), "SHA256SUMS (%.80s)", path);
        st = apply_sums(p, text, len, p->sub, by, 0, err);
        free(text);
    }
    return st;
}

static weft_status list_url(puller *p, weft_error *err) {
    snprintf(p->sub, sizeof(p->sub), "%s", p->al ? p->al->mirror_sub : p->o->id);
    weft_status st = WEFT_OK;
    if (p->al) st = list_alias(p, err);
    if (st != WEFT_OK) return st;
    char url[8192], *text;
    size_t len;
    int found;
    /* SHA256SUMS beside the model lists its files; without one the usual names are probed. */
    snprintf(url, sizeof(url), "%s/%s/SHA256SUMS", p->base, p->sub);
    st = http_small(p, url, "SHA256SUMS", 1, &text, &len, &found, err);
    if (st != WEFT_OK) return st;
    if (found) {
        char by[96];
        snprintf(by, sizeof(by), "SHA256SUMS (%.80s)", url);
        st = apply_sums(p, text, len, NULL, by, !p->al, err);
        free(text);
        if (st != WEFT_OK) return st;
    }
    snprintf(url, sizeof(url), "%s/SHA256SUMS", p->base);
    st = http_small(p, url, "SHA256SUMS", 1, &text, &len, &found, err);
    if (st != WEFT_OK) return st;
    if (found) {
        char by[96];
        snprintf(by, sizeof(by), "SHA256SUMS (%.80s)", url);
        st = apply_sums(p, text, len, p->sub, by, !p->al, err);
        free(text);
        if (st != WEFT_OK) return st;
    }
    if (p->al || p->n) return WEFT_OK;
    static const char *probe[] = {
        "config.json",           "generation_config.json",       "tokenizer.json",
        "tokenizer_config.json", "model.safetensors.index.json", "model.safetensors"};
    for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++) {
        char remote[768];
        snprintf(remote, sizeof(remote), "%s/%s", p->sub, probe[i]);
        want *w;
        st = add_want(p, probe[i], remote, -1, &w, err);
        if (st != WEFT_OK) return st;
        w->optional = 1;
    }
    return WEFT_OK;
}

/* ---- fetching one file -------------------------------------------------------------------- */

static void source_location(puller *p, const want *w, char *out, size_t cap) {
    if (p->kind == KIND_HUB)
        snprintf(out, cap, "%s/%s/resolve/%s/%s", p->base, p->repo, p->rev_escaped, w->remote);
    else
        snprintf(out, cap, "%s/%s", p->base, w->remote);
}

static int64_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? -1 : (int64_t)sb.st_size;
}

/* Checks a finished file against every expectation; fills w->verified. */
static weft_status verify(puller *p, want *w, const char *path, const char *loc, weft_error *err) {
    char blob[41] = "";
    int64_t size = -1;
    weft_status st = hash_file(path, w->sha256, w->blob[0] ? blob : NULL, &size, err);
    if (st != WEFT_OK) return st;
    w->got_size = size;
    if (w->size >= 0 && size != w->size)
        return weft_error_set(err, WEFT_ERR_MISMATCH, SRC, "%s from %s: %lld bytes, expected %lld",
                              w->name, loc, (long long)size, (long long)w->size);
    /* Every source is checked, and every one that disagrees is named. */
    char bad[512] = "";
    w->verified[0] = '\0';
    for (int i = 0; i < w->n_ex; i++) {
        int same = !strcmp(w->sha256, w->ex[i].sha256);
        char *dst = same ? w->verified : bad;
        size_t cap = same ? sizeof(w->verified) : sizeof(bad), l = strlen(dst);
        if (same)
            snprintf(dst + l, cap - l, "%s%s", l ? "; " : "", w->ex[i].by);
        else
            snprintf(dst + l, cap - l, "%s%s says %s", l ? "; " : "", w->ex[i].by, w->ex[i].sha256);
    }
    if (bad[0])
        return weft_error_set(err, WEFT_ERR_MISMATCH, SRC,
                              "%s from %s: SHA-256 is %s but %s; the file was not kept", w->name,
                              loc, w->sha256, bad);
    if (w->blob[0]) {
        if (strcasecmp(blob, w->blob))
            return weft_error_set(err, WEFT_ERR_MISMATCH, SRC,
                                  "%s from %s: git blob id is %s but the hub says %s", w->name, loc,
                                  blob, w->blob);
        size_t l = strlen(w->verified);
        snprintf(w->verified + l, sizeof(w->verified) - l, "%sthe hub's git blob id",
                 l ? "; " : "");
    }
    return WEFT_OK;
}

/* The previous record says this file is in place, and nothing we know now contradicts it. */
static int recorded_ok(puller *p, want *w, const char *final_path) {
    if (!p->record) return 0;
    json_t *r = json_object_get(p->record, w->name);
    const char *sha = json_string_value(json_object_get(r, "sha256"));
    json_t *jsz = json_object_get(r, "size");
    if (!sha || !json_is_integer(jsz)) return 0;
    int64_t size = (int64_t)json_integer_value(jsz);
    if (file_size(final_path) != size || (w->size >= 0 && w->size != size)) return 0;
    for (int i = 0; i < w->n_ex; i++)
        if (strcmp(sha, w->ex[i].sha256)) return 0;
    const char *ver = json_string_value(json_object_get(r, "verified_by"));
    snprintf(w->sha256, sizeof(w->sha256), "%s", sha);
    snprintf(w->verified, sizeof(w->verified), "%s", ver ? ver : "");
    w->got_size = size;
    return 1;
}

static weft_status fetch_one(puller *p, want *w, weft_error *err) {
    char final_path[8192], part[8300], loc[8192];
    snprintf(final_path, sizeof(final_path), "%s/%s", p->dir, w->name);
    snprintf(part, sizeof(part), "%s.part", final_path);
    source_location(p, w, loc, sizeof(loc));

    if (!p->o->force && file_size(final_path) >= 0) {
        if (recorded_ok(p, w, final_path)) {
            w->present = 1;
            p->stats->skipped++;
            return WEFT_OK;
        }
        /* Present but unrecorded: keep it if it passes the checks we have. */
        weft_error e2;
        weft_error_clear(&e2);
        if ((w->n_ex || w->blob[0]) && verify(p, w, final_path, final_path, &e2) == WEFT_OK) {
            w->present = 1;
            p->stats->skipped++;
            return WEFT_OK;
        }
    }
    if (p->o->force) unlink(part);

    for (int attempt = 0; attempt < 2; attempt++) {
        int64_t have = file_size(part);
        if (have < 0) have = 0;
        if (w->size >= 0 && have > w->size) {
            unlink(part);
            have = 0;
        }
        int resumed = have > 0;
        weft_status st;
        if (p->kind == KIND_FOLDER) {
            int64_t src_size = file_size(loc);
            if (src_size < 0)
                return weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                                      "%s: not in the mirror folder (expected %s)", w->name, loc);
            if (have > src_size) {
                unlink(part);
                have = 0;
                resumed = 0;
            }
            st = copy_from(loc, part, (uint64_t)have, p, w->name, &p->stats->bytes, err);
        } else if (w->size >= 0 && have == w->size) {
            st = WEFT_OK; /* a complete .part from an interrupted pull: just verify it */
        } else {
            http h;
            for (int tryno = 0;; tryno++) {
                FILE *f = fopen(part, have ? "r+b" : "wb");
                if (!f)
                    return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: %s", part, strerror(errno));
                if (have && fseeko(f, 0, SEEK_END)) {
                    fclose(f);
                    return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot seek", part);
                }
                memset(&h, 0, sizeof(h));
                h.f = f;
                h.off = (uint64_t)have;
                h.progress = p->progress;
                h.label = w->name;
                h.last_pct = p->progress ? -1 : -2;
                st = http_get(p, loc, w->name, &h, err);
                int closed = fflush(f) | fsync(fileno(f));
                fclose(f);
                if (st == WEFT_OK && closed)
                    st = weft_error_set(err, WEFT_ERR_IO, SRC, "%s: %s", part, strerror(errno));
                p->stats->bytes += h.written;
                if (h.restarted) resumed = 0;
                /* Made again from where the .part stands: a cut-off body resumes with Range. */
                if (!retry_wait(p, &h, st, tryno, w->name, err)) break;
                have = file_size(part);
                if (have < 0) have = 0;
                if (have > 0) resumed = 1;
            }
            if (st == WEFT_OK && h.linked_etag[0] && is_hex(h.linked_etag, 64))
                add_expect(w, h.linked_etag, "the hub's X-Linked-Etag");
            if (st == WEFT_OK && w->size < 0 && h.linked_size > 0) w->size = h.linked_size;
            if (st == WEFT_OK && h.status == 416 && have > 0) {
                /* Range past the end: the .part may already be whole; verification decides. */
            } else if (st == WEFT_OK && h.status != 200 && h.status != 206) {
                if (h.status == 404 && w->optional) {
                    unlink(part);
                    w->present = 0;
                    return WEFT_OK;
                }
                /* A busy server keeps the .part for the next pull to resume; any other answer
                 * (the file is gone, access refused) drops it. */
                if (!busy_status(h.status)) unlink(part);
                st = http_status_error(p, w->name, loc, &h, err);
                if (h.retries) weft_error_prefix(err, "after %d retries", h.retries);
                return st;
            }
            if (st != WEFT_OK && h.retries)
                weft_error_prefix(err, "%s: after %d retries (the .part is kept for the next pull)",
                                  w->name, h.retries);
        }
        if (st != WEFT_OK) return st;
        st = verify(p, w, part, loc, err);
        if (st == WEFT_OK) {
            if (rename(part, final_path))
                return weft_error_set(err, WEFT_ERR_IO, SRC, "cannot rename %s to %s: %s", part,
                                      final_path, strerror(errno));
            w->present = 1;
            p->stats->fetched++;
            if (resumed) p->stats->resumed++;
            return WEFT_OK;
        }
        unlink(part);
        if (!resumed || st != WEFT_ERR_MISMATCH) return st;
        weft_log(WEFT_LOG_WARN, SRC,
                 "%s: the resumed file did not verify (%s); fetching it "
                 "again from the start",
                 w->name, err->message);
    }
    return weft_error_set(err, WEFT_ERR_MISMATCH, SRC, "%s: did not verify after a full retry",
                          w->name);
}

/* ---- the record --------------------------------------------------------------------------- */

static weft_status write_record(puller *p, weft_error *err) {
    json_t *root = json_object(), *files = json_object();
    if (!root || !files) {
        json_decref(root);
        json_decref(files);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "record");
    }
    const char *kinds[] = {"hub", "url", "folder"};
    json_object_set_new(root, "id", json_string(p->o->id));
    if (p->repo[0]) json_object_set_new(root, "repo", json_string(p->repo));
    json_object_set_new(root, "revision", json_string(p->revision));
    if (p->commit[0]) json_object_set_new(root, "commit", json_string(p->commit));
    json_object_set_new(root, "source", json_string(kinds[p->kind]));
    json_object_set_new(root, "location", json_string(p->base));
    time_t now = time(NULL);
    struct tm tm;
    char when[32];
    gmtime_r(&now, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(root, "pulled_at", json_string(when));
    for (size_t i = 0; i < p->n; i++) {
        want *w = &p->w[i];
        if (!w->present) continue;
        json_t *f = json_object();
        json_object_set_new(f, "size", json_integer(w->got_size));
        json_object_set_new(f, "sha256", json_string(w->sha256));
        json_object_set_new(f, "verified_by", json_string(w->verified));
        json_object_set_new(f, "verified", json_boolean(w->verified[0] != '\0'));
        json_object_set_new(files, w->name, f);
    }
    json_object_set_new(root, "files", files);
    char path[8192], tmp[8300];
    snprintf(path, sizeof(path), "%s/.weft-pull.json", p->dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int rc = json_dump_file(root, tmp, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    if (rc || rename(tmp, path)) {
        unlink(tmp);
        return weft_error_set(err, WEFT_ERR_IO, SRC, "%s: cannot write the pull record", path);
    }
    return WEFT_OK;
}

/* ---- the pull ----------------------------------------------------------------------------- */

/* The fetched model.safetensors.index.json (its path into path), bounded like every small
 * document: *root NULL when the model has none. */
static weft_status read_index(puller *p, char *path, size_t cap, json_t **root, weft_error *err) {
    *root = NULL;
    want *idx = find_want(p, "model.safetensors.index.json");
    if (!idx || !idx->present) return WEFT_OK;
    snprintf(path, cap, "%s/%s", p->dir, idx->name);
    return weft_file_read_json(path, MAX_SMALL_DOC, 0, SRC, root, err);
}

static weft_status check_index(puller *p, weft_error *err) {
    char path[8192];
    json_t *root;
    weft_status rs = read_index(p, path, sizeof(path), &root, err);
    if (rs != WEFT_OK || !root) return rs;
    json_t *map = json_object_get(root, "weight_map");
    weft_status st = WEFT_OK;
    if (!json_is_object(map)) {
        st = weft_error_set(err, WEFT_ERR_FORMAT, SRC, "%s: expected a 'weight_map' object", path);
    } else {
        const char *k;
        json_t *v;
        json_object_foreach(map, k, v) {
            const char *shard = json_string_value(v);
            if (!shard || !safe_component(shard, strlen(shard))) {
                st = weft_error_set(err, WEFT_ERR_FORMAT, SRC,
                                    "%s: weight_map['%s'] must name a file in the same folder",
                                    path, k);
                break;
            }
            want *w = find_want(p, shard);
            if (!w || !w->present) {
                st = weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                                    "%s: weight_map['%s'] names %s, which the source does not "
                                    "have",
                                    path, k, shard);
                break;
            }
        }
    }
    json_decref(root);
    return st;
}

/* A URL-mirror model without a SHA256SUMS learns its shards from the index it fetched. */
static weft_status add_shards_from_index(puller *p, weft_error *err) {
    char path[8192];
    json_t *root;
    weft_status rs = read_index(p, path, sizeof(path), &root, err);
    if (rs != WEFT_OK || !root) return rs;
    json_t *map = json_object_get(root, "weight_map");
    const char *k;
    json_t *v;
    weft_status st = WEFT_OK;
    json_object_foreach(map, k, v) {
        const char *shard = json_string_value(v);
        if (!shard || find_want(p, shard)) continue;
        char remote[768];
        snprintf(remote, sizeof(remote), "%s/%s", p->sub, shard);
        st = add_want(p, shard, remote, -1, NULL, err);
        if (st != WEFT_OK) break;
    }
    json_decref(root);
    return st;
}

weft_status weft_pull_model(const weft_pull_options *o, weft_pull_stats *stats, weft_error *err) {
    if (!o || !o->id)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "weft_pull_model: no model id");
    weft_pull_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof(*stats));
    puller *p = calloc(1, sizeof(*p));
    want *w = calloc(MAX_FILES, sizeof(want));
    if (!p || !w) {
        free(p);
        free(w);
        return weft_error_set(err, WEFT_ERR_NOMEM, SRC, "pull state");
    }
    p->o = o;
    p->w = w;
    p->stats = stats;
    p->al = find_alias(o->id);
    int lock_fd = -1, created = 0;
    weft_status st;

    char name[512];
    st = weft_pull_cache_name(o->id, name, sizeof(name), err);
    if (st != WEFT_OK) goto out;
    snprintf(p->repo, sizeof(p->repo), "%s", p->al ? p->al->repo : o->id);
    const char *rev = o->revision && *o->revision ? o->revision : "main";
    if (!revision_ok(rev, sizeof(p->revision))) {
        st = weft_error_set(err, WEFT_ERR_INVALID, SRC,
                            "--revision '%.300s': expected a branch, tag or commit of at most %zu "
                            "characters: letters, digits, '.', '_', '-', and '/' between "
                            "components, none empty or starting with '.'",
                            rev, sizeof(p->revision) - 1);
        goto out;
    }
    snprintf(p->revision, sizeof(p->revision), "%s", rev);
    {
        size_t j = 0;
        for (const char *c = rev; *c && j + 4 < sizeof(p->rev_escaped); c++) {
            if (*c == '/') {
                memcpy(p->rev_escaped + j, "%2F", 3);
                j += 3;
            } else {
                p->rev_escaped[j++] = *c;
            }
        }
        p->rev_escaped[j] = '\0';
    }

    /* The source. */
    const char *mirror = o->mirror ? o->mirror : getenv("WEFT_MODEL_MIRROR");
    if (mirror && *mirror) {
        if (!strncmp(mirror, "http://", 7) || !strncmp(mirror, "https://", 8)) {
            p->kind = KIND_URL;
        } else {
            p->kind = KIND_FOLDER;
            if (!strncmp(mirror, "file://", 7)) mirror += 7;
        }
        snprintf(p->base, sizeof(p->base), "%s", mirror);
    } else {
        p->kind = KIND_HUB;
        const char *ep = o->endpoint ? o->endpoint : getenv("HF_ENDPOINT");
        snprintf(p->base, sizeof(p->base), "%s", ep && *ep ? ep : DEFAULT_ENDPOINT);
    }
    size_t bl = strlen(p->base);
    while (bl > 1 && p->base[bl - 1] == '/')
        p->base[--bl] = '\0';
    if (p->kind != KIND_FOLDER) {
        const char *h = strstr(p->base, "://");
        h = h ? h + 3 : p->base;
        size_t hl = strcspn(h, "/:");
        snprintf(p->host, sizeof(p->host), "%.*s", (int)hl, h);
    } else if (!is_dir(p->base)) {
        st = weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                            "WEFT_MODEL_MIRROR %s: not a folder (and not an http(s) URL)", p->base);
        goto out;
    }
    p->progress = o->progress < 0 ? isatty(STDERR_FILENO) : o->progress;

    /* The destination, locked against a second pull into it. */
    if (o->dir && *o->dir)
        snprintf(p->dir, sizeof(p->dir), "%s", o->dir);
    else if ((st = weft_pull_model_dir(o->id, p->dir, sizeof(p->dir), err)) != WEFT_OK)
        goto out;
    created = !is_dir(p->dir);
    if ((st = mkdir_p(p->dir, err)) != WEFT_OK) goto out;
    {
        char lock[8300];
        snprintf(lock, sizeof(lock), "%s/.weft-pull.lock", p->dir);
        lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB)) {
            st = weft_error_set(err, WEFT_ERR_IO, SRC,
                                "%s: another weft pull is writing this folder (or the lock "
                                "cannot be taken: %s)",
                                p->dir, strerror(errno));
            goto out;
        }
        char rec[8300];
        snprintf(rec, sizeof(rec), "%s/.weft-pull.json", p->dir);
        json_t *old = o->force ? NULL : json_load_file(rec, 0, NULL);
        if (old) {
            p->record = json_incref(json_object_get(old, "files"));
            json_decref(old);
        }
    }

    /* The file list. */
    if (p->kind == KIND_FOLDER)
        st = list_folder(p, err);
    else if (p->kind == KIND_URL)
        st = list_url(p, err);
    else if (p->al)
        st = list_alias(p, err);
    else
        st = list_hub(p, err);
    if (st != WEFT_OK) goto out;

    for (size_t i = 0; i < p->n && st == WEFT_OK; i++) {
        st = fetch_one(p, &p->w[i], err);
        if (st == WEFT_OK && p->kind == KIND_URL &&
            !strcmp(p->w[i].name, "model.safetensors.index.json"))
            st = add_shards_from_index(p, err);
    }
    if (st != WEFT_OK) goto out;

    if (!p->al) {
        int has_cfg = 0, has_weights = 0;
        for (size_t i = 0; i < p->n; i++) {
            if (!p->w[i].present) continue;
            has_cfg |= !strcmp(p->w[i].name, "config.json");
            size_t l = strlen(p->w[i].name);
            has_weights |= l > 12 && !strcmp(p->w[i].name + l - 12, ".safetensors");
        }
        if (!has_cfg || !has_weights) {
            st = weft_error_set(err, WEFT_ERR_NOT_FOUND, SRC,
                                "%s at %s: expected config.json and *.safetensors weights, "
                                "found %s%s",
                                o->id, p->base, has_cfg ? "config.json" : "no config.json",
                                has_weights ? " and weights" : " and no weights");
            goto out;
        }
        if ((st = check_index(p, err)) != WEFT_OK) goto out;
    }
    st = write_record(p, err);
    for (size_t i = 0; i < p->n; i++)
        stats->files += p->w[i].present;
    snprintf(stats->dir, sizeof(stats->dir), "%s", p->dir);

out:
    if (lock_fd >= 0) close(lock_fd);
    if (st != WEFT_OK && created) {
        /* A failed first pull leaves no empty model folder behind (a .part keeps it). */
        char lock[8300];
        snprintf(lock, sizeof(lock), "%s/.weft-pull.lock", p->dir);
        unlink(lock);
        rmdir(p->dir);
    }
    json_decref(p->record);
    free(p->w);
    free(p);
    return st;
}
