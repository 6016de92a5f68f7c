/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CHECKPOINT_H
#define NRM_CHECKPOINT_H

#include <jansson.h>
#include <stdbool.h>

#include "nrm/base/error.h"

/* The plugin's checkpoint, one file per driver in the state dir:
 * {version, driver, generation, claims: {uid: entry}}. The one reader and
 * writer of the format, for the plugin (under its serialize lock) and for
 * the readers outside it (nrm status, the shared-pool reconciler, the slice
 * refresher, nrm run). The file is replaced atomically, so a reader without
 * the lock sees one whole version. */

#define NRM_CHECKPOINT_MAX (64 << 20)

/* <state_dir>/<driver>.checkpoint.json (malloc'd). */
char *nrm_checkpoint_path (const char *state_dir, const char *driver);

/* An empty checkpoint of driver: generation 0, no claims (new reference). */
json_t *nrm_checkpoint_new (const char *driver);

/* The checkpoint at path, which must be driver's (new reference in *ret).
 * A missing file is an empty checkpoint; a corrupt one (not JSON, another
 * version, another driver's, no claims or generation) is an error that
 * names it and says why, and the file is left as it is for the operator. */
int nrm_checkpoint_read (const char *path, const char *driver, json_t **ret, nrm_error_t *err);

/* cp as the next generation (*gen, set in cp too), in the file's form
 * (malloc'd), for a write of the caller's own. */
char *nrm_checkpoint_text (json_t *cp, json_int_t *gen);

/* Writes cp to path durably as the next generation (*gen); on failure cp
 * keeps its generation. */
int nrm_checkpoint_write (const char *path, json_t *cp, json_int_t *gen, nrm_error_t *err);

/* A driver's claims as its checkpoint in state_dir has them (uid -> entry,
 * new reference), read without the plugin (another process may hold it);
 * a missing checkpoint has none. */
json_t *nrm_checkpoint_claims (const char *state_dir, const char *driver, nrm_error_t *err);

/* Whether a checkpoint entry is a completed prepare (the others hold
 * nothing). */
bool nrm_checkpoint_completed (json_t *entry);

/* {uid: state} of the completed claims of claims (new reference). */
json_t *nrm_checkpoint_held (json_t *claims);

/* {uid: devices} of the completed claims of claims (new reference): the
 * answers a repeated prepare gets. */
json_t *nrm_checkpoint_answers (json_t *claims);

#endif
