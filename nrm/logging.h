/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_LOGGING_H
#define NRM_LOGGING_H

#include <stdbool.h>

#include "nrm/base/log.h"

/* The only place nrm writes log lines: stderr, plain or JSON, one line each. */
void nrm_log_setup (enum nrm_log_level max, bool json);
void nrm_log (void *ctx, enum nrm_log_level level, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));
int nrm_log_parse_level (const char *s, enum nrm_log_level *ret);

#endif
