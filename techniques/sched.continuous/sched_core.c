/* The planning rules of the scheduling bundles (sched_core.h). One call plans one step:
 *
 *  1. Requests are split into holders (something in the kv cache) and waiters (nothing cached:
 *     new, or preempted). Holders come first; inside each group higher priority, then earlier
 *     arrival, then lower id goes first, so when the pool runs dry the youngest is refused.
 *  2. Preemption (policy.preempt): every holder the kv provider refused last step (kv_denied)
 *     gets one victim: the lowest-priority, youngest holder not yet chosen (possibly itself).
 *     A victim's item is action 1 (recompute): the engine drops its cache, and it waits again
 *     with its original arrival, so it is restored before younger waiters. A request that is the
 *     only holder is never preempted: freeing its own cache cannot make it fit.
 *  3. Every other holder that is decoding gets one token, before any prompt work, so a prefill
 *     never delays a running stream's next token beyond one step.
 *  4. Holders still prefilling (or recomputing after preemption) continue, oldest first, under
 *     the step's token budget and the per-step prefill cap: chunk_tokens plus chunk_per_decode
 *     per decode planned in step 3 (chunk_tokens 0 = no cap). A step with no decode has no cap,
 *     since no running stream waits on it.
 *  5. Waiters are admitted in order while budget, sequence slots and kv allow; the first that
 *     cannot be admitted stops admission (first come, first served: a small late request does
 *     not overtake a large early one). Without a chunk cap a prompt is admitted only whole,
 *     unless it is longer than a whole step's budget. The kv test differs by policy:
 *       - without preemption, admission is conservative: the pool's free tokens must cover
 *         every holder's growth to its max_total plus the newcomer's max_total, so a running
 *         request is never refused (what a scheduler that cannot preempt must do);
 *       - with preemption, each request's near need must fit, plus a watermark: its uncached
 *         tokens (the rest of its prompt, or a preempted request's recompute) and its next
 *         lookahead_tokens generated tokens (capped at its max_total), for every holder and
 *         the newcomers; more requests run at once, and a refusal is repaired by step 2.
 *     When no request holds cache the head waiter is admitted regardless: the pool decides.
 *     No waiter is admitted in a step after a refusal (the pool is full; admitting would thrash).
 * The engine processes preempt items before run items and reserves kv in item order. */
#include "sched_core.h"

#include <stddef.h>
#include <stdlib.h>

typedef struct sched_entry {
    uint32_t index; /* into the request array */
    uint32_t priority;
    uint64_t arrival_ns;
    uint64_t id;
    uint32_t pending; /* tokens known but not cached */
    uint32_t n_computed;
    uint32_t max_total;
    uint8_t holder, denied, victim;
} sched_entry;

struct sched_core {
    const weft_host_services *host;
    char name[48];
    sched_policy pol;
    uint64_t *denied; /* request ids refused since the last plan */
    uint32_t n_denied, cap_denied;
    int denied_lost; /* a refusal could not be recorded (out of memory): treat as pressure */
    sched_entry *ent;
    uint32_t cap_ent;
};

weft_status sched_core_create(const weft_host_services *host, const char *name,
                              const sched_policy *pol, sched_core **out, weft_error *err) {
    if (!host || !host->alloc || !host->free || !pol || !out)
        return weft_sdk_error(err, WEFT_ERR_INVALID, name, "create: missing host or policy");
    sched_core *c = host->alloc(sizeof(*c));
    if (!c) return weft_sdk_error(err, WEFT_ERR_NOMEM, name, "out of memory");
    memset(c, 0, sizeof(*c));
    c->host = host;
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->pol = *pol;
    *out = c;
    return WEFT_OK;
}

void sched_core_destroy(sched_core *c) {
    if (!c) return;
    c->host->free(c->denied);
    c->host->free(c->ent);
    c->host->free(c);
}

static weft_status read_u32_option(const weft_options *opts, const char *name, const char *key,
                                   int64_t lo, int64_t hi, uint32_t *out, weft_error *err) {
    const weft_option *o = weft_sdk_option(opts, key);
    if (!o) return WEFT_OK; /* the manifest's default applies: the caller's value stays */
    if (o->type != WEFT_OPTION_INT || o->i < lo || o->i > hi)
        return weft_sdk_error(err, WEFT_ERR_INVALID, name,
                              "option %s: expected an integer in %lld..%lld, got %lld", key,
                              (long long)lo, (long long)hi, (long long)o->i);
    *out = (uint32_t)o->i;
    return WEFT_OK;
}

weft_status sched_core_common_options(const weft_options *opts, const char *name, sched_policy *pol,
                                      weft_error *err) {
    weft_status s =
        read_u32_option(opts, name, "max_step_tokens", 0, 1 << 20, &pol->max_step_tokens, err);
    if (s == WEFT_OK)
        s = read_u32_option(opts, name, "max_running", 0, 1 << 16, &pol->max_running, err);
    if (s == WEFT_OK && weft_sdk_option(opts, "chunk_per_decode"))
        s = read_u32_option(opts, name, "chunk_per_decode", 0, 1 << 16, &pol->chunk_per_decode,
                            err);
    if (s == WEFT_OK && weft_sdk_option(opts, "chunk_tokens"))
        s = read_u32_option(opts, name, "chunk_tokens", 0, 1 << 20, &pol->chunk_tokens, err);
    if (s == WEFT_OK && weft_sdk_option(opts, "lookahead_tokens"))
        s = read_u32_option(opts, name, "lookahead_tokens", 0, 1 << 20, &pol->lookahead_tokens,
                            err);
    if (s == WEFT_OK && weft_sdk_option(opts, "watermark_permille"))
        s = read_u32_option(opts, name, "watermark_permille", 0, 500, &pol->watermark_permille,
                            err);
    return s;
}

void sched_core_kv_denied(void *st, uint64_t request_id) {
    sched_core *c = st;
    if (!c) return;
    for (uint32_t i = 0; i < c->n_denied; i++)
        if (c->denied[i] == request_id) return;
    if (c->n_denied == c->cap_denied) {
        uint32_t cap = c->cap_denied ? c->cap_denied * 2 : 16;
        uint64_t *d = c->host->alloc(sizeof(*d) * cap);
        if (!d) {
            c->denied_lost = 1;
            return;
        }
        if (c->n_denied) memcpy(d, c->denied, sizeof(*d) * c->n_denied);
        c->host->free(c->denied);
        c->denied = d;
        c->cap_denied = cap;
    }
    c->denied[c->n_denied++] = request_id;
}

/* Holders first; then higher priority, earlier arrival, lower id. */
static int entry_cmp(const void *a, const void *b) {
    const sched_entry *x = a, *y = b;
    if (x->holder != y->holder) return x->holder ? -1 : 1;
    if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
    if (x->arrival_ns != y->arrival_ns) return x->arrival_ns < y->arrival_ns ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static uint32_t min_u32(uint32_t a, uint32_t b) {
    return a < b ? a : b;
}

/* The cache a request will add soon: what it has not cached yet plus `lookahead` generated
 * tokens, never past its max_total. */
static uint64_t near_need(const sched_entry *e, uint32_t lookahead) {
    uint64_t left = (uint64_t)e->max_total - e->n_computed;
    uint64_t near = (uint64_t)e->pending + lookahead;
    return near < left ? near : left;
}

static void emit(weft_sched_item *items, uint32_t *n_items, uint32_t index, uint32_t action,
                 uint32_t n) {
    weft_sched_item *it = &items[(*n_items)++];
    it->index = index;
    it->action = action;
    it->n_tokens = n;
    it->reserved = 0;
}

weft_status sched_core_schedule(void *st, const weft_sched_request *reqs, uint32_t n_requests,
                                const weft_sched_limits *limits, weft_sched_item *items,
                                uint32_t *n_items, weft_error *err) {
    sched_core *c = st;
    if (n_items) *n_items = 0;
    if (!c || !limits || !n_items || (n_requests && (!reqs || !items)))
        return weft_sdk_error(err, WEFT_ERR_INVALID, c ? c->name : "sched",
                              "schedule: missing argument");
    if (limits->size < offsetof(weft_sched_limits, kv) || limits->max_tokens == 0 ||
        limits->max_seqs == 0)
        return weft_sdk_error(err, WEFT_ERR_INVALID, c->name,
                              "schedule: expected limits with a token budget and a sequence "
                              "budget, got size %u, max_tokens %u, max_seqs %u",
                              limits->size, limits->max_tokens, limits->max_seqs);
    if (n_requests > c->cap_ent) {
        sched_entry *e = c->host->alloc(sizeof(*e) * n_requests);
        if (!e) return weft_sdk_error(err, WEFT_ERR_NOMEM, c->name, "out of memory");
        c->host->free(c->ent);
        c->ent = e;
        c->cap_ent = n_requests;
    }
    const int kv_known = limits->size >= sizeof(weft_sched_limits) &&
                         limits->kv.size >= sizeof(weft_kv_stats) && limits->kv.capacity_tokens > 0;
    int pressure = c->denied_lost;
    uint32_t n = 0, n_holders = 0;
    for (uint32_t i = 0; i < n_requests; i++) {
        const weft_sched_request *r = &reqs[i];
        uint64_t known = (uint64_t)r->n_prompt + r->n_generated;
        if (r->n_computed > known)
            return weft_sdk_error(err, WEFT_ERR_INVALID, c->name,
                                  "request %llu: expected at most %llu cached tokens (prompt + "
                                  "generated), got %u",
                                  (unsigned long long)r->request_id, (unsigned long long)known,
                                  r->n_computed);
        if (known == r->n_computed || known > UINT32_MAX) continue; /* nothing to feed */
        sched_entry *e = &c->ent[n++];
        memset(e, 0, sizeof(*e));
        e->index = i;
        e->priority = r->priority;
        e->arrival_ns = r->arrival_ns;
        e->id = r->request_id;
        e->pending = (uint32_t)(known - r->n_computed);
        e->n_computed = r->n_computed;
        e->max_total = r->max_total > known ? r->max_total : (uint32_t)known;
        e->holder = r->n_computed > 0;
        n_holders += e->holder;
        for (uint32_t d = 0; d < c->n_denied; d++)
            if (c->denied[d] == e->id) {
                e->denied = 1;
                pressure = 1;
            }
    }
    c->n_denied = 0;
    c->denied_lost = 0;
    qsort(c->ent, n, sizeof(*c->ent), entry_cmp);

    /* 2. Preemption: one victim per refused holder, from the young end of the holders. */
    uint32_t live_holders = n_holders, young = n_holders; /* holders are ent[0..n_holders) */
    if (c->pol.preempt)
        for (uint32_t i = 0; i < n_holders; i++) {
            sched_entry *d = &c->ent[i];
            if (!d->denied || d->victim) continue;
            while (young > 0 && c->ent[young - 1].victim)
                young--;
            if (young == 0 || live_holders <= 1) break;
            sched_entry *v = &c->ent[young - 1];
            v->victim = 1;
            live_holders--;
            emit(items, n_items, v->index, 1, 0);
        }

    uint32_t budget = limits->max_tokens;
    if (c->pol.max_step_tokens && c->pol.max_step_tokens < budget) budget = c->pol.max_step_tokens;
    uint32_t seqs = limits->max_seqs;
    if (c->pol.max_running && c->pol.max_running < seqs) seqs = c->pol.max_running;
    uint32_t tokens = budget, decodes = 0;
    uint64_t worst = 0; /* holders' growth to their max_total (conservative admission) */

    /* 3. Decodes. */
    for (uint32_t i = 0; i < n_holders && tokens && seqs; i++) {
        sched_entry *e = &c->ent[i];
        if (e->victim || e->pending != 1) continue;
        emit(items, n_items, e->index, 0, 1);
        tokens--;
        seqs--;
        decodes++;
    }
    uint32_t prefill = UINT32_MAX;
    if (c->pol.chunk_tokens && decodes) {
        uint64_t cap = c->pol.chunk_tokens + (uint64_t)c->pol.chunk_per_decode * decodes;
        prefill = cap < UINT32_MAX ? (uint32_t)cap : UINT32_MAX - 1;
    }
    /* 4. Prefills (and recomputes) under way. */
    for (uint32_t i = 0; i < n_holders && tokens && seqs && prefill; i++) {
        sched_entry *e = &c->ent[i];
        if (e->victim || e->pending == 1) continue;
        uint32_t k = min_u32(min_u32(e->pending, tokens), prefill);
        emit(items, n_items, e->index, 0, k);
        tokens -= k;
        seqs--;
        if (prefill != UINT32_MAX) prefill -= k;
    }
    uint64_t near = 0; /* holders' near need (preemptive admission) */
    for (uint32_t i = 0; i < n_holders; i++)
        if (!c->ent[i].victim) {
            worst += (uint64_t)c->ent[i].max_total - c->ent[i].n_computed;
            near += near_need(&c->ent[i], c->pol.lookahead_tokens);
        }

    /* 5. Admission. */
    if (pressure) return WEFT_OK;
    uint64_t cap = kv_known ? limits->kv.capacity_tokens : 0;
    uint64_t free_tokens =
        kv_known && cap > limits->kv.used_tokens ? cap - limits->kv.used_tokens : 0;
    uint64_t watermark = cap * c->pol.watermark_permille / 1000;
    uint64_t admitted_near = 0, admitted_worst = 0;
    int admitted = 0;
    for (uint32_t i = n_holders; i < n && tokens && seqs && prefill; i++) {
        sched_entry *e = &c->ent[i];
        if (!c->pol.chunk_tokens && e->pending > tokens && e->pending <= budget) break;
        uint32_t k = min_u32(min_u32(e->pending, tokens), prefill);
        int alone = live_holders == 0 && !admitted;
        if (kv_known && !alone) {
            if (c->pol.preempt) {
                uint64_t need = near_need(e, c->pol.lookahead_tokens);
                if (near + admitted_near + need + watermark > free_tokens) break;
                admitted_near += need;
            } else if (worst + admitted_worst + e->max_total > free_tokens) {
                break;
            }
        }
        emit(items, n_items, e->index, 0, k);
        tokens -= k;
        seqs--;
        if (prefill != UINT32_MAX) prefill -= k;
        admitted_worst += e->max_total;
        admitted = 1;
    }
    return WEFT_OK;
}
