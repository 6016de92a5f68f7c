/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a config file (YAML or JSON) and the settings it
 * makes, read from a memory file as nrm reads a file. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nrm/conf.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  int fd = memfd_create ("nrm-fuzz-config", MFD_CLOEXEC);
  if (fd < 0)
    return 0;
  if (write (fd, data, size) == (ssize_t) size)
    {
      char path[64];
      struct nrm_config c;
      nrm_error_t err = NULL;
      snprintf (path, sizeof (path), "/proc/self/fd/%d", fd);
      nrm_config_init (&c);
      if (nrm_config_load_file (&c, path, &err) == 0)
        nrm_config_finish (&c, &err);
      nrm_error_release (&err);
      nrm_config_done (&c);
    }
  close (fd);
  return 0;
}
