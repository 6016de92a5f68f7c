/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/yaml.h"

/* Aliases can make a small document expand exponentially: cap the output. */
#define MAX_VALUES 1000000
#define MAX_DEPTH 64

struct conv
{
  yaml_document_t *doc;
  const char *what;
  size_t values;
};

static bool
is_one_of (const char *s, const char *const *list)
{
  for (; *list; list++)
    if (strcmp (s, *list) == 0)
      return true;
  return false;
}

/* YAML 1.2 core schema resolution of a plain scalar (what sigs.k8s.io/yaml
 * does for the values Kubernetes files hold). */
static json_t *
plain_scalar (const char *s, size_t len)
{
  static const char *const nulls[] = { "", "~", "null", "Null", "NULL", NULL };
  static const char *const trues[] = { "true", "True", "TRUE", NULL };
  static const char *const falses[] = { "false", "False", "FALSE", NULL };

  if (strlen (s) != len) /* an embedded NUL: keep it a string */
    return json_stringn (s, len);
  if (is_one_of (s, nulls))
    return json_null ();
  if (is_one_of (s, trues))
    return json_true ();
  if (is_one_of (s, falses))
    return json_false ();

  /* Integers: decimal, 0x hexadecimal, 0o octal (YAML 1.2); then floats. */
  const char *digits = s + (s[0] == '-' || s[0] == '+');
  int base = 10;
  if (strncmp (digits, "0x", 2) == 0 || strncmp (digits, "0o", 2) == 0)
    {
      base = digits[1] == 'x' ? 16 : 8;
      digits += 2;
    }
  if ((*digits >= '0' && *digits <= '9') || (base == 16 && isxdigit ((unsigned char) *digits)))
    {
      char *end;
      errno = 0;
      long long v = strtoll (digits, &end, base);
      if (*end == '\0' && errno == 0)
        return json_integer (s[0] == '-' ? -v : v);
    }
  if (base == 10 && (isdigit ((unsigned char) *digits) || (*digits == '.' && isdigit ((unsigned char) digits[1]))))
    {
      char *end;
      errno = 0;
      double d = strtod (s, &end);
      if (*end == '\0' && errno == 0 && isfinite (d))
        return json_real (d);
    }
  return json_stringn (s, len);
}

static int convert (struct conv *c, yaml_node_t *n, int depth, json_t **ret, nrm_error_t *err);

static int
convert_mapping (struct conv *c, yaml_node_t *n, int depth, json_t **ret, nrm_error_t *err)
{
  cleanup_json json_t *obj = json_object ();
  for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++)
    {
      yaml_node_t *k = yaml_document_get_node (c->doc, p->key);
      yaml_node_t *v = yaml_document_get_node (c->doc, p->value);
      if (k == NULL || v == NULL)
        return nrm_error_set (err, EINVAL, "%s: broken mapping", c->what);
      if (k->type != YAML_SCALAR_NODE)
        return nrm_error_set (err, EINVAL, "%s: line %zu: a mapping key must be a string", c->what,
                              k->start_mark.line + 1);
      cleanup_free char *key = xstrndup ((const char *) k->data.scalar.value, k->data.scalar.length);
      if (strcmp (key, "<<") == 0)
        return nrm_error_set (err, EINVAL, "%s: line %zu: merge keys (<<) are not supported", c->what,
                              k->start_mark.line + 1);
      if (json_object_get (obj, key))
        return nrm_error_set (err, EINVAL, "%s: line %zu: duplicate key `%s`", c->what, k->start_mark.line + 1, key);
      json_t *val = NULL;
      if (convert (c, v, depth + 1, &val, err) < 0)
        return -1;
      if (json_object_set_new (obj, key, val) < 0)
        return nrm_error_set (err, EINVAL, "%s: line %zu: key `%s` is not valid UTF-8", c->what, k->start_mark.line + 1,
                              key);
    }
  *ret = TAKE_PTR (obj);
  return 0;
}

static int
convert (struct conv *c, yaml_node_t *n, int depth, json_t **ret, nrm_error_t *err)
{
  if (depth > MAX_DEPTH)
    return nrm_error_set (err, EINVAL, "%s: line %zu: nested deeper than %d levels", c->what, n->start_mark.line + 1,
                          MAX_DEPTH);
  if (++c->values > MAX_VALUES)
    return nrm_error_set (err, EINVAL, "%s: more than %d values (alias expansion?)", c->what, MAX_VALUES);

  switch (n->type)
    {
    case YAML_SCALAR_NODE:
      {
        const char *s = (const char *) n->data.scalar.value;
        size_t len = n->data.scalar.length;
        /* Only plain scalars are resolved: quoted ones stay strings. */
        json_t *v = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? plain_scalar (s, len) : json_stringn (s, len);
        if (v == NULL)
          return nrm_error_set (err, EINVAL, "%s: line %zu: a string that is not valid UTF-8", c->what,
                                n->start_mark.line + 1);
        *ret = v;
        return 0;
      }
    case YAML_SEQUENCE_NODE:
      {
        cleanup_json json_t *arr = json_array ();
        for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++)
          {
            yaml_node_t *item = yaml_document_get_node (c->doc, *i);
            json_t *v = NULL;
            if (item == NULL)
              return nrm_error_set (err, EINVAL, "%s: broken sequence", c->what);
            if (convert (c, item, depth + 1, &v, err) < 0)
              return -1;
            json_array_append_new (arr, v);
          }
        *ret = TAKE_PTR (arr);
        return 0;
      }
    case YAML_MAPPING_NODE:
      return convert_mapping (c, n, depth, ret, err);
    default:
      return nrm_error_set (err, EINVAL, "%s: empty node", c->what);
    }
}

DEFINE_TRIVIAL_CLEANUP_FUNC (yaml_parser_t *, yaml_parser_delete)
DEFINE_TRIVIAL_CLEANUP_FUNC (yaml_document_t *, yaml_document_delete)

int
nrm_yaml_load (const char *text, size_t len, const char *what, json_t **ret, nrm_error_t *err)
{
  yaml_parser_t parser;
  yaml_document_t doc, extra;
  __attribute__ ((cleanup (yaml_parser_deletep))) yaml_parser_t *pp = NULL;
  __attribute__ ((cleanup (yaml_document_deletep))) yaml_document_t *dp = NULL;
  __attribute__ ((cleanup (yaml_document_deletep))) yaml_document_t *ep = NULL;

  /* It fails only for lack of memory. */
  if (!yaml_parser_initialize (&parser))
    nrm_oom ();
  pp = &parser;
  yaml_parser_set_input_string (&parser, (const unsigned char *) text, len);
  if (!yaml_parser_load (&parser, &doc))
    return nrm_error_set (err, EINVAL, "%s: line %zu column %zu: %s%s%s", what, parser.problem_mark.line + 1,
                          parser.problem_mark.column + 1, parser.problem ? parser.problem : "invalid YAML",
                          parser.context ? " " : "", parser.context ? parser.context : "");
  dp = &doc;
  yaml_node_t *root = yaml_document_get_root_node (&doc);
  if (root == NULL)
    return nrm_error_set (err, EINVAL, "%s: empty document", what);
  if (!yaml_parser_load (&parser, &extra))
    return nrm_error_set (err, EINVAL, "%s: line %zu: %s", what, parser.problem_mark.line + 1,
                          parser.problem ? parser.problem : "invalid YAML");
  ep = &extra;
  if (yaml_document_get_root_node (&extra) != NULL)
    return nrm_error_set (err, EINVAL, "%s: more than one YAML document", what);

  struct conv c = { .doc = &doc, .what = what };
  return convert (&c, root, 0, ret, err);
}

int
nrm_yaml_load_file (const char *path, size_t max, json_t **ret, nrm_error_t *err)
{
  cleanup_free char *text = NULL;
  size_t len = 0;
  if (nrm_read_file (path, max, &text, &len, err) < 0)
    return -1;
  cleanup_free char *what = xasprintf ("`%s`", path);
  return nrm_yaml_load (text, len, what, ret, err);
}
