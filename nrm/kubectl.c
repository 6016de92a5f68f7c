/* SPDX-License-Identifier: Apache-2.0 */
/* nrm kubectl: the API calls and the output (nrm/kubectl.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <yaml.h>

#include "driver/k8s/kube.h"
#include "driver/k8s/kubeconfig.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/text.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/yaml.h"
#include "nrm/kubectl-view.h"
#include "nrm/kubectl.h"

#define RESOURCE_API "/apis/resource.k8s.io/v1"

/* --- YAML ------------------------------------------------------------------ */

static int
emit (yaml_emitter_t *e, yaml_event_t *ev)
{
  return yaml_emitter_emit (e, ev) ? 0 : -1;
}

/* A string stays plain only where YAML reads it back as the same string
 * ("12", "true", "" are quoted). */
static bool
plain_ok (const char *s)
{
  json_t *back = NULL;
  nrm_error_t e = NULL;
  bool ok = *s && nrm_yaml_load (s, strlen (s), "a string", &back, &e) == 0 && json_is_string (back)
            && strcmp (json_string_value (back), s) == 0;
  nrm_error_release (&e);
  json_decref (back);
  return ok;
}

static int
emit_value (yaml_emitter_t *e, json_t *v)
{
  yaml_event_t ev;
  char num[64];
  const char *text = num;
  yaml_scalar_style_t style = YAML_PLAIN_SCALAR_STYLE;
  if (json_is_object (v))
    {
      const char *key;
      json_t *child;
      yaml_mapping_start_event_initialize (&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
      if (emit (e, &ev) < 0)
        return -1;
      json_object_foreach (v, key, child)
      {
        yaml_scalar_event_initialize (&ev, NULL, NULL, (yaml_char_t *) key, (int) strlen (key), 1, 1,
                                      plain_ok (key) ? YAML_PLAIN_SCALAR_STYLE : YAML_DOUBLE_QUOTED_SCALAR_STYLE);
        if (emit (e, &ev) < 0 || emit_value (e, child) < 0)
          return -1;
      }
      yaml_mapping_end_event_initialize (&ev);
      return emit (e, &ev);
    }
  if (json_is_array (v))
    {
      size_t i;
      json_t *child;
      yaml_sequence_start_event_initialize (&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
      if (emit (e, &ev) < 0)
        return -1;
      json_array_foreach (v, i, child)
      {
        if (emit_value (e, child) < 0)
          return -1;
      }
      yaml_sequence_end_event_initialize (&ev);
      return emit (e, &ev);
    }
  if (json_is_string (v))
    {
      text = json_string_value (v);
      style = plain_ok (text) ? YAML_PLAIN_SCALAR_STYLE : YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    }
  else if (json_is_integer (v))
    snprintf (num, sizeof (num), "%" JSON_INTEGER_FORMAT, json_integer_value (v));
  else if (json_is_real (v))
    snprintf (num, sizeof (num), "%.17g", json_real_value (v));
  else
    text = json_is_true (v) ? "true" : json_is_false (v) ? "false" : "null";
  yaml_scalar_event_initialize (&ev, NULL, NULL, (yaml_char_t *) text, (int) strlen (text), 1, 1, style);
  return emit (e, &ev);
}

static int
yaml_write (void *ctx, unsigned char *buf, size_t size)
{
  return fwrite (buf, 1, size, ctx) == size;
}

int
nrm_kubectl_yaml (json_t *doc, FILE *out, nrm_error_t *err)
{
  yaml_emitter_t e;
  yaml_event_t ev;
  int r = -1;
  if (!yaml_emitter_initialize (&e))
    nrm_oom ();
  yaml_emitter_set_output (&e, yaml_write, out);
  yaml_emitter_set_unicode (&e, 1);
  yaml_emitter_set_width (&e, -1);
  yaml_stream_start_event_initialize (&ev, YAML_UTF8_ENCODING);
  if (emit (&e, &ev) == 0)
    {
      yaml_document_start_event_initialize (&ev, NULL, NULL, NULL, 1);
      if (emit (&e, &ev) == 0 && emit_value (&e, doc) == 0)
        {
          yaml_document_end_event_initialize (&ev, 1);
          if (emit (&e, &ev) == 0)
            {
              yaml_stream_end_event_initialize (&ev);
              r = emit (&e, &ev);
            }
        }
    }
  if (r < 0)
    nrm_error_set (err, EIO, "YAML output: %s", e.problem ? e.problem : "cannot write");
  yaml_emitter_delete (&e);
  return r;
}

/* --- columns ------------------------------------------------------------- */

/* A table of strings, printed with each column as wide as its widest cell
 * and three spaces between, as kubectl prints. */
struct table
{
  json_t *rows; /* arrays of strings */
};

static void
table_add (struct table *t, int n, ...)
{
  va_list ap;
  json_t *row = json_array ();
  va_start (ap, n);
  for (int i = 0; i < n; i++)
    {
      const char *s = va_arg (ap, const char *);
      json_array_append_new (row, json_string (s ? s : ""));
    }
  va_end (ap);
  json_array_append_new (t->rows, row);
}

static void
table_print (struct table *t, FILE *out)
{
  size_t widths[32] = { 0 }, i, j;
  json_t *row, *cell;
  json_array_foreach (t->rows, i, row)
  {
    json_array_foreach (row, j, cell)
    {
      size_t w = strlen (json_string_value (cell));
      if (j < 32 && w > widths[j])
        widths[j] = w;
    }
  }
  json_array_foreach (t->rows, i, row)
  {
    size_t n = json_array_size (row);
    json_array_foreach (row, j, cell)
    {
      if (j + 1 == n)
        fprintf (out, "%s\n", json_string_value (cell));
      else
        fprintf (out, "%-*s   ", (int) widths[j < 32 ? j : 31], json_string_value (cell));
    }
  }
}

/* An amount of a resource: sizes with binary suffixes, counts as they are. */
static void
amount (const char *resource, json_int_t v, char *buf, size_t len)
{
  bool size = strcmp (resource, "memory") == 0 || strncmp (resource, "hugepages", 9) == 0;
  char q[64];
  /* Negative only when claims hold more than is published (a pool that
   * shrank under them). */
  if (size)
    snprintf (buf, len, "%s%s", v < 0 ? "-" : "", nrm_quantity_format ((uint64_t) (v < 0 ? -v : v), 1, q, sizeof (q)));
  else
    snprintf (buf, len, "%" JSON_INTEGER_FORMAT, v);
}

static void
print_nodes (json_t *view, FILE *out)
{
  struct table t = { json_array () };
  size_t i;
  json_t *r;
  table_add (&t, 8, "NODE", "NUMA", "RESOURCE", "DRIVER", "PUBLISHED", "ALLOCATED", "PREPARED", "FREE");
  json_array_foreach (json_object_get (view, "resources"), i, r)
  {
    const char *res = json_string_value (json_object_get (r, "resource"));
    char numa[32], pub[64], alloc[64], prep[64], free_[64];
    json_int_t n = json_integer_value (json_object_get (r, "numaNode"));
    if (n < 0)
      snprintf (numa, sizeof (numa), "-");
    else
      snprintf (numa, sizeof (numa), "%" JSON_INTEGER_FORMAT, n);
    amount (res, json_integer_value (json_object_get (r, "published")), pub, sizeof (pub));
    amount (res, json_integer_value (json_object_get (r, "allocated")), alloc, sizeof (alloc));
    amount (res, json_integer_value (json_object_get (r, "prepared")), prep, sizeof (prep));
    amount (res, json_integer_value (json_object_get (r, "free")), free_, sizeof (free_));
    table_add (&t, 8, json_string_value (json_object_get (r, "node")), numa, res,
               json_string_value (json_object_get (r, "driver")), pub, alloc, prep, free_);
  }
  if (json_array_size (t.rows) == 1)
    fputs ("No node-local ResourceSlices found.\n", out);
  else
    table_print (&t, out);
  json_array_foreach (json_object_get (view, "nodes"), i, r)
  {
    fprintf (out, "%s%s: %" JSON_INTEGER_FORMAT " allocated claim(s), %" JSON_INTEGER_FORMAT " prepared\n",
             i == 0 ? "\n" : "", json_string_value (json_object_get (r, "name")),
             json_integer_value (json_object_get (r, "claims")),
             json_integer_value (json_object_get (r, "preparedClaims")));
  }
  json_decref (t.rows);
}

/* A value of a claim's data, on one line. */
static char *
one_line (json_t *v)
{
  if (json_is_string (v))
    return xstrdup (json_string_value (v));
  if (json_is_array (v))
    {
      /* Lists of scalars as a,b,c. */
      size_t i, n = 0;
      json_t *e;
      bool scalars = true;
      json_array_foreach (v, i, e) { scalars &= !json_is_object (e) && !json_is_array (e); }
      if (scalars)
        {
          cleanup_free char *buf = NULL;
          size_t len = 0;
          FILE *f = open_memstream (&buf, &len);
          if (f == NULL)
            nrm_oom ();
          json_array_foreach (v, i, e)
          {
            cleanup_free char *s = one_line (e);
            fprintf (f, "%s%s", n++ ? "," : "", s);
          }
          fclose (f);
          return TAKE_PTR (buf);
        }
    }
  char *s = json_dumps (v, JSON_COMPACT | JSON_ENCODE_ANY);
  return s ? s : xstrdup ("?");
}

static void
print_claim (json_t *view, FILE *out)
{
  size_t i, k;
  json_t *r, *c;
  const char *node = json_string_value (json_object_get (view, "node"));
  fprintf (out, "Claim:         %s/%s\n", json_string_value (json_object_get (view, "namespace")),
           json_string_value (json_object_get (view, "name")));
  fprintf (out, "Allocated:     %s\n", json_is_true (json_object_get (view, "allocated")) ? "yes" : "no");
  if (node)
    fprintf (out, "Node:          %s\n", node);
  fputs ("Reserved for:  ", out);
  json_array_foreach (json_object_get (view, "reservedFor"), i, r)
  {
    fprintf (out, "%s%s %s", i ? ", " : "", json_string_value (json_object_get (r, "resource")),
             json_string_value (json_object_get (r, "name")));
  }
  fputs (json_array_size (json_object_get (view, "reservedFor")) ? "\n" : "-\n", out);
  if (json_array_size (json_object_get (view, "results")))
    {
      struct table t = { json_array () };
      fputs ("\nAllocation:\n", out);
      table_add (&t, 6, "  REQUEST", "DRIVER", "POOL", "DEVICE", "CONSUMED", "PREPARED");
      json_array_foreach (json_object_get (view, "results"), i, r)
      {
        cleanup_free char *req = xasprintf ("  %s", json_string_value (json_object_get (r, "request")));
        cleanup_free char *consumed = NULL;
        json_t *cc = json_object_get (r, "consumedCapacity");
        const char *key;
        json_t *v;
        json_object_foreach (cc, key, v)
        {
          char *n = xasprintf ("%s%s%s=%s", consumed ? consumed : "", consumed ? "," : "", key, json_string_value (v));
          free (consumed);
          consumed = n;
        }
        table_add (&t, 6, req, json_string_value (json_object_get (r, "driver")),
                   json_string_value (json_object_get (r, "pool")), json_string_value (json_object_get (r, "device")),
                   consumed ? consumed : "(whole device)",
                   json_is_true (json_object_get (r, "prepared")) ? "yes" : "no");
      }
      table_print (&t, out);
      json_decref (t.rows);
    }
  json_array_foreach (json_object_get (view, "devices"), i, r)
  {
    const char *key;
    json_t *v;
    json_t *share = json_object_get (r, "shareID");
    fprintf (out, "\nDevice %s %s/%s%s%s:\n", json_string_value (json_object_get (r, "driver")),
             json_string_value (json_object_get (r, "pool")), json_string_value (json_object_get (r, "device")),
             share ? " share " : "", share ? json_string_value (share) : "");
    json_object_foreach (json_object_get (r, "data"), key, v)
    {
      cleanup_free char *s = one_line (v);
      char size[64] = "";
      /* bytes also with a binary suffix, as the other sizes are shown. */
      if (strcmp (key, "bytes") == 0 && json_is_integer (v) && json_integer_value (v) > 0)
        {
          char q[48];
          snprintf (size, sizeof (size), " (%s)", nrm_quantity_format ((uint64_t) json_integer_value (v), 1, q, 48));
        }
      fprintf (out, "  %-14s %s%s\n", key, s, size);
    }
    json_array_foreach (json_object_get (r, "conditions"), k, c)
    {
      const char *reason = json_string_value (json_object_get (c, "reason"));
      const char *msg = json_string_value (json_object_get (c, "message"));
      fprintf (out, "  condition      %s=%s%s%s%s%s\n", json_string_value (json_object_get (c, "type")),
               json_string_value (json_object_get (c, "status")), reason && *reason ? " " : "", reason ? reason : "",
               msg && *msg ? ": " : "", msg ? msg : "");
    }
  }
  if (json_array_size (json_object_get (view, "devices")) == 0 && json_is_true (json_object_get (view, "allocated")))
    fputs ("\nNo device status yet: the node has not prepared the claim (no pod on it started with it), or the "
           "driver does not report placement.\n",
           out);
}

static void
print_pods (json_t *view, FILE *out)
{
  struct table t = { json_array () };
  size_t i;
  json_t *r;
  table_add (&t, 9, "NAMESPACE", "POD", "NODE", "CLAIM", "PREPARED", "CPUS", "NUMA", "MEMORY", "PCI");
  json_array_foreach (view, i, r)
  {
    char mem[64] = "-";
    cleanup_free char *pci = one_line (json_object_get (r, "busIDs"));
    bool found = json_is_true (json_object_get (r, "found"));
    const char *cpus = json_string_value (json_object_get (r, "cpus"));
    const char *numa = json_string_value (json_object_get (r, "numaNodes"));
    json_int_t bytes = json_integer_value (json_object_get (r, "bytes"));
    if (bytes > 0)
      amount ("memory", bytes, mem, sizeof (mem));
    table_add (&t, 9, json_string_value (json_object_get (r, "namespace")),
               json_string_value (json_object_get (r, "pod")), json_string_value (json_object_get (r, "node")),
               json_string_value (json_object_get (r, "claim")),
               !found                                           ? "(no claim)"
               : json_is_true (json_object_get (r, "prepared")) ? "yes"
                                                                : "no",
               cpus && *cpus ? cpus : "-", numa && *numa ? numa : "-", mem, pci && *pci ? pci : "-");
  }
  if (json_array_size (view) == 0)
    fputs ("No pods with claims found.\n", out);
  else
    table_print (&t, out);
  json_decref (t.rows);
}

void
nrm_kubectl_print (const char *sub, json_t *view, FILE *out)
{
  if (strcmp (sub, "nodes") == 0)
    print_nodes (view, out);
  else if (strcmp (sub, "claim") == 0)
    print_claim (view, out);
  else
    print_pods (view, out);
}

/* --- the API --------------------------------------------------------------- */

/* The client, from --kubeconfig, else $KUBECONFIG, else ~/.kube/config,
 * else the pod's service account (as kubectl falls back to). */
static int
open_kube (struct nrm_cli *cli, struct nrm_kube **ret, nrm_error_t *err)
{
  struct nrm_kube_options o;
  cleanup_free char *dflt = NULL;
  bool list = false;
  nrm_kube_options_init (&o);
  o.qps = 0; /* a few calls of one person */
  o.max_tries = 2;
  o.user_agent = "kubectl-nrm/" PACKAGE_VERSION;
  o.context = cli->kubectl.context;
  o.kubeconfig = cli->cfg.kubeconfig;
  if (o.kubeconfig == NULL)
    {
      if ((dflt = nrm_kubeconfig_default (&list, err)) == NULL)
        return -1;
      o.kubeconfig_list = list;
      o.kubeconfig = dflt;
      if (!list && access (dflt, F_OK) < 0 && nrm_kube_in_cluster () && o.context == NULL)
        o.kubeconfig = NULL;
    }
  return nrm_kube_new (&o, ret, err);
}

/* Every item of a list, page by page. */
static int
list_all (struct nrm_kube *k, const char *path, json_t **ret, nrm_error_t *err)
{
  json_t *items = json_array ();
  cleanup_free char *cont = NULL;
  do
    {
      cleanup_json json_t *body = NULL;
      cleanup_free char *esc = cont ? nrm_kube_escape (cont) : NULL;
      cleanup_free char *p = xasprintf ("%s%slimit=500%s%s", path, strchr (path, '?') ? "&" : "?",
                                        esc ? "&continue=" : "", esc ? esc : "");
      int code = nrm_kube_call (k, "GET", p, NULL, &body, err);
      free (cont);
      cont = NULL;
      if (code != 200)
        {
          if (code >= 0)
            nrm_error_set (err, EIO, "GET %s: %d %s", path, code, nrm_kube_status_message (body, code));
          json_decref (items);
          return -1;
        }
      json_array_extend (items, json_object_get (body, "items"));
      const char *c = json_string_value (json_object_get (json_object_get (body, "metadata"), "continue"));
      if (c && *c)
        cont = xstrdup (c);
    }
  while (cont);
  *ret = items;
  return 0;
}

static char *
field_selector (const char *node)
{
  cleanup_free char *sel = xasprintf ("spec.nodeName=%s", node);
  cleanup_free char *esc = nrm_kube_escape (sel);
  return xasprintf ("fieldSelector=%s", esc);
}

static int
view_nodes (struct nrm_cli *cli, struct nrm_kube *k, json_t **ret, nrm_error_t *err)
{
  cleanup_json json_t *slices = NULL, *claims = NULL;
  const char *node = cli->kubectl.node;
  cleanup_free char *sel = node ? field_selector (node) : NULL;
  cleanup_free char *path = xasprintf (RESOURCE_API "/resourceslices%s%s", sel ? "?" : "", sel ? sel : "");
  /* Claims of every namespace: any of them may hold a node's devices. */
  if (list_all (k, path, &slices, err) < 0 || list_all (k, RESOURCE_API "/resourceclaims", &claims, err) < 0)
    return -1;
  *ret = nrm_kview_nodes (slices, claims, node);
  return 0;
}

static int
view_claim (struct nrm_cli *cli, struct nrm_kube *k, const char *ns, json_t **ret, nrm_error_t *err)
{
  cleanup_json json_t *claim = NULL;
  const char *name = cli->kubectl.name;
  cleanup_free char *path = xasprintf (RESOURCE_API "/namespaces/%s/resourceclaims/%s", ns, name);
  int code = nrm_kube_call (k, "GET", path, NULL, &claim, err);
  if (code < 0)
    return -1;
  if (code == 404)
    return nrm_error_set (err, ENOENT, "ResourceClaim `%s` not found in namespace `%s`", name, ns);
  if (code != 200)
    return nrm_error_set (err, EIO, "GET %s: %d %s", path, code, nrm_kube_status_message (claim, code));
  *ret = nrm_kview_claim (claim);
  return 0;
}

static int
view_pods (struct nrm_cli *cli, struct nrm_kube *k, const char *ns, json_t **ret, nrm_error_t *err)
{
  cleanup_json json_t *pods = NULL, *claims = NULL;
  const char *node = cli->kubectl.node;
  cleanup_free char *sel = node ? field_selector (node) : NULL;
  cleanup_free char *scope = ns ? xasprintf ("/namespaces/%s", ns) : xstrdup ("");
  cleanup_free char *ppath = xasprintf ("/api/v1%s/pods%s%s", scope, sel ? "?" : "", sel ? sel : "");
  cleanup_free char *cpath = xasprintf (RESOURCE_API "%s/resourceclaims", scope);
  if (list_all (k, ppath, &pods, err) < 0 || list_all (k, cpath, &claims, err) < 0)
    return -1;
  *ret = nrm_kview_pods (pods, claims);
  return 0;
}

int
nrm_cli_kubectl (struct nrm_cli *cli, nrm_error_t *err)
{
  struct nrm_kubectl_args *a = &cli->kubectl;
  struct nrm_kube *k = NULL;
  cleanup_json json_t *view = NULL;
  const char *sub = a->sub;
  int r = -1;
  if (open_kube (cli, &k, err) < 0)
    return nrm_error_wrap (err, "%s", sub);
  /* The namespace: -n, else the context's, else default (as kubectl). */
  const char *ns = a->namespace ? a->namespace : nrm_kube_namespace (k) ? nrm_kube_namespace (k) : "default";
  /* It goes into a request path. */
  if (!nrm_is_dns_label (ns))
    {
      nrm_kube_free (k);
      return nrm_error_set (err, EINVAL, "%s: the kubeconfig context's namespace `%.80s` is not a namespace name", sub,
                            ns);
    }
  if (strcmp (sub, "nodes") == 0)
    r = view_nodes (cli, k, &view, err);
  else if (strcmp (sub, "claim") == 0)
    r = view_claim (cli, k, ns, &view, err);
  else
    /* A node's pods are in any namespace: all unless -n says one. */
    r = view_pods (cli, k, a->namespace ? a->namespace : NULL, &view, err);
  nrm_kube_free (k);
  if (r < 0)
    return nrm_error_wrap (err, "%s", sub);

  cleanup_free char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  if (f == NULL)
    return nrm_error_errno (err, errno, "open_memstream");
  if (a->output && strcmp (a->output, "json") == 0)
    {
      json_dumpf (view, f, JSON_INDENT (2) | JSON_ENCODE_ANY);
      fputc ('\n', f);
    }
  else if (a->output)
    r = nrm_kubectl_yaml (view, f, err);
  else
    {
      nrm_kubectl_print (sub, view, f);
      if (strcmp (sub, "nodes") == 0)
        fputs ("\nWhat `nrm run` holds on a node is the node's own and not in the API, so not counted here:\n"
               "`nrm status` on the node shows it.\n",
               f);
    }
  fclose (f);
  /* Names, messages and data come from the API server: no escape sequence
   * of theirs reaches the terminal (JSON and YAML escape their own). */
  if (a->output == NULL)
    nrm_text_defang (buf, len);
  return r < 0 ? -1 : nrm_cli_emit (buf, len, err);
}
