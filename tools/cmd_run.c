/* `weft run`: generate text from a prompt and stream it to stdout as it is produced. Opens the
 * CPU baseline on stories260K unless told otherwise (engine_cli.h), encodes the prompt (through
 * the model's chat template with --chat), submits one request and steps the engine until it
 * finishes. Statistics go to stderr so stdout holds only the generated text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cli.h"
#include "engine/engine.h"
#include "engine_cli.h"
#include "files/config.h"
#include "text/chat.h"
#include "util/error.h"

#define RUN_MAX_STOPS 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft run [options] PROMPT\n"
            "\n"
            "Generates text from PROMPT and streams it to stdout.\n"
            "\n"
            "options:\n"
            "  --candidate PATH          a lock or a candidate manifest (default: %s if present,\n"
            "                            else %s)\n"
            "  --model DIR               model directory replacing the manifest's model\n"
            "  --max-tokens N            tokens to generate (default 256)\n"
            "  --temperature T           0 = greedy (default: generation_config.json, else 0.8)\n"
            "  --top-p P                 nucleus sampling (default: generation_config.json, else "
            "0.95)\n"
            "  --top-k K                 0 = off (default: generation_config.json, else 0)\n"
            "  --min-p M                 0 = off (default 0)\n"
            "  --repetition-penalty R    1 = off (default 1)\n"
            "  --seed S                  sampling seed (default: from the clock; printed with -v)\n"
            "  --stop S                  stop string, repeatable (up to %d)\n"
            "  --threads N               worker threads (default: the candidate's, else 1)\n"
            "  --max-model-len N         context length (default: candidate's, else model's, "
            "at most 4096)\n"
            "  --chat                    wrap PROMPT as a user message in the model's chat "
            "template\n"
            "  --ignore-eos              keep generating past the end-of-sequence token\n"
            "  -v, --verbose             print the seed and speed to stderr\n",
            WEFT_BASELINE_LOCK, WEFT_BASELINE_MANIFEST, RUN_MAX_STOPS);
}

typedef struct run_state {
    uint32_t finish;
    uint32_t n_generated;
    char message[512];
} run_state;

static void on_event(void *user, const weft_token_event *ev) {
    run_state *rs = user;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
    }
    rs->n_generated = ev->n_generated;
    if (ev->finish) {
        rs->finish = ev->finish;
        if (ev->message) snprintf(rs->message, sizeof(rs->message), "%s", ev->message);
    }
}

/* The prompt's ids: plain text with the tokenizer's special tokens (BOS), or a chat turn. */
static weft_status encode_prompt(weft_engine *e, const char *prompt, int chat, int32_t **ids,
                                 size_t *n, weft_error *err) {
    const weft_tokenizer *tok = weft_engine_tokenizer(e);
    if (!tok)
        return weft_error_set(err, WEFT_ERR_NOT_FOUND, weft_engine_candidate(e)->model_dir,
                              "the model has no tokenizer.json; weft run needs one");
    if (!chat) return weft_tokenizer_encode(tok, prompt, strlen(prompt), 1, 1, ids, n, err);
    weft_chat_template *t = NULL;
    weft_status s = weft_chat_template_load(weft_engine_candidate(e)->model_dir, &t, err);
    if (s != WEFT_OK) return s;
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", prompt);
    char *msgs_text = msgs ? json_dumps(msgs, JSON_COMPACT) : NULL;
    json_decref(msgs);
    char *text = NULL;
    if (!msgs_text)
        s = weft_error_set(err, WEFT_ERR_NOMEM, "run", "out of memory");
    else
        s = weft_chat_render(t, msgs_text, 1, NULL, &text, err);
    free(msgs_text);
    weft_chat_template_free(t);
    /* The template already wrote the special tokens it wants (as HF apply_chat_template). */
    if (s == WEFT_OK) s = weft_tokenizer_encode(tok, text, strlen(text), 0, 1, ids, n, err);
    free(text);
    return s;
}

/* A probability option: a number from 0 to 1 (above 0 when open_low). */
static int parse_unit(const char *opt, const char *val, int open_low, float *out) {
    double v;
    if (weft_cli_parse_f64_range("run", opt, val, 0, 1, &v)) return -1;
    if (open_low && v == 0) {
        fprintf(stderr, "weft run: %s: expected a number above 0 and at most 1, got '%s'\n", opt,
                val);
        return -1;
    }
    *out = (float)v;
    return 0;
}

int weft_cmd_run(int argc, char **argv) {
    const char *candidate = NULL, *model = NULL, *prompt = NULL;
    const char *stops[RUN_MAX_STOPS];
    uint32_t n_stops = 0, max_tokens = 256, threads = 0, max_len = 0;
    int chat = 0, verbose = 0, ignore_eos = 0;
    int have_temp = 0, have_top_p = 0, have_top_k = 0, have_seed = 0;
    float temperature = 0.8f, top_p = 0.95f, min_p = 0.0f, rep = 1.0f;
    uint32_t top_k = 0;
    uint64_t seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                                                               \
    do {                                                                                           \
        if (!val) {                                                                                \
            fprintf(stderr, "weft run: %s needs a value\n", a);                                    \
            return 2;                                                                              \
        }                                                                                          \
        i++;                                                                                       \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--candidate")) {
            NEED_VALUE();
            candidate = val;
        } else if (!strcmp(a, "--model")) {
            NEED_VALUE();
            model = val;
        } else if (!strcmp(a, "--max-tokens")) {
            NEED_VALUE();
            if (weft_cli_parse_u32("run", a, val, &max_tokens)) return 2;
        } else if (!strcmp(a, "--temperature")) {
            NEED_VALUE();
            if (weft_cli_parse_f32("run", a, val, &temperature)) return 2;
            have_temp = 1;
        } else if (!strcmp(a, "--top-p")) {
            NEED_VALUE();
            if (parse_unit("--top-p", val, 1, &top_p)) return 2;
            have_top_p = 1;
        } else if (!strcmp(a, "--top-k")) {
            NEED_VALUE();
            if (weft_cli_parse_u32("run", a, val, &top_k)) return 2;
            have_top_k = 1;
        } else if (!strcmp(a, "--min-p")) {
            NEED_VALUE();
            if (parse_unit("--min-p", val, 0, &min_p)) return 2;
        } else if (!strcmp(a, "--repetition-penalty")) {
            NEED_VALUE();
            if (weft_cli_parse_f32("run", a, val, &rep)) return 2;
            if (rep == 0) {
                fprintf(stderr,
                        "weft run: --repetition-penalty: expected a number above 0, got "
                        "'%s'\n",
                        val);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            NEED_VALUE();
            if (weft_cli_parse_u64("run", a, val, &seed)) return 2;
            have_seed = 1;
        } else if (!strcmp(a, "--stop")) {
            NEED_VALUE();
            if (n_stops == RUN_MAX_STOPS) {
                fprintf(stderr, "weft run: --stop: at most %d stop strings\n", RUN_MAX_STOPS);
                return 2;
            }
            if (!val[0]) {
                fprintf(stderr, "weft run: --stop: expected a non-empty string\n");
                return 2;
            }
            stops[n_stops++] = val;
        } else if (!strcmp(a, "--threads")) {
            NEED_VALUE();
            if (weft_cli_parse_u32("run", a, val, &threads)) return 2;
        } else if (!strcmp(a, "--max-model-len")) {
            NEED_VALUE();
            if (weft_cli_parse_u32("run", a, val, &max_len)) return 2;
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = 1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "weft run: unknown option %s (see weft run --help)\n", a);
            return 2;
        } else if (!prompt) {
            prompt = a;
        } else {
            fprintf(stderr, "weft run: one PROMPT expected; quote it (got '%s' and '%s')\n", prompt,
                    a);
            return 2;
        }
#undef NEED_VALUE
    }
    if (!prompt) {
        usage(stderr);
        return 2;
    }
    if (max_tokens == 0) {
        fprintf(stderr, "weft run: --max-tokens: expected at least 1\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_engine_options o;
    weft_engine_options_default(&o);
    char path[1100];
    if (weft_cli_engine_target(candidate, model, &o, path, sizeof(path), &err) != WEFT_OK)
        return weft_cli_fail("run", &err);
    o.threads = threads;
    o.max_model_len = max_len;
    weft_engine *e = NULL;
    if (weft_engine_open(&o, &e, &err) != WEFT_OK) return weft_cli_fail("run", &err);

    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (encode_prompt(e, prompt, chat, &ids, &n_ids, &err) != WEFT_OK) {
        weft_engine_close(e);
        return weft_cli_fail("run", &err);
    }
    weft_request_params rp;
    weft_request_params_default(&rp);
    /* Sampling by default: the model's generation_config.json, else the values in --help. */
    const weft_generation_config *gen = weft_engine_generation_config(e);
    if (!have_temp && gen->has_temperature) temperature = gen->temperature;
    if (!have_top_p && gen->has_top_p) top_p = gen->top_p;
    if (!have_top_k && gen->has_top_k && gen->top_k >= 0) top_k = (uint32_t)gen->top_k;
    rp.sampling.temperature = temperature;
    rp.sampling.top_p = top_p;
    rp.sampling.top_k = (int32_t)top_k;
    rp.sampling.min_p = min_p;
    rp.sampling.repetition_penalty = rep;
    if (!have_seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    rp.sampling.seed = seed;
    rp.max_tokens = max_tokens;
    rp.stop = stops;
    rp.n_stop = n_stops;
    rp.ignore_eos = ignore_eos;
    run_state rs;
    memset(&rs, 0, sizeof(rs));
    rp.callback = on_event;
    rp.user = &rs;
    if (verbose)
        fprintf(stderr,
                "weft run: %zu prompt tokens, seed %llu, temperature %g, top-p %g, "
                "top-k %u, %u threads\n",
                n_ids, (unsigned long long)seed, (double)temperature, (double)top_p, top_k,
                weft_engine_threads(e));
    /* Show the prompt as typed (not for chat: the template's text is not the user's). */
    if (!chat) {
        fputs(prompt, stdout);
        fflush(stdout);
    }
    uint64_t id = 0;
    weft_status s = weft_request_submit(e, ids, n_ids, &rp, &id, &err);
    free(ids);
    double t0 = weft_cli_now_s();
    while (s == WEFT_OK && weft_engine_active(e)) {
        s = weft_engine_step(e, &err);
        if (s == WEFT_FINISHED || s == WEFT_AGAIN) s = WEFT_OK;
    }
    double dt = weft_cli_now_s() - t0;
    fputc('\n', stdout);
    fflush(stdout);
    int rc = 0;
    if (s != WEFT_OK) {
        rc = weft_cli_fail("run", &err);
    } else if (rs.finish == WEFT_FINISH_ERROR) {
        fprintf(stderr, "weft run: %s\n", rs.message);
        rc = 1;
    }
    if (verbose && rc == 0)
        fprintf(stderr, "weft run: %u tokens in %.3f s (%.1f tok/s), finish: %s\n", rs.n_generated,
                dt, dt > 0 ? rs.n_generated / dt : 0.0, weft_finish_name(rs.finish));
    weft_engine_close(e);
    return rc;
}
