/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_ERROR_H
#define NRM_ERROR_H

#include <stdarg.h>
#include <stddef.h>

/* The one error type of nrm. Every fallible function returns an int (< 0 on
 * failure) and takes "nrm_error_t *err" last; on failure it stores a heap
 * error with an errno-style status and a message. Callers add context with
 * nrm_error_wrap() and only nrm/ turns it into a log line or an exit code. */
struct nrm_error_s
{
  int status; /* errno value, or 0 when none applies */
  char *msg;
};
typedef struct nrm_error_s *nrm_error_t;

/* Stores a new error in *err (which must be NULL) and returns -1. */
int nrm_error_set (nrm_error_t *err, int status, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));

/* Like nrm_error_set(), with ": <strerror(errno)>" appended and status errno. */
int nrm_error_errno (nrm_error_t *err, int errnum, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));

/* Prefixes the message of *err with "<context>: " and returns -1. */
int nrm_error_wrap (nrm_error_t *err, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));

/* Frees *err and sets it to NULL; NULL is fine. */
void nrm_error_release (nrm_error_t *err);

/* A failure counted by a pass that goes on past it: *count goes up, the
 * message is kept in *first (when first is not NULL and *first still is),
 * and *err is released. */
void nrm_error_tally (nrm_error_t *err, size_t *count, char **first);

const char *nrm_error_msg (nrm_error_t err);

#endif
