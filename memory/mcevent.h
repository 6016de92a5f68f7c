/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_MCEVENT_H
#define NRM_MEMORY_MCEVENT_H

/* The kernel's memory error events, ras:mc_event, read from a trace
 * instance of nrm's own: where EDAC has one controller for the whole
 * machine (ghes_edac), the physical address of each error is the only
 * fact that places it on a NUMA node.
 *
 * The event is TRACE_EVENT(mc_event) of include/ras/ras_event.h, raised by
 * drivers/edac/edac_mc.c, edac_raw_mc_handle_error(), for every error any
 * EDAC driver reports, and printed in trace_pipe as
 *   "%d %s error%s:%s%s on %s (mc:%d location:%d:%d:%d address:0x%08lx
 *    grain:%d syndrome:0x%08lx%s%s)"
 * (error_count, mc_event_error_type() of include/linux/edac.h, msg, label,
 * mc_index, the three layers, address, 1 << grain_bits, syndrome,
 * driver_detail). */

#include <stdbool.h>
#include <stdint.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

/* The instance under <tracefs>/instances/: rasdaemon makes its own
 * ("rasdaemon"), and each instance has its own buffer and its own enable
 * switches, so neither takes the other's events. */
#define NRM_MC_TRACE_INSTANCE "nrm"

struct nrm_mc_event
{
  unsigned count;   /* error_count */
  bool corrected;   /* "Corrected"; every other type is counted as
                     * uncorrected, as ue_count counts it */
  unsigned mc;      /* mc_index: the controller mcN */
  uint64_t address; /* physical; 0 when the driver knew none */
  char type[16];    /* as printed: Corrected, Uncorrected, Deferred, Fatal, Info */
};

/* One line of trace_pipe. Returns 1 for an mc_event line (into *ev), 0 for
 * any other line, with *lost adding the events a "CPU:N [LOST M EVENTS]"
 * line says the buffer dropped; -1 for an mc_event line not in the
 * kernel's format, naming it. */
int nrm_mc_event_parse (const char *line, struct nrm_mc_event *ev, uint64_t *lost, nrm_error_t *err);

struct nrm_mc_trace;

/* Makes (or reuses) the instance under the machine's tracefs
 * (/sys/kernel/tracing, else /sys/kernel/debug/tracing), enables
 * ras:mc_event there and opens its trace_pipe without blocking. Returns 1
 * with *ret NULL when the kernel has no tracefs or no ras:mc_event, -1
 * when it has them but the instance cannot be made or read. */
int nrm_mc_trace_open (const struct nrm_fsroot *root, struct nrm_mc_trace **ret, nrm_error_t *err);
void nrm_mc_trace_close (struct nrm_mc_trace *t);

/* The trace_pipe descriptor, readable (poll) when events wait. */
int nrm_mc_trace_fd (const struct nrm_mc_trace *t);

typedef void (*nrm_mc_line_fn) (void *ctx, const char *line);

/* Reads what trace_pipe holds now, never blocking, and calls fn with each
 * whole line (without its newline); a part line waits for the rest. */
int nrm_mc_trace_read (struct nrm_mc_trace *t, nrm_mc_line_fn fn, void *ctx, nrm_error_t *err);

#endif
