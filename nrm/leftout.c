/* SPDX-License-Identifier: Apache-2.0 */
/* Events on the Node for the functions PCI drivers leave to other drivers
 * (nrm/leftout.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "driver/pci/pci.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/leftout.h"

struct nrm_leftout
{
  const struct nrm_drivers *d;
  struct nrm_events *events;
  char *node;
  json_t *last; /* driver name -> {bus id: the other driver} */
};

static bool
is_pci (const struct nrm_driver_slot *s)
{
  return s->ops->pool == nrm_pci_driver_pool;
}

struct nrm_leftout *
nrm_leftout_new (const struct nrm_drivers *d, struct nrm_events *events, const char *node)
{
  bool any = false;
  for (size_t i = 0; i < d->n; i++)
    any |= is_pci (&d->slots[i]);
  if (!any || events == NULL)
    return NULL;
  struct nrm_leftout *lo = xcalloc (1, sizeof (*lo));
  lo->d = d;
  lo->events = events;
  lo->node = xstrdup (node);
  lo->last = json_object ();
  return lo;
}

void
nrm_leftout_check (void *arg)
{
  struct nrm_leftout *lo = arg;
  struct nrm_event_ref node = nrm_event_node_ref (lo->node);
  for (size_t i = 0; i < lo->d->n; i++)
    {
      const struct nrm_driver_slot *s = &lo->d->slots[i];
      if (!is_pci (s))
        continue;
      json_t *now = nrm_pci_driver_left_out (s->self);
      json_t *was = json_object_get (lo->last, s->name);
      const char *bus;
      json_t *who;
      json_object_foreach (now, bus, who)
      {
        if (!json_equal (who, json_object_get (was, bus)))
          nrm_events_record (lo->events, s->name, &node, false, "DeviceLeftOut", "PublishResources",
                             "%s leaves PCI function %s out of its ResourceSlices: it is left to %s", s->name, bus,
                             json_string_value (who));
      }
      json_object_foreach (was, bus, who)
      {
        if (json_object_get (now, bus) == NULL)
          nrm_events_record (lo->events, s->name, &node, false, "DeviceServedAgain", "PublishResources",
                             "%s publishes PCI function %s again (it was left to %s)", s->name, bus,
                             json_string_value (who));
      }
      json_object_set_new (lo->last, s->name, now);
    }
}

void
nrm_leftout_free (struct nrm_leftout *lo)
{
  if (lo == NULL)
    return;
  json_decref (lo->last);
  free (lo->node);
  free (lo);
}
