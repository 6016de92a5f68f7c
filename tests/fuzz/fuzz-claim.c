/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: a ResourceClaim as the API server could hand it over,
 * prepared and unprepared by both drivers of a local plugin (the same path
 * as the kubelet's calls, without the sockets): allocation results,
 * consumed capacity, opaque CPUConfig and MemoryConfig. Half of the
 * drivers run in partitioned mode. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/devices.h"
#include "driver/names.h"
#include "driver/registry.h"
#include "driver/kubelet/plugin.h"
#include "nrm/base/cleanup.h"
#include "topology/topology.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);
int LLVMFuzzerInitialize (int *argc, char ***argv);

static json_t *current;

static int
fuzz_get (void *self, const char *ns, const char *name, json_t **ret, nrm_error_t *err)
{
  if (current == NULL)
    return nrm_error_set (err, ENOENT, "no claim");
  *ret = json_incref (current);
  return 0;
}

static struct nrm_plugin *plugins[4];

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  static char dir[] = "/dev/shm/nrm-fuzz-claim-XXXXXX";
  struct nrm_topology *t = NULL;
  nrm_error_t err = NULL;
  static struct nrm_registry *reg;
  if (mkdtemp (dir) == NULL || nrm_topology_load (NRM_FUZZ_TOPOLOGY, &t, &err) < 0 || nrm_registry_new (&reg, &err) < 0)
    abort ();
  for (int i = 0; i < 4; i++)
    {
      struct nrm_publish_options o;
      nrm_publish_options_init (&o);
      o.node_name = "fuzz";
      static struct nrm_driver_host h;
      static struct nrm_publish_options opts[4];
      opts[i] = o;
      h = (struct nrm_driver_host){ .topo = t, .node = &opts[i] };
      /* The CPU driver's settings: its mode, one CPU kept shared. */
      if (i % 2 == 0)
        h.settings = json_pack ("{s:s, s:i}", "mode", i >= 2 ? "partitioned" : "numa", "minSharedCPUs", 1);
      const struct nrm_driver_ops *ops = nrm_registry_find (reg, i % 2 ? "memory" : "cpu");
      h.name = ops->default_name;
      void *d = NULL;
      char state[sizeof (dir) + 8];
      snprintf (state, sizeof (state), "%s/%d", dir, i / 2);
      struct nrm_plugin_config pc = { .driver = ops->default_name,
                                      .node_name = "fuzz",
                                      .state_dir = state,
                                      .kubelet_dir = dir,
                                      .cdi_dir = dir,
                                      .local = true,
                                      .claims = { fuzz_get, NULL } };
      if (ops->new (&h, &d, &err) < 0)
        abort ();
      /* The driver keeps its own copy of its settings. */
      json_decref (h.settings);
      if (nrm_plugin_start (&pc, ops, d, &plugins[i], &err) < 0)
        abort ();
    }
  /* The topology and drivers live as long as the process. */
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  current = json_loadb ((const char *) data, size, 0, NULL);
  if (current == NULL)
    return 0;
  json_t *meta = json_object_get (current, "metadata");
  const char *ns = json_string_value (json_object_get (meta, "namespace"));
  const char *name = json_string_value (json_object_get (meta, "name"));
  const char *uid = json_string_value (json_object_get (meta, "uid"));
  if (ns == NULL || !nrm_is_dns_subdomain (ns, 253))
    ns = "default";
  if (name == NULL || !nrm_is_dns_subdomain (name, 253))
    name = "fuzz";
  if (uid == NULL || *uid == '\0' || strlen (uid) > 128)
    uid = "00000000-0000-4000-8000-000000000f00";
  for (int i = 0; i < 4; i++)
    {
      nrm_error_t err = NULL;
      json_t *devs = nrm_plugin_prepare (plugins[i], ns, name, uid, &err);
      nrm_error_release (&err);
      if (devs != NULL)
        {
          json_decref (devs);
          /* Idempotent: a second prepare answers from the checkpoint. */
          devs = nrm_plugin_prepare (plugins[i], ns, name, uid, &err);
          if (devs == NULL)
            __builtin_trap ();
          json_decref (devs);
          if (nrm_plugin_unprepare (plugins[i], uid, &err) < 0)
            __builtin_trap ();
        }
      nrm_error_release (&err);
    }
  json_decref (current);
  current = NULL;
  return 0;
}
