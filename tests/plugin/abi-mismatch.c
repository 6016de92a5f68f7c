/* SPDX-License-Identifier: Apache-2.0 */
/* A driver built for another driver ABI: nrm must refuse it before it calls
 * anything of it (test-example.c). Its operations are never set. */
#include "driver/driver.h"

const struct nrm_driver_ops nrm_driver_component = {
  .abi = NRM_DRIVER_ABI + 1,
  .id = "mismatch",
  .default_name = "mismatch.nrm.io",
};
