/* SPDX-License-Identifier: Apache-2.0 */
/* Why a run got its CPUs and memory: the explanation (cores, L3 groups,
 * nodes and distances, the nodes tried, the memory, what else is held),
 * printed by --dry-run as text or JSON, and one line in the log for a
 * real run. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cpuset/placement.h"
#include "driver/kubelet/checkpoint.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/logging.h"
#include "nrm/run-internal.h"

/* Why these CPUs: the cores, L3 groups and nodes they make up, the
 * distances, the nodes tried, the memory and what else is held. */
static json_t *
explain (const struct nrm_topology *t, hwloc_const_bitmap_t got, const struct part *parts, size_t n_parts,
         json_t *tried, json_t *claims, const char *uid, const struct nrm_run_request *rq, const char *mems,
         int mem_node, const char *state_dir)
{
  cleanup_free char *cpus = nrm_cpulist_format (got);
  json_t *jn = json_array ();
  for (size_t i = 0; i < n_parts; i++)
    {
      const struct nrm_numa_node *nn = &t->numa[parts[i].ni];
      cleanup_bitmap hwloc_bitmap_t on = xbitmap_dup (got);
      hwloc_bitmap_and (on, on, nn->cpus);
      cleanup_free char *list = nrm_cpulist_format (on);
      json_t *dist = json_object ();
      for (size_t j = 0; t->distances && j < t->n_numa; j++)
        {
          char key[16];
          snprintf (key, sizeof (key), "%u", t->numa[j].os_index);
          json_object_set_new (dist, key, json_integer ((json_int_t) nrm_topology_distance (t, parts[i].ni, j)));
        }
      json_array_append_new (jn, json_pack ("{s:i, s:s, s:i, s:o}", "node", (int) nn->os_index, "cpus", list, "count",
                                            (int) parts[i].count, "distances", dist));
    }
  json_t *held = json_array ();
  const char *u;
  json_t *e;
  json_object_foreach (claims, u, e)
  {
    const char *list = json_string_value (json_object_get (json_object_get (e, "state"), "cpus"));
    if (strcmp (u, uid) == 0 || !nrm_checkpoint_completed (e) || list == NULL)
      continue;
    json_array_append_new (held,
                           json_pack ("{s:s, s:s, s:s, s:s}", "namespace",
                                      json_string_value (json_object_get (e, "namespace")) ?: "", "name",
                                      json_string_value (json_object_get (e, "name")) ?: "", "uid", u, "cpus", list));
  }
  json_t *mem = json_pack ("{s:s, s:s}", "policy", nrm_run_policy_name (rq->policy), "nodes", mems);
  if (rq->memory_kind || rq->memory_tier >= 0)
    {
      int mi = nrm_topology_numa_index (t, (unsigned) mem_node);
      cleanup_free char *why = xasprintf ("the nearest node to the CPUs with %s memory (tier %d) and room",
                                          mi >= 0 ? t->numa[mi].kind : "?", mi >= 0 ? t->numa[mi].tier : -1);
      json_object_set_new (mem, "why", json_string (why));
    }
  else if (rq->policy == NRM_RUN_MEM_DEFAULT)
    json_object_set_new (mem, "why", json_string ("the NUMA nodes of the CPUs"));
  if (rq->memory || rq->hugepages_2mi || rq->hugepages_1gi)
    json_object_set_new (mem, "takenFrom", json_integer (mem_node));
  if (rq->memory)
    json_object_set_new (mem, "memory", json_string (rq->memory));
  if (rq->hugepages_2mi)
    json_object_set_new (mem, "hugepages2Mi", json_string (rq->hugepages_2mi));
  if (rq->hugepages_1gi)
    json_object_set_new (mem, "hugepages1Gi", json_string (rq->hugepages_1gi));
  /* The layout's keys (wholeCores ... numaNodes) after the count, as
   * nrm status and the claim's metadata have them. */
  json_t *x = json_pack ("{s:b, s:s, s:i}", "dryRun", rq->dry_run, "cpus", cpus, "count", hwloc_bitmap_weight (got));
  cleanup_json json_t *layout = nrm_cpus_layout (t, got, NULL);
  json_object_update (x, layout);
  json_object_set_new (x, "nodes", jn);
  json_object_set_new (x, "memory", mem);
  json_object_set (x, "tried", tried);
  json_object_set_new (x, "held", held);
  json_object_set_new (x, "stateDir", state_dir ? json_string (state_dir) : json_null ());
  return x;
}

static const char *
dash (const char *s)
{
  return s && *s ? s : "-";
}

static void
print_explanation (FILE *f, json_t *x, char **argv)
{
  size_t i;
  json_t *v;
  fprintf (f, "would take CPUs %s (%d) for", json_string_value (json_object_get (x, "cpus")),
           (int) json_integer_value (json_object_get (x, "count")));
  json_t *att = json_object_get (x, "attach");
  for (size_t k = 0; argv && argv[k]; k++)
    fprintf (f, " %s", argv[k]);
  if (att)
    fprintf (f, " process %d (%s, %d thread%s)\n", (int) json_integer_value (json_object_get (att, "pid")),
             json_string_value (json_object_get (att, "command")),
             (int) json_integer_value (json_object_get (att, "threads")),
             json_integer_value (json_object_get (att, "threads")) == 1 ? "" : "s");
  else
    fprintf (f, "%s\n", argv ? "" : " a command");
  fprintf (f, "  whole cores: %s; cores shared with other CPUs: %s (cores by their first CPU)\n",
           dash (json_string_value (json_object_get (x, "wholeCores"))),
           dash (json_string_value (json_object_get (x, "partialCores"))));
  fprintf (f, "  L3 groups: %s; packages: %s; NUMA nodes: %s\n",
           dash (json_string_value (json_object_get (x, "l3Groups"))),
           dash (json_string_value (json_object_get (x, "packages"))),
           dash (json_string_value (json_object_get (x, "numaNodes"))));
  json_array_foreach (json_object_get (x, "nodes"), i, v)
  {
    fprintf (f, "  NUMA node %d: CPUs %s", (int) json_integer_value (json_object_get (v, "node")),
             json_string_value (json_object_get (v, "cpus")));
    const char *k;
    json_t *d;
    const char *sep = "; distances";
    json_object_foreach (json_object_get (v, "distances"), k, d)
    {
      fprintf (f, "%s %s:%d", sep, k, (int) json_integer_value (d));
      sep = "";
    }
    fputc ('\n', f);
  }
  json_t *pv = json_object_get (x, "partition");
  if (pv)
    {
      json_t *av = json_object_get (pv, "available");
      const char *pwhy = json_string_value (json_object_get (pv, "why"));
      fprintf (f, "  cpuset partition: %s (%s)%s%s%s\n", json_string_value (json_object_get (pv, "mode")),
               json_string_value (json_object_get (pv, "from")),
               json_is_true (av) ? ": this kernel can make one"
               : av              ? ": unavailable here"
                                 : "",
               pwhy ? "; " : "", pwhy ? pwhy : "");
    }
  json_t *m = json_object_get (x, "memory");
  fprintf (f, "  memory: policy %s, nodes %s", json_string_value (json_object_get (m, "policy")),
           json_string_value (json_object_get (m, "nodes")));
  if (json_object_get (m, "why"))
    fprintf (f, " (%s)", json_string_value (json_object_get (m, "why")));
  if (json_object_get (m, "takenFrom"))
    fprintf (f, "; from node %d:%s%s%s%s%s%s", (int) json_integer_value (json_object_get (m, "takenFrom")),
             json_object_get (m, "memory") ? " memory " : "", json_string_value (json_object_get (m, "memory")) ?: "",
             json_object_get (m, "hugepages2Mi") ? " 2Mi huge pages " : "",
             json_string_value (json_object_get (m, "hugepages2Mi")) ?: "",
             json_object_get (m, "hugepages1Gi") ? " 1Gi huge pages " : "",
             json_string_value (json_object_get (m, "hugepages1Gi")) ?: "");
  fputc ('\n', f);
  json_array_foreach (json_object_get (x, "tried"), i, v) fprintf (
      f, "  tried NUMA node%s %s: %s\n", strpbrk (json_string_value (json_object_get (v, "nodes")), ",-") ? "s" : "",
      json_string_value (json_object_get (v, "nodes")), json_string_value (json_object_get (v, "result")));
  json_t *held = json_object_get (x, "held");
  if (json_array_size (held) == 0)
    fprintf (f, "  held by others: nothing\n");
  json_array_foreach (held, i, v)
      fprintf (f, "  held by %s/%s (%s): CPUs %s\n", json_string_value (json_object_get (v, "namespace")),
               json_string_value (json_object_get (v, "name")), json_string_value (json_object_get (v, "uid")),
               json_string_value (json_object_get (v, "cpus")));
  if (json_is_true (json_object_get (x, "dryRun")))
    fprintf (f, "  nothing was taken (dry run; state read from %s)\n",
             json_string_value (json_object_get (x, "stateDir")) ?: "nowhere: a recorded machine holds nothing");
}

/* Why these CPUs and this memory: printed for a dry run, one line in the
 * log for a real one (with each node that had no room). */
void
nrm_run_explain (struct run *r, FILE *out)
{
  const struct nrm_run_request *rq = r->rq;
  struct nrm_config *c = r->c;
  enum nrm_partition_mode pm = nrm_run_partition_mode (c, rq);
  cleanup_json json_t *why = explain (
      r->t, r->got, r->parts, r->n_parts, r->tried, r->cpu_claims, r->uid, rq, r->mems, r->node,
      rq->dry_run ? (c->topology && strcmp (c->state_dir, NRM_DEFAULT_STATE_DIR) == 0 ? NULL : c->state_dir) : NULL);
  if (pm != NRM_PARTITION_OFF)
    json_object_set_new (why, "partition", nrm_run_partition_view (c, r->root, pm, rq->partition >= 0));
  if (rq->attach_pid)
    json_object_set_new (why, "attach",
                         json_pack ("{s:i, s:s, s:i}", "pid", (int) r->att.pid, "command", r->att.comm, "threads",
                                    (int) r->att.n_threads));
  if (rq->dry_run && rq->json)
    {
      cleanup_free char *text = json_dumps (why, JSON_INDENT (2));
      fprintf (out, "%s\n", text);
      return;
    }
  if (rq->dry_run)
    {
      print_explanation (out, why, rq->argv);
      return;
    }
  size_t i;
  json_t *v;
  json_array_foreach (r->tried, i, v) if (i + 1 < json_array_size (r->tried))
      nrm_log (NULL, NRM_LOG_INFO, "run %s: NUMA node %s skipped: %s", r->name,
               json_string_value (json_object_get (v, "nodes")), json_string_value (json_object_get (v, "result")));
  nrm_log (NULL, NRM_LOG_INFO,
           "run %s: CPUs %s (whole cores %s, partial cores %s; L3 groups %s; NUMA nodes %s), memory nodes %s "
           "(policy %s)",
           r->name, r->cpus, dash (json_string_value (json_object_get (why, "wholeCores"))),
           dash (json_string_value (json_object_get (why, "partialCores"))),
           dash (json_string_value (json_object_get (why, "l3Groups"))),
           dash (json_string_value (json_object_get (why, "numaNodes"))), r->mems, nrm_run_policy_name (rq->policy));
}
