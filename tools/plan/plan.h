/* `weft plan`: what to build next, and whether the last plan held. A plan answers a result of
 * `weft eval run`: the result says how far decode and prefill are from their limits and how
 * noisy each number is; the plan (YAML, docs/PLAN.md) lists levers, each a technique or change
 * with the KPIs it moves and a low / expected / high forecast of the speed-up. The planner
 * ranks the gaps, refuses plans that dodge them (stopping early, leaving a gap unanswered,
 * forecasting within noise, chasing time to first token alone, a kernel lever that Amdahl's law
 * says cannot reach its forecast), and after the next eval sets forecast beside measured. */
#ifndef WEFT_TOOLS_PLAN_H
#define WEFT_TOOLS_PLAN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft/plugin.h"

/* The least margin a gap or a forecast must clear, whatever the measured noise: run-to-run
 * timing differences below 1% are not trusted on shared machines. */
#define WEFT_PLAN_MIN_MARGIN 0.01
/* A gap or gain is "beyond noise" when it exceeds this many times the KPI's run-to-run spread. */
#define WEFT_PLAN_NOISE_SIGMAS 2.0

enum { WEFT_PLAN_DECODE = 0, WEFT_PLAN_PREFILL = 1, WEFT_PLAN_TTFT = 2, WEFT_PLAN_NKPI = 3 };

typedef struct weft_plan_kpi {
    const char *name; /* "decode", "prefill", "ttft" */
    int present;      /* the result has it with a limit */
    double value, limit, fraction, noise;
    double gap;      /* 1 - fraction (0 when at or past the limit) */
    double margin;   /* max(2 x noise, 1%) */
    int above_noise; /* gap > margin */
    int leads;       /* ranked first (decode and prefill may both lead when within noise) */
    int rank;        /* 1-based order among present KPIs */
} weft_plan_kpi;

/* Reads summary.kpis of a result into k[WEFT_PLAN_NKPI] and ranks them. Time to first token is
 * ranked for information but never leads. Fails when the result has neither decode nor prefill
 * with a limit (nothing to plan against). */
weft_status weft_plan_rank(json_t *result, weft_plan_kpi k[WEFT_PLAN_NKPI], weft_error *err);

/* Amdahl's law for a kernel lever on a hotspot taking fraction f of the time: the whole can go
 * at most s_max = 1 / (1 - f) times faster; to go s times faster the kernel must go
 * k = f / (1/s - (1 - f)) times faster (infinite when s >= s_max). */
void weft_plan_amdahl(double f, double s, double *s_max, double *kernel_speedup);

/* A profile: time per op class, from `weft bench decode --profile` (its text table) or JSON
 * ({"classes": {"linear": seconds, ...}}). */
typedef struct weft_plan_profile {
    uint32_t n;
    char names[64][32];
    double seconds[64];
    double total;
} weft_plan_profile;

weft_status weft_plan_profile_load(const char *path, weft_plan_profile *p, weft_error *err);
weft_status weft_plan_profile_parse(const char *text, size_t len, const char *name,
                                    weft_plan_profile *p, weft_error *err);

/* YAML (a plan file) to JSON: mappings, sequences, scalars (plain scalars that read as numbers
 * or true/false become numbers and booleans). */
weft_status weft_plan_yaml_load(const char *path, json_t **out, weft_error *err);
weft_status weft_plan_yaml_parse(const char *text, size_t len, const char *name, json_t **out,
                                 weft_error *err);

/* Checks a plan against a result (and a profile, may be NULL). Returns a JSON object:
 * {"accepted": bool, "ranking": [...], "findings": [{"rule", "lever", "refuse", "message"}],
 *  "levers": [{"name", ..., "amdahl": {...}}]}. A malformed plan is an error naming the field. */
weft_status weft_plan_review(json_t *result, json_t *plan, const weft_plan_profile *profile,
                             json_t **review, weft_error *err);

/* After the next eval: forecast beside measured for every lever; each recorded as built (its
 * technique is in the new candidate), pruned (it was in the old one and is gone, or the plan
 * says so) or deferred. */
weft_status weft_plan_check(json_t *plan, json_t *before, json_t *after, json_t **check,
                            weft_error *err);

void weft_plan_print_ranking(FILE *f, const weft_plan_kpi k[WEFT_PLAN_NKPI]);
void weft_plan_print_review(FILE *f, json_t *review);
void weft_plan_print_check(FILE *f, json_t *check);

#endif
