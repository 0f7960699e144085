/* Graph passes: runs the pass slot's chain (technique plugins in the candidate's chain order)
 * over a freshly built graph, validating after each pass so a broken rewrite is reported with
 * the name of the pass that made it. */
#ifndef WEFT_GRAPH_PASSES_H
#define WEFT_GRAPH_PASSES_H

#include "plugin/candidate.h"
#include "weft/plugin.h"

/* Runs every pass of c in order (weft_loaded_plugin.order, then position). *n_run (optional)
 * receives the number of passes that ran. */
weft_status weft_passes_run(const weft_candidate *c, const weft_model_config *cfg, weft_graph *g,
                            uint32_t *n_run, weft_error *err);

/* The pass plugin named `deriver` (a derived weight's weft_tensor.deriver), or NULL. */
const weft_loaded_plugin *weft_passes_deriver(const weft_candidate *c, const char *deriver);

#endif
