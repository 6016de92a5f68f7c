/* SPDX-License-Identifier: Apache-2.0 */
/* What every driver's results are made of. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"

void
nrm_container_edits_done (struct nrm_container_edits *e)
{
  json_decref (e->env);
  json_decref (e->device_nodes);
  json_decref (e->mounts);
  json_decref (e->hooks);
  memset (e, 0, sizeof (*e));
}

void
nrm_prepared_done (struct nrm_prepared *p)
{
  json_decref (p->state);
  json_decref (p->metadata);
  nrm_container_edits_done (&p->edits);
  p->state = p->metadata = NULL;
}

void
nrm_health_report_done (struct nrm_health_report *r)
{
  for (size_t i = 0; i < r->n; i++)
    {
      free (r->devices[i].device);
      free (r->devices[i].message);
      free (r->devices[i].taint);
    }
  free (r->devices);
  r->devices = NULL;
  r->n = 0;
}

const char *
nrm_taint_effect_name (enum nrm_taint_effect e)
{
  switch (e)
    {
    case NRM_TAINT_NONE:
      return "None";
    case NRM_TAINT_NO_SCHEDULE:
      return "NoSchedule";
    case NRM_TAINT_NO_EXECUTE:
      return "NoExecute";
    default:
      return NULL;
    }
}

bool
nrm_driver_host_sysfs (const struct nrm_driver_host *h)
{
  return h->live || !nrm_fsroot_live (h->fsroot);
}
