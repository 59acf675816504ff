/* PC sampling in the CUPTI agent (pc_sampling.c): CUPTI's PC Sampling API (cupti_pcsampling.h), driven
 * from the agent's CUPTI subscription, reported through the pcs probe (probes/pc_samples.h). Off unless
 * deepctxd watches the pcs probe and PC sampling is asked for: by deepctxd, which writes its options into
 * deepctx_pcs_config (struct pcs_config; `deepctx attach --pc-sampling`), or by the process's environment
 * (DEEPCTX_PC_SAMPLING=1, `deepctx run --pc-sampling`), whose options are then
 *   DEEPCTX_PC_PERIOD       log2 of the cycles between samples, 5..31 (default: CUPTI's, by SM count)
 *   DEEPCTX_PC_DURATION_MS  sampling stops this long after it started in a context (default 30000)
 * Each start samples the contexts created from then on (CONTEXT_CREATED) and the active primary contexts
 * that exist already (attach); cubins come from MODULE_LOADED, or, for modules loaded before the agent, from
 * the process's memory (cubin_scan.h). Continuous collection: kernels are not serialized, so samples carry
 * no correlation id and deepctxd attributes them by function name. */
#ifndef DEEPCTX_PC_SAMPLING_H
#define DEEPCTX_PC_SAMPLING_H

#include <cupti.h>

/* Binds the optional PC sampling entry points in the libcupti h. */
void pcs_load(void *h);
/* Is PC sampling wanted now (the daemon's pcs probe, and its options or the environment)? Read at each start. */
int pcs_wanted(void);
/* At the agent's start, with its subscriber: resource callbacks for contexts and modules. */
void pcs_start(CUpti_SubscriberHandle subscriber,
               CUptiResult (*enable)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId));
/* A CUPTI resource callback (context created / destroyed, module loaded). */
void pcs_on_resource(CUpti_CallbackId cbid, const CUpti_ResourceData *data);
/* Hands over what CUPTI collected so far (final: then disables sampling in every context). */
void pcs_collect(int final);

#endif
