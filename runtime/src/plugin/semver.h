/* Semantic versions (semver 2.0.0) and version ranges for plugin manifests. A version is
 * MAJOR.MINOR.PATCH[-PRE][+BUILD]; precedence follows the spec (build metadata ignored, a
 * pre-release sorts before its release, identifiers compared numerically or in ASCII). A range
 * is one or more comparator sets joined by "||"; a set is comparators separated by spaces, all
 * of which must hold. Forms: "*", "1.x", "1.2.x", "=1.2.3", "1.2.3", ">=1.2.0 <2.0.0", "^1.2",
 * "~1.2.3", ">1", "<=2.1". docs/MANIFEST.md has the grammar. Everything here is pure: no
 * allocation, no I/O. */
#ifndef WEFT_PLUGIN_SEMVER_H
#define WEFT_PLUGIN_SEMVER_H

#include <stddef.h>
#include <stdint.h>

#include "weft/plugin.h"

#define WEFT_SEMVER_PART_MAX 64  /* pre-release and build text, with the NUL */
#define WEFT_SEMVER_TEXT_MAX 160 /* a formatted version */
#define WEFT_RANGE_TEXT_MAX 128  /* the text of a range, with the NUL */
#define WEFT_RANGE_MAX_COMPARATORS 16

typedef struct weft_semver {
    uint64_t major;
    uint64_t minor;
    uint64_t patch;
    char pre[WEFT_SEMVER_PART_MAX];   /* "alpha.1"; "" = a release */
    char build[WEFT_SEMVER_PART_MAX]; /* "sha.5114f85"; "" = none; ignored by precedence */
} weft_semver;

typedef enum weft_semver_op {
    WEFT_SEMVER_EQ = 1, /* =  */
    WEFT_SEMVER_LT = 2, /* <  */
    WEFT_SEMVER_LE = 3, /* <= */
    WEFT_SEMVER_GT = 4, /* >  */
    WEFT_SEMVER_GE = 5, /* >= */
} weft_semver_op;

typedef struct weft_semver_comparator {
    uint8_t op;  /* weft_semver_op */
    uint8_t set; /* index of the "||" alternative it belongs to */
    uint8_t reserved[6];
    weft_semver v;
} weft_semver_comparator;

/* A parsed range. "*" is n == 0 with n_sets == 1 (matches every release). */
typedef struct weft_semver_range {
    char text[WEFT_RANGE_TEXT_MAX]; /* as written, trimmed */
    uint32_t n_sets;
    uint32_t n;
    weft_semver_comparator c[WEFT_RANGE_MAX_COMPARATORS];
} weft_semver_range;

/* Parses a full version (no leading "v", no missing parts). err names what is wrong
 * ("expected MAJOR.MINOR.PATCH, found \"1.2\""); the caller prefixes file and field. */
weft_status weft_semver_parse(const char *text, weft_semver *out, weft_error *err);
/* <0, 0, >0 by semver precedence (build metadata ignored). */
int weft_semver_compare(const weft_semver *a, const weft_semver *b);
/* Writes the canonical text into buf (always NUL-terminated); returns the length it needed. */
size_t weft_semver_format(const weft_semver *v, char *buf, size_t cap);

/* Parses a range (see the file comment). */
weft_status weft_semver_range_parse(const char *text, weft_semver_range *out, weft_error *err);
/* The range "*". */
void weft_semver_range_any(weft_semver_range *out);
/* 1 when v satisfies the range. A pre-release version satisfies a set only when one of the
 * set's comparators names the same MAJOR.MINOR.PATCH with a pre-release (so "^1.0.0" does not
 * pick up 2.0.0-rc.1 nor 1.5.0-beta), as npm does. */
int weft_semver_satisfies(const weft_semver_range *r, const weft_semver *v);

#endif
