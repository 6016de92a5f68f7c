/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/metrics.h"
#include "nrm/status.h"

/* Label values may hold any text: escape as the format says. */
static void
label (FILE *f, const char *s)
{
  for (; s && *s; s++)
    {
      if (*s == '\\' || *s == '"')
        fputc ('\\', f);
      if (*s == '\n')
        {
          fputs ("\\n", f);
          continue;
        }
      fputc (*s, f);
    }
}

static double
quantity (const char *text)
{
  nrm_quantity_t q;
  nrm_error_t err = NULL;
  if (text == NULL || nrm_quantity_parse (text, &q, &err) < 0)
    {
      nrm_error_release (&err);
      return 0;
    }
  return (double) q / (double) NRM_QUANTITY_ONE;
}

static void
header (FILE *f, const char *name, const char *type, const char *help)
{
  fprintf (f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
op_metrics (FILE *f, const char *name, const char *op, const char *driver, const struct nrm_op_metrics *m)
{
  unsigned long long cum = 0;
  for (size_t i = 0; i < NRM_LATENCY_BUCKETS; i++)
    {
      cum += m->buckets[i];
      fprintf (f, "%s_bucket{driver=\"%s\",operation=\"%s\",le=\"%g\"} %llu\n", name, driver, op, nrm_latency_bounds[i],
               cum);
    }
  fprintf (f, "%s_bucket{driver=\"%s\",operation=\"%s\",le=\"+Inf\"} %llu\n", name, driver, op, m->count);
  fprintf (f, "%s_sum{driver=\"%s\",operation=\"%s\"} %.9f\n", name, driver, op, m->sum_s);
  fprintf (f, "%s_count{driver=\"%s\",operation=\"%s\"} %llu\n", name, driver, op, m->count);
}

/* The shared pool as cpu.minSharedCPUs counts it, with the CPUs online
 * now: allocatable (neither reserved nor outside nrm's cpuset), not
 * isolated, held by no claim. The online list is read where the CPU
 * driver's health check reads it (this machine, or the tree under
 * --fsroot); a recorded machine without one keeps its recorded CPUs. */
static int
shared_pool_now (struct nrm_metrics_sources *s, const char *exclusive)
{
  cleanup_bitmap hwloc_bitmap_t set = xbitmap_alloc (), held = NULL, online = NULL;
  cleanup_free char *text = NULL;
  nrm_error_t err = NULL;
  for (size_t i = 0; i < s->t->n_numa; i++)
    {
      cleanup_bitmap hwloc_bitmap_t a = nrm_topology_node_allocatable (s->t, i);
      hwloc_bitmap_or (set, set, a);
    }
  hwloc_bitmap_andnot (set, set, s->t->isolated);
  if (exclusive && nrm_cpulist_parse (exclusive, &held, &err) == 0)
    hwloc_bitmap_andnot (set, set, held);
  nrm_error_release (&err);
  if ((s->cfg->topology == NULL || !nrm_fsroot_live (s->root))
      && nrm_fsroot_read (s->root, "/sys/devices/system/cpu/online", 1 << 16, &text, NULL, &err) == 0
      && nrm_cpulist_parse (text, &online, &err) == 0)
    hwloc_bitmap_and (set, set, online);
  nrm_error_release (&err);
  return hwloc_bitmap_weight (set);
}

static void
status_metrics (FILE *f, struct nrm_metrics_sources *s)
{
  cleanup_free char *buf = NULL;
  size_t len = 0;
  nrm_error_t err = NULL;
  FILE *m = open_memstream (&buf, &len);
  if (m == NULL)
    return;
  int r = nrm_status (s->cfg, s->root, s->t, s->drivers, true, m, &err);
  fclose (m);
  if (r < 0)
    {
      fprintf (f, "# nrm status failed: ");
      label (f, nrm_error_msg (err));
      fputc ('\n', f);
      nrm_error_release (&err);
      return;
    }
  cleanup_json json_t *st = json_loadb (buf, len, 0, NULL);
  size_t i, k;
  json_t *pool, *dev;

  header (f, "nrm_pool_devices", "gauge", "Devices of a pool by state (the counts of a ResourcePoolStatus).");
  json_array_foreach (json_object_get (st, "pools"), i, pool)
  {
    static const char *const states[][2] = { { "total", "totalDevices" },
                                             { "allocated", "allocatedDevices" },
                                             { "available", "availableDevices" },
                                             { "unavailable", "unavailableDevices" } };
    for (size_t x = 0; x < 4; x++)
      {
        fputs ("nrm_pool_devices{driver=\"", f);
        label (f, json_string_value (json_object_get (pool, "driver")));
        fputs ("\",pool=\"", f);
        label (f, json_string_value (json_object_get (pool, "pool")));
        fprintf (f, "\",state=\"%s\"} %lld\n", states[x][0],
                 (long long) json_integer_value (json_object_get (pool, states[x][1])));
      }
  }
  for (int which = 0; which < 2; which++)
    {
      const char *name = which ? "nrm_device_allocated" : "nrm_device_capacity";
      header (f, name, "gauge",
              which ? "Capacity of a device that prepared claims hold (CPUs, bytes)."
                    : "Capacity of a device (CPUs, bytes); numa devices are the NUMA nodes.");
      json_array_foreach (json_object_get (st, "pools"), i, pool)
      {
        json_array_foreach (json_object_get (pool, "devices"), k, dev)
        {
          const char *res;
          json_t *cap;
          json_object_foreach (json_object_get (dev, "capacity"), res, cap)
          {
            fprintf (f, "%s{driver=\"", name);
            label (f, json_string_value (json_object_get (pool, "driver")));
            fputs ("\",device=\"", f);
            label (f, json_string_value (json_object_get (dev, "name")));
            fputs ("\",resource=\"", f);
            label (f, res);
            fprintf (f, "\"} %.17g\n", quantity (json_string_value (which ? json_object_get (dev, "consumed") : cap)));
            break; /* one capacity a device: the one consumed counts */
          }
        }
      }
    }
  header (f, "nrm_cpus", "gauge", "CPUs of this node by use.");
  const char *set;
  json_t *list;
  json_object_foreach (json_object_get (st, "cpus"), set, list)
  {
    hwloc_bitmap_t b = NULL;
    int n = 0;
    if (json_string_value (list) && nrm_cpulist_parse (json_string_value (list), &b, &err) == 0)
      n = hwloc_bitmap_weight (b);
    nrm_error_release (&err);
    hwloc_bitmap_free (b);
    fputs ("nrm_cpus{use=\"", f);
    label (f, set);
    fprintf (f, "\"} %d\n", n < 0 ? 0 : n);
  }
  header (f, "nrm_shared_pool_cpus", "gauge",
          "Allocatable CPUs of the shared pool online now (not reserved, isolated or claimed), as cpu.minSharedCPUs "
          "counts them.");
  fprintf (f, "nrm_shared_pool_cpus %d\n",
           shared_pool_now (s, json_string_value (json_object_get (json_object_get (st, "cpus"), "exclusive"))));
  header (f, "nrm_shared_pool_min_cpus", "gauge",
          "The fewest CPUs the CPU driver leaves in the shared pool (cpu.minSharedCPUs).");
  fprintf (f, "nrm_shared_pool_min_cpus %ld\n", s->cfg->cpu.min_shared_cpus);
  header (f, "nrm_claims", "gauge", "Prepared claims and runs.");
  fprintf (f, "nrm_claims %zu\n", json_object_size (json_object_get (st, "claims")));
  header (f, "nrm_setting_info", "gauge",
          "1 for each setting a node may have of its own: its value, and where it came from (default, top level, "
          "nodes[i], flag, kubelet).");
  const char *key;
  json_t *v;
  json_object_foreach (json_object_get (json_object_get (st, "settings"), "values"), key, v)
  {
    fputs ("nrm_setting_info{setting=\"", f);
    label (f, key);
    fputs ("\",value=\"", f);
    label (f, json_string_value (json_object_get (v, "value")));
    fputs ("\",from=\"", f);
    label (f, json_string_value (json_object_get (v, "from")));
    fputs ("\"} 1\n", f);
  }
}

char *
nrm_metrics_render (struct nrm_metrics_sources *s)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  if (f == NULL)
    return NULL;

  header (f, "nrm_registered", "gauge",
          "1 when the kubelet accepted the plugin's registration, 0 when it refused, -1 before.");
  size_t n = s->drivers->n;
  for (size_t i = 0; i < n; i++)
    fprintf (f, "nrm_registered{driver=\"%s\"} %d\n", s->names[i], nrm_plugin_registered (s->plugins[i]));

  header (f, "nrm_devices", "gauge", "Devices of a driver by health, as its health report says now.");
  for (size_t i = 0; i < n; i++)
    {
      static const char *const states[] = { "unknown", "healthy", "unhealthy" };
      unsigned long long counts[3];
      nrm_plugin_health_counts (s->plugins[i], counts);
      for (int h = 0; h < 3; h++)
        fprintf (f, "nrm_devices{driver=\"%s\",health=\"%s\"} %llu\n", s->names[i], states[h], counts[h]);
    }

  header (f, "nrm_claim_operation_duration_seconds", "histogram", "Time to prepare or unprepare one claim.");
  cleanup_free struct nrm_plugin_metrics *pm = xcalloc (n + 1, sizeof (*pm));
  for (size_t i = 0; i < n; i++)
    {
      nrm_plugin_metrics (s->plugins[i], &pm[i]);
      op_metrics (f, "nrm_claim_operation_duration_seconds", "prepare", s->names[i], &pm[i].prepare);
      op_metrics (f, "nrm_claim_operation_duration_seconds", "unprepare", s->names[i], &pm[i].unprepare);
    }
  header (f, "nrm_claim_errors_total", "counter", "Claims that failed to prepare or unprepare, by kind of error.");
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < NRM_ERRKIND_COUNT; k++)
      {
        fprintf (f, "nrm_claim_errors_total{driver=\"%s\",operation=\"prepare\",kind=\"%s\"} %llu\n", s->names[i],
                 nrm_error_kind_name (k), pm[i].prepare.errors[k]);
        fprintf (f, "nrm_claim_errors_total{driver=\"%s\",operation=\"unprepare\",kind=\"%s\"} %llu\n", s->names[i],
                 nrm_error_kind_name (k), pm[i].unprepare.errors[k]);
      }
  header (f, "nrm_checkpoint_write_errors_total", "counter", "Writes of the driver's checkpoint that failed.");
  for (size_t i = 0; i < n; i++)
    fprintf (f, "nrm_checkpoint_write_errors_total{driver=\"%s\"} %llu\n", s->names[i], pm[i].checkpoint_write_errors);

  cleanup_free struct nrm_publisher_status *ps = s->publishers ? xcalloc (n + 1, sizeof (*ps)) : NULL;
  if (ps)
    {
      bool connected = true;
      for (size_t i = 0; i < n; i++)
        {
          nrm_publisher_status (s->publishers[i], &ps[i]);
          connected &= ps[i].connected;
        }
      header (f, "nrm_slices_synced", "gauge", "1 when the API server holds the desired ResourceSlices.");
      for (size_t i = 0; i < n; i++)
        fprintf (f, "nrm_slices_synced{driver=\"%s\"} %d\n", s->names[i], ps[i].synced);
      header (f, "nrm_slices_standby", "gauge",
              "1 while another instance of the driver (rolling update) publishes the node's ResourceSlices.");
      for (size_t i = 0; i < n; i++)
        fprintf (f, "nrm_slices_standby{driver=\"%s\"} %d\n", s->names[i], ps[i].standby);
      header (f, "nrm_slices_pool_generation", "gauge", "Generation of the published pool.");
      for (size_t i = 0; i < n; i++)
        fprintf (f, "nrm_slices_pool_generation{driver=\"%s\"} %lld\n", s->names[i], ps[i].generation);
      header (f, "nrm_slices_writes_total", "counter", "ResourceSlice creates, updates and deletes.");
      for (size_t i = 0; i < n; i++)
        fprintf (f, "nrm_slices_writes_total{driver=\"%s\"} %lld\n", s->names[i], ps[i].writes);
      header (f, "nrm_slices_publish_errors_total", "counter",
              "Problems of the ResourceSlice publisher, each logged as an error (API errors after retries, refused "
              "writes, dropped fields, broken watches).");
      for (size_t i = 0; i < n; i++)
        fprintf (f, "nrm_slices_publish_errors_total{driver=\"%s\"} %lld\n", s->names[i], ps[i].errors);
      header (f, "nrm_api_request_errors_total", "counter",
              "Requests and watches of the ResourceSlice publisher that got no answer, or HTTP 401, 403, 429 or 5xx.");
      for (size_t i = 0; i < n; i++)
        fprintf (f, "nrm_api_request_errors_total{driver=\"%s\"} %lld\n", s->names[i], ps[i].api_errors);
      header (f, "nrm_api_connected", "gauge", "1 when the last request to the Kubernetes API got an answer.");
      fprintf (f, "nrm_api_connected %d\n", connected);
      for (size_t i = 0; i < n; i++)
        free (ps[i].error);
    }
  status_metrics (f, s);
  fclose (f);
  return buf;
}

bool
nrm_metrics_live (struct nrm_metrics_sources *s, char **why)
{
  *why = NULL;
  for (size_t i = 0; i < s->drivers->n; i++)
    if (s->plugins[i] == NULL || access (nrm_plugin_dra_socket (s->plugins[i]), F_OK) < 0)
      {
        *why = xasprintf ("%s: the DRA socket is gone", s->names[i]);
        return false;
      }
  return true;
}

bool
nrm_metrics_ready (struct nrm_metrics_sources *s, char **why)
{
  *why = NULL;
  if (!nrm_metrics_live (s, why))
    return false;
  for (size_t i = 0; i < s->drivers->n; i++)
    {
      int reg = nrm_plugin_registered (s->plugins[i]);
      if (reg != 1)
        {
          *why = xasprintf ("%s: %s", s->names[i],
                            reg == 0 ? "the kubelet refused the registration" : "not registered with the kubelet yet");
          return false;
        }
      if (s->publishers && s->publishers[i])
        {
          struct nrm_publisher_status ps;
          nrm_publisher_status (s->publishers[i], &ps);
          /* A standby serves its claims; the other instance publishes. */
          bool ok = ps.synced || ps.standby;
          if (!ok)
            *why = xasprintf ("%s: ResourceSlices not in sync%s%s", s->names[i], ps.error ? ": " : "",
                              ps.error ? ps.error : "");
          free (ps.error);
          if (!ok)
            return false;
        }
    }
  return true;
}
