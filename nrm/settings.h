/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_SETTINGS_H
#define NRM_SETTINGS_H

#include <jansson.h>

#include "driver/registry.h"
#include "nrm/base/error.h"
#include "nrm/conf.h"
#include "topology/topology.h"

/* The settings that shape the devices and the CPUs nrm hands out (machine,
 * node name, CPU mode and options, reserved and isolated CPUs, reserved
 * memory, memory granularity, driver names), as the plugin serves them:
 * `nrm plugin` records them in <state-dir>/settings.json at start, and the
 * commands that read its state compare their own with that record. */

#define NRM_SETTINGS_FILE "settings.json"

/* The record of these settings (new reference). */
json_t *nrm_settings_record (const struct nrm_config *c, const struct nrm_topology *t, const struct nrm_drivers *d);

/* Writes the record durably (nrm_write_atomic) to <state_dir>/settings.json. */
int nrm_settings_write (const char *state_dir, json_t *record, nrm_error_t *err);

/* 0 when <state_dir>/settings.json is missing or agrees with mine; else an
 * error ("cmd: ...") that names the first setting that differs, with the
 * plugin's value and this command's. Drivers only one side enables are no
 * difference. A record that cannot be read is an error naming the file. */
int nrm_settings_check (const char *state_dir, json_t *mine, const char *cmd, nrm_error_t *err);

/* The nodes[] entry the plugin applied, from its record; -1: none, or no
 * record. */
long nrm_settings_node_entry (const char *state_dir);

#endif
