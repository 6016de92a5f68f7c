/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: the coexistence rules of the configuration and the
 * kubelet's device-plugin checkpoint. The input up to the first newline is
 * one rule, the rest a checkpoint's text. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "driver/pci/others.h"
#include "nrm/base/xalloc.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  const char *text = (const char *) data;
  const char *nl = memchr (text, '\n', size);
  size_t rule_len = nl ? (size_t) (nl - text) : size;
  char *rule = xstrndup (text, rule_len);
  nrm_error_t err = NULL;
  nrm_pci_others_check_rule (rule, &err);
  nrm_error_release (&err);
  free (rule);
  if (nl)
    {
      nrm_pci_others_check_checkpoint (nl + 1, size - rule_len - 1, &err);
      nrm_error_release (&err);
    }
  return 0;
}
