/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the YAML loader (config files, kubeconfigs). */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "nrm/base/yaml.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  json_t *v = NULL;
  nrm_error_t err = NULL;
  if (nrm_yaml_load ((const char *) data, size, "fuzz", &v, &err) == 0)
    json_decref (v);
  nrm_error_release (&err);
  return 0;
}
