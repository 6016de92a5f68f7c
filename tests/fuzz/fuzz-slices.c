/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: JSON as the API server could send it back: the slice
 * validator, the publisher's comparison and its dropped-field search. */
#include "config.h"

#include <stdint.h>

#include "driver/devices.h"
#include "driver/k8s/publish.h"
#include "nrm/base/cleanup.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  cleanup_json json_t *v = json_loadb ((const char *) data, size, 0, NULL);
  if (v == NULL)
    return 0;
  nrm_error_t err = NULL;
  nrm_slices_validate (v, &err);
  nrm_error_release (&err);
  json_t *spec = json_object_get (v, "spec") ?: v;
  cleanup_json json_t *copy = json_deep_copy (spec), *empty = json_object ();
  if (!nrm_slice_spec_equal (spec, copy))
    __builtin_trap (); /* a spec must equal its own copy */
  const char *gate = NULL;
  free (nrm_slice_dropped_field (spec, empty, &gate));
  free (nrm_slice_dropped_field (spec, copy, &gate));
  return 0;
}
