/* The tokenizer's internal model, shared by its files: the pipeline stages of a Hugging Face
 * tokenizer.json as plain tagged structs (normalizer, pre-tokenizer, BPE model, added tokens,
 * post-processor, decoder), the string-list type the stages pass along, and the hash maps behind
 * the vocabulary and the merge ranks. tok_json.c and tok_gguf.c fill a weft_tokenizer;
 * tokenizer.c runs it. */
#ifndef WEFT_TEXT_TOK_INTERNAL_H
#define WEFT_TEXT_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/tokenizer.h"

#define TOK_SOURCE "tokenizer"

/* ---- growable byte buffer ---------------------------------------------------------------- */
typedef struct tok_buf {
    char *p;
    size_t len, cap;
} tok_buf;

int tok_buf_reserve(tok_buf *b, size_t extra); /* 0 ok, -1 out of memory */
int tok_buf_put(tok_buf *b, const void *data, size_t n);
int tok_buf_putc(tok_buf *b, char c);

/* ---- a list of strings (the pieces a pre-tokenizer produces) ---------------------------- */
typedef struct tok_list {
    tok_buf text;      /* the pieces' bytes, back to back */
    size_t *off, *len; /* (n) */
    uint8_t *first;    /* (n) 1 when the piece starts at offset 0 of the original input */
    size_t n, cap;
} tok_list;

int tok_list_add(tok_list *l, const char *s, size_t n, int first);
void tok_list_clear(tok_list *l);
void tok_list_free(tok_list *l);

/* ---- string -> id hash map (open addressing over the ids; keys live in the vocab) -------- */
typedef struct tok_vocab {
    char *arena; /* every piece, NUL-terminated */
    size_t arena_len, arena_cap;
    uint32_t *piece_off; /* (n_ids) offset into arena, UINT32_MAX for an unused id */
    uint32_t *piece_len; /* (n_ids) */
    uint32_t n_ids;      /* highest id + 1 */
    int32_t *slots;      /* (n_slots) id, or -1 */
    size_t n_slots, n_keys;
} tok_vocab;

/* n_keys: how many pieces will be added (sizes the hash table). */
int tok_vocab_init(tok_vocab *v, uint32_t n_ids, size_t n_keys);
/* Adds piece as id: 0 ok, 1 when the id or the piece is already present, -1 no memory. */
int tok_vocab_add(tok_vocab *v, int32_t id, const char *s, size_t n);
int32_t tok_vocab_find(const tok_vocab *v, const char *s, size_t n);    /* -1 when absent */
const char *tok_vocab_piece(const tok_vocab *v, int32_t id, size_t *n); /* NULL when absent */
void tok_vocab_free(tok_vocab *v);

/* ---- merges: (left id, right id) -> (rank, merged id) ------------------------------------ */
typedef struct tok_merge_slot {
    uint64_t key; /* left << 32 | right; UINT64_MAX when empty */
    int32_t rank, id;
} tok_merge_slot;

typedef struct tok_merges {
    tok_merge_slot *slots;
    size_t n_slots, n;
} tok_merges;

int tok_merges_init(tok_merges *m, size_t expected);
/* 0 ok, 1 when the pair existed (the later rank replaces it, as HF's map build does), -1 no
 * memory. */
int tok_merges_add(tok_merges *m, int32_t left, int32_t right, int32_t rank, int32_t id);
const tok_merge_slot *tok_merges_find(const tok_merges *m, int32_t left, int32_t right);
void tok_merges_free(tok_merges *m);

/* ---- pipeline stages --------------------------------------------------------------------- */
typedef enum tok_pattern_kind {
    TOK_PATTERN_STRING = 0,
    TOK_PATTERN_REGEX = 1,
} tok_pattern_kind;

/* A pattern of a Replace or Split: a literal string or a PCRE2 regex (UTF + UCP). */
typedef struct tok_pattern {
    int kind;
    char *literal;
    size_t literal_len;
    pcre2_code *re;
} tok_pattern;

typedef enum tok_norm_type {
    TOK_NORM_NFC = 1,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_STRIP,
    TOK_NORM_SEQUENCE,
} tok_norm_type;

typedef struct tok_normalizer {
    int type;
    tok_pattern pattern; /* Replace */
    char *content;       /* Replace: the replacement; Prepend: the prefix */
    size_t content_len;
    int strip_left, strip_right;
    struct tok_normalizer *items; /* Sequence */
    size_t n_items;
} tok_normalizer;

typedef enum tok_pre_type {
    TOK_PRE_SPLIT = 1,
    TOK_PRE_BYTELEVEL,
    TOK_PRE_METASPACE,
    TOK_PRE_WHITESPACE,
    TOK_PRE_WHITESPACE_SPLIT,
    TOK_PRE_DIGITS,
    TOK_PRE_PUNCTUATION,
    TOK_PRE_SEQUENCE,
} tok_pre_type;

typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED = 0,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum tok_prepend_scheme {
    TOK_PREPEND_ALWAYS = 0,
    TOK_PREPEND_FIRST,
    TOK_PREPEND_NEVER,
} tok_prepend_scheme;

typedef struct tok_pretok {
    int type;
    tok_pattern pattern; /* Split, and the built-in regex of ByteLevel/Whitespace/Digits/... */
    int behavior;        /* tok_split_behavior */
    int invert;
    int add_prefix_space; /* ByteLevel */
    int use_regex;        /* ByteLevel */
    char replacement[8];  /* Metaspace, UTF-8 */
    size_t replacement_len;
    int prepend_scheme;       /* Metaspace */
    int split;                /* Metaspace */
    struct tok_pretok *items; /* Sequence */
    size_t n_items;
} tok_pretok;

typedef enum tok_dec_type {
    TOK_DEC_BYTELEVEL = 1,
    TOK_DEC_REPLACE,
    TOK_DEC_BYTEFALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
    TOK_DEC_METASPACE,
    TOK_DEC_SEQUENCE,
} tok_dec_type;

typedef struct tok_decoder {
    int type;
    tok_pattern pattern; /* Replace (a string pattern only, as HF's decoder) */
    char *content;       /* Replace: the replacement; Strip: the char to strip */
    size_t content_len;
    int start, stop;     /* Strip */
    char replacement[8]; /* Metaspace */
    size_t replacement_len;
    int prepend_scheme;        /* Metaspace */
    struct tok_decoder *items; /* Sequence */
    size_t n_items;
} tok_decoder;

typedef struct tok_added {
    int32_t id;
    char *content;
    size_t len;
    /* What is searched for: the content, or for a normalized token the content passed through
     * the normalizer (as HF builds its normalized trie). Owned when != content. */
    char *match;
    size_t match_len;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* Pre-tokenizer regexes of well-known families (facts from their published tokenizer.json files):
 * GPT-2's (ByteLevel use_regex), Llama 3's and Qwen2's (Split). */
#define TOK_GPT2_REGEX                                                                             \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define TOK_LLAMA3_REGEX                                                                           \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TOK_QWEN2_REGEX                                                                            \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* ---- the tokenizer ------------------------------------------------------------------------ */
struct weft_tokenizer {
    char name[256]; /* for errors: the file it came from */
    /* model (BPE) */
    tok_vocab vocab;
    tok_merges merges;
    int32_t unk_id; /* -1: none */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t byte_ids[256]; /* <0xNN> pieces for byte fallback, -1 when absent */
    /* stages; NULL when absent */
    tok_normalizer *normalizer;
    tok_pretok *pretok;
    tok_decoder *decoder;
    /* added tokens, longest first within each group of equal first byte */
    tok_added *added;
    size_t n_added;
    uint32_t *added_order;   /* (n_added) indices by first byte, longest first */
    size_t added_start[257]; /* added_order[added_start[b] .. added_start[b + 1]) start with b */
    uint8_t *is_special;     /* (vocab_size) */
    int32_t *added_of_id;    /* (vocab_size) index into added, or -1 */
    /* post-processor flattened to what "single sequence, add_special_tokens" adds */
    int32_t *post_prefix, *post_suffix;
    size_t n_post_prefix, n_post_suffix;
    int has_post_processor;
    uint32_t vocab_size; /* highest id + 1 over the model and the added tokens */
    pcre2_code *word_re; /* \w at a position, for added tokens' single_word */
    /* What the decoder does with bytes, for the streaming detokenizer: 2 when a ByteLevel step
     * maps pieces to bytes, 1 when a ByteFallback step turns <0xNN> pieces into bytes, else 0. */
    int byte_decoding;
};

/* Finishes a tokenizer filled by a loader: the special flags, the added-token index and the
 * single_word regex. */
weft_status tok_finish(weft_tokenizer *tok, weft_error *err);
weft_status tok_pattern_compile(tok_pattern *p, int kind, const char *s, size_t n,
                                const char *field, const char *name, weft_error *err);
void tok_pattern_free(tok_pattern *p);
void tok_normalizer_free(tok_normalizer *n);
void tok_pretok_free(tok_pretok *p);
void tok_decoder_free(tok_decoder *d);

/* Stages, implemented in tok_pipeline.c. All return 0 or -1 on out of memory. */
int tok_normalize(const tok_normalizer *n, const char *s, size_t len, char **out, size_t *out_len);
int tok_pretokenize(const tok_pretok *p, tok_list *pieces);
/* Runs the decoder chain over the pieces; writes the joined text to out. lossy: an ill-formed
 * run of <0xNN> pieces keeps its well-formed characters and gets one U+FFFD per maximal invalid
 * subpart (the streaming detokenizer's rule) instead of HF's one U+FFFD per byte of the run. */
int tok_decode_pieces(const tok_decoder *d, tok_list *pieces, tok_buf *out, int lossy);
/* BPE (tok_bpe.c): appends the ids of one pre-tokenized word. */
int tok_bpe_word(const weft_tokenizer *tok, const char *s, size_t n, int32_t **ids, size_t *n_ids,
                 size_t *cap);

/* Loaders. */
weft_status tok_load_json(const char *json, size_t len, const char *name, weft_tokenizer **out,
                          weft_error *err);
weft_status tok_load_gguf(const unsigned char *data, size_t len, const char *name,
                          weft_tokenizer **out, weft_error *err);
weft_tokenizer *tok_alloc(const char *name);

/* The GPT-2 byte <-> unicode map of ByteLevel. */
uint32_t tok_byte_to_cp(unsigned char b);
int tok_cp_to_byte(uint32_t cp); /* -1 when cp is not in the map */

#endif
