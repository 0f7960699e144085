/* Unicode helpers for the tokenizer: strict UTF-8 decoding, the lossy repair that every input
 * goes through (each maximal invalid subpart becomes U+FFFD, as Rust's from_utf8_lossy does),
 * Unicode normalization forms (NFC, NFD, NFKC, NFKD), full lowercase mapping and the White_Space
 * property. The tables are generated (tok_unicode_tables.c); this header declares them. */
#ifndef WEFT_TEXT_TOK_UNICODE_H
#define WEFT_TEXT_TOK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct weft_tok_ccc_entry {
    uint32_t cp;
    uint8_t ccc;
} weft_tok_ccc_entry;

typedef struct weft_tok_decomp_entry {
    uint32_t cp;
    uint16_t offset; /* into weft_tok_decomp_data */
    uint8_t len;
    uint8_t compat; /* 0: full canonical decomposition (NFD); 1: full compatibility (NFKD) */
} weft_tok_decomp_entry;

typedef struct weft_tok_comp_entry {
    uint32_t first, second, composite;
} weft_tok_comp_entry;

typedef struct weft_tok_lower_entry {
    uint32_t cp;
    uint8_t len;
    uint32_t to[3];
} weft_tok_lower_entry;

extern const char weft_tok_unicode_version[];
extern const weft_tok_ccc_entry weft_tok_ccc[];
extern const size_t weft_tok_ccc_count;
extern const weft_tok_decomp_entry weft_tok_decomp[];
extern const size_t weft_tok_decomp_count;
extern const uint32_t weft_tok_decomp_data[];
extern const size_t weft_tok_decomp_data_count;
extern const weft_tok_comp_entry weft_tok_comp[];
extern const size_t weft_tok_comp_count;
extern const weft_tok_lower_entry weft_tok_lower[];
extern const size_t weft_tok_lower_count;

/* Decodes one code point of valid UTF-8 at s[0..n); returns its length (1..4) or 0 when the
 * bytes there are not a complete, well-formed sequence. */
size_t weft_tok_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Writes cp as UTF-8 into out (at least 4 bytes); returns the length. */
size_t weft_tok_utf8_encode(uint32_t cp, char *out);
/* Length of the character starting at s (1 for an invalid lead byte); s must be valid UTF-8. */
size_t weft_tok_utf8_len(const char *s, size_t n);
int weft_tok_utf8_valid(const char *s, size_t n);
/* 1 when s[0..n) (n >= 1) is a proper prefix of a well-formed character: a character that more
 * bytes could still complete. */
int weft_tok_utf8_partial(const char *s, size_t n);
/* Returns a malloc'ed, NUL-terminated copy of s where every maximal invalid subpart is replaced
 * by U+FFFD; NULL when out of memory. */
char *weft_tok_utf8_repair(const char *s, size_t n, size_t *out_len);

typedef enum weft_tok_nf {
    WEFT_TOK_NFC = 0,
    WEFT_TOK_NFD = 1,
    WEFT_TOK_NFKC = 2,
    WEFT_TOK_NFKD = 3,
} weft_tok_nf;

/* Normalizes valid UTF-8; *out is malloc'ed and NUL-terminated. Returns 0, or -1 when out of
 * memory. */
int weft_tok_normalize(weft_tok_nf form, const char *s, size_t n, char **out, size_t *out_len);
/* Full lowercase mapping per code point (SpecialCasing without language rules). The
 * context-dependent final sigma is not applied: capital sigma always becomes U+03C3. Same
 * contract as weft_tok_normalize. */
int weft_tok_lowercase(const char *s, size_t n, char **out, size_t *out_len);
int weft_tok_is_whitespace(uint32_t cp);

#endif
