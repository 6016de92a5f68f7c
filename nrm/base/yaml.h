/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_YAML_H
#define NRM_YAML_H

#include <jansson.h>
#include <stddef.h>

#include "nrm/base/error.h"

/* Parses one YAML document (JSON is YAML too) into JSON values, the way
 * Kubernetes reads its YAML: plain scalars become null, booleans, integers
 * or floats; quoted ones stay strings; aliases are expanded. what names the
 * input in errors. Duplicate keys, several documents, non-string keys and
 * alias bombs are refused. */
int nrm_yaml_load (const char *text, size_t len, const char *what, json_t **ret, nrm_error_t *err);

/* The same for a file, at most max bytes. */
int nrm_yaml_load_file (const char *path, size_t max, json_t **ret, nrm_error_t *err);

#endif
