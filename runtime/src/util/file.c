/* Whole-file reads: util/file.h. */
#include "util/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/error.h"

weft_status weft_file_absent_ok(weft_status st, const weft_error *fe, weft_error *err) {
    if (st == WEFT_ERR_NOT_FOUND) return WEFT_OK;
    if (st && err) *err = *fe;
    return st;
}

weft_status weft_file_read_json(const char *path, size_t max_bytes, size_t flags,
                                const char *source, json_t **out, weft_error *err) {
    *out = NULL;
    char *text;
    size_t len;
    weft_status st = weft_file_read(path, max_bytes, "a JSON file", source, &text, &len, err);
    if (st) return st;
    json_error_t je;
    *out = json_loadb(text, len, flags, &je);
    free(text);
    if (!*out)
        return weft_error_set(err, WEFT_ERR_FORMAT, source ? source : path, "%s:%d:%d: %s", path,
                              je.line, je.column, je.text);
    return WEFT_OK;
}

weft_status weft_file_read(const char *path, size_t max_bytes, const char *what, const char *source,
                           char **text, size_t *len, weft_error *err) {
    *text = NULL;
    *len = 0;
    /* source NULL: the path is the source, and the messages do not repeat it */
    const char *pre = source ? path : "", *sep = source ? ": " : "";
    if (!source) source = path;
    FILE *f = fopen(path, "rbe"); /* e: close-on-exec (glibc), as the lock reader had it */
    if (!f)
        return weft_error_set(err, errno == ENOENT ? WEFT_ERR_NOT_FOUND : WEFT_ERR_IO, source,
                              "%s%scannot open: %s", pre, sep, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        int e = errno;
        fclose(f);
        return weft_error_set(err, WEFT_ERR_IO, source, "%s%scannot stat: %s", pre, sep,
                              strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        fclose(f);
        return weft_error_set(err, WEFT_ERR_IO, source, "%s%sexpected a regular file, found %s",
                              pre, sep, S_ISDIR(sb.st_mode) ? "a directory" : "another file type");
    }
    size_t size = (size_t)sb.st_size, cap = max_bytes ? max_bytes : (size_t)-1 / 2;
    if (sb.st_size < 0 || size > cap) {
        fclose(f);
        return weft_error_set(err, WEFT_ERR_FORMAT, source,
                              "%s%sexpected %s of at most %zu bytes, found a larger file", pre, sep,
                              what, cap);
    }
    /* one byte more than the size: a file that grew since fstat shows as too many bytes */
    char *buf = malloc(size + 2);
    if (!buf) {
        fclose(f);
        return weft_error_set(err, WEFT_ERR_NOMEM, source, "%s%sout of memory for %zu bytes", pre,
                              sep, size);
    }
    size_t n = fread(buf, 1, size + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return weft_error_set(err, WEFT_ERR_IO, source, "%s%sread failed", pre, sep);
    }
    if (n != size) {
        free(buf);
        return weft_error_set(err, WEFT_ERR_IO, source,
                              "%s%schanged size while read (%zu bytes, then %s%zu)", pre, sep, size,
                              n > size ? "more than " : "", n > size ? size : n);
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return WEFT_OK;
}

const char *weft_json_kind(const json_t *v) {
    if (!v) return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}
