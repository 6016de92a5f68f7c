/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_BASE_LOG_H
#define NRM_BASE_LOG_H

/* Library code never logs: it reports events through a callback of this
 * type, which only the programs (nrm/) turn into log lines. */
enum nrm_log_level
{
  NRM_LOG_ERROR,
  NRM_LOG_WARNING,
  NRM_LOG_INFO,
  NRM_LOG_DEBUG,
};

typedef void (*nrm_log_fn) (void *ctx, enum nrm_log_level level, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

/* Reports through fn, when there is one. */
#define NRM_LOG_TO(fn, ctx, level, ...)                                                                                \
  do                                                                                                                   \
    {                                                                                                                  \
      if (fn)                                                                                                          \
        (fn) (ctx, level, __VA_ARGS__);                                                                                \
    }                                                                                                                  \
  while (0)

#endif
