/* SPDX-License-Identifier: Apache-2.0 */
/* Device metadata files for containers (KEP-5304) and the CDI specs that
 * mount them. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/kubelet/metadata.h"
#include "driver/driver.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"

#define API_VERSION "metadata.resource.k8s.io/v1alpha1"
#define HOST_SUBDIR "dra-device-metadata"
#define UID_MAX 128
/* An existing metadata file larger than this is not read back. */
#define READ_MAX (16 * 1024 * 1024)
/* Room that nrm_write_atomic() needs beside a file name: ".tmp.XXXXXX". */
#define TMP_ROOM 16

static inline void
closedirp (DIR **d)
{
  if (*d)
    closedir (*d);
}
#define cleanup_dir __attribute__ ((cleanup (closedirp)))

/* --- names ------------------------------------------------------------------- */

/* Refuses value for field, with a printable, shortened copy of it. */
static int
refuse (const char *field, const char *value, const char *why, nrm_error_t *err)
{
  char shown[68];
  size_t n = 0;

  if (value == NULL)
    return nrm_error_set (err, EINVAL, "missing %s", field);
  for (const char *p = value; *p && n < 64; p++)
    shown[n++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
  if (strlen (value) > 64)
    {
      memcpy (shown + n, "...", 3);
      n += 3;
    }
  shown[n] = '\0';
  return nrm_error_set (err, EINVAL, "invalid %s `%s`: %s", field, shown, why);
}

static bool
is_uid (const char *s)
{
  size_t n = s ? strlen (s) : 0;
  if (n == 0 || n > UID_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
      return false;
  return true;
}

/* "req" or "req/sub", each a DNS label; *ret is the base request "req". */
static int
check_request (const char *request, char **ret, nrm_error_t *err)
{
  const char *why = "must be a DNS label, or two joined by `/`";

  if (request == NULL)
    return refuse ("request", request, why, err);
  const char *slash = strchr (request, '/');
  cleanup_free char *base = nrm_base_request (request);
  if (!nrm_is_dns_label (base) || (slash && !nrm_is_dns_label (slash + 1)))
    return refuse ("request", request, why, err);
  *ret = TAKE_PTR (base);
  return 0;
}

/* The fields that every call builds paths from. */
static int
check_claim (const char *driver, const char *ns, const char *name, const char *uid, nrm_error_t *err)
{
  if (!nrm_is_dns_subdomain (driver, 63))
    return refuse ("driver", driver, "must be a DNS subdomain of at most 63 characters", err);
  if (!nrm_is_dns_label (ns))
    return refuse ("namespace", ns, "must be a DNS label", err);
  if (!nrm_is_dns_subdomain (name, 253))
    return refuse ("claim name", name, "must be a DNS subdomain", err);
  if (!is_uid (uid))
    return refuse ("claim uid", uid, "must be 1 to 128 characters of [a-z0-9-]", err);
  return 0;
}

/* --- writing ----------------------------------------------------------------- */

/* The generation of the file written last for this claim and request, or 0
 * when there is none that can be read (missing, corrupt, another claim of
 * the same name). */
static json_int_t
previous_generation (const char *path, const char *uid)
{
  cleanup_free char *text = NULL;
  nrm_error_t ignored = NULL;

  if (nrm_read_file (path, READ_MAX, &text, NULL, &ignored) < 0)
    {
      nrm_error_release (&ignored);
      return 0;
    }
  /* A stream of objects, one per version: the first is enough. */
  cleanup_json json_t *doc = json_loads (text, JSON_DISABLE_EOF_CHECK, NULL);
  json_t *meta = json_object_get (doc, "metadata");
  json_t *gen = json_object_get (meta, "generation");
  const char *old_uid = json_string_value (json_object_get (meta, "uid"));
  if (!json_is_integer (gen) || old_uid == NULL || strcmp (old_uid, uid) != 0)
    return 0;
  json_int_t g = json_integer_value (gen);
  return g > 0 && g < (json_int_t) INT64_MAX ? g : 0;
}

/* The devices as the file lists them: only the four known fields. */
static json_t *
copy_devices (json_t *devices, nrm_error_t *err)
{
  cleanup_json json_t *out = json_array ();
  size_t i;
  json_t *d;

  if (!json_is_array (devices) || json_array_size (devices) == 0)
    {
      nrm_error_set (err, EINVAL, "devices must be a non-empty array");
      return NULL;
    }
  json_array_foreach (devices, i, d)
  {
    const char *driver = json_string_value (json_object_get (d, "driver"));
    const char *pool = json_string_value (json_object_get (d, "pool"));
    const char *name = json_string_value (json_object_get (d, "name"));
    json_t *attrs = json_object_get (d, "attributes");
    if (driver == NULL || pool == NULL || name == NULL || *driver == '\0' || *pool == '\0' || *name == '\0')
      {
        nrm_error_set (err, EINVAL, "device %zu needs a driver, a pool and a name", i);
        return NULL;
      }
    if (attrs != NULL && !json_is_null (attrs) && !json_is_object (attrs))
      {
        nrm_error_set (err, EINVAL, "the attributes of device %zu are not an object", i);
        return NULL;
      }
    json_t *c = json_pack ("{s:s, s:s, s:s}", "driver", driver, "pool", pool, "name", name);
    json_array_append_new (out, c);
    if (json_is_object (attrs))
      json_object_set (c, "attributes", attrs);
  }
  return TAKE_PTR (out);
}

/* mkdir for a directory this module owns: 0755 whatever the umask, and a
 * directory (not a link to one) when it exists already. */
static int
own_dir (const char *path, nrm_error_t *err)
{
  struct stat st;

  if (mkdir (path, 0755) == 0)
    {
      if (chmod (path, 0755) < 0)
        return nrm_error_errno (err, errno, "cannot set the mode of `%s`", path);
      return 0;
    }
  if (errno != EEXIST)
    return nrm_error_errno (err, errno, "cannot create directory `%s`", path);
  if (lstat (path, &st) < 0)
    return nrm_error_errno (err, errno, "cannot stat `%s`", path);
  if (!S_ISDIR (st.st_mode))
    return nrm_error_set (err, ENOTDIR, "`%s` is not a directory", path);
  return 0;
}

static char *
dump (json_t *v)
{
  cleanup_free char *text = json_dumps (v, JSON_INDENT (2));
  return xasprintf ("%s\n", text);
}

int
nrm_metadata_write (const char *plugin_data_dir, const char *cdi_dir, const char *driver, const char *ns,
                    const char *name, const char *uid, const char *pod_claim_name, const char *request, json_t *devices,
                    char **ret_cdi_id, nrm_error_t *err)
{
  cleanup_free char *base = NULL, *top = NULL, *claim_dir = NULL, *req_dir = NULL, *host = NULL;
  cleanup_free char *container = NULL, *cdi_file = NULL, *dev_name = NULL, *kind = NULL, *id = NULL;
  cleanup_free char *text = NULL, *spec_text = NULL;

  if (plugin_data_dir == NULL || *plugin_data_dir == '\0' || cdi_dir == NULL || *cdi_dir == '\0')
    return nrm_error_set (err, EINVAL, "the plugin data and CDI directories are required");
  if (check_claim (driver, ns, name, uid, err) < 0)
    return -1;
  if (pod_claim_name != NULL && !nrm_is_dns_label (pod_claim_name))
    return refuse ("pod claim name", pod_claim_name, "must be a DNS label", err);
  if (check_request (request, &base, err) < 0)
    return -1;
  cleanup_json json_t *devs = copy_devices (devices, err);
  if (devs == NULL)
    return nrm_error_wrap (err, "request `%s` of claim %s/%s", request, ns, name);

  top = xasprintf ("%s/" HOST_SUBDIR, plugin_data_dir);
  claim_dir = xasprintf ("%s/%s_%s", top, ns, name);
  req_dir = xasprintf ("%s/%s", claim_dir, base);
  host = xasprintf ("%s/metadata.json", req_dir);
  container = xasprintf (NRM_METADATA_CONTAINER_ROOT "/%s/%s/%s/%s-metadata.json",
                         pod_claim_name ? "resourceclaimtemplates" : "resourceclaims",
                         pod_claim_name ? pod_claim_name : name, base, driver);
  dev_name = xasprintf ("%s_%s", uid, base);
  cdi_file = xasprintf ("%s/%s_metadata_%s.json", cdi_dir, driver, dev_name);
  kind = xasprintf ("%s/metadata", driver);
  id = xasprintf ("%s=%s", kind, dev_name);
  /* Valid names can still make a file name too long for the file system. */
  if (strlen (ns) + 1 + strlen (name) > NAME_MAX)
    return refuse ("claim name", name, "too long, with the namespace, for a file name", err);
  if (strlen (strrchr (cdi_file, '/') + 1) + TMP_ROOM > NAME_MAX)
    return refuse ("claim uid", uid, "too long, with the driver and the request, for a file name", err);

  json_int_t generation = previous_generation (host, uid) + 1;
  cleanup_json json_t *doc
      = json_pack ("{s:s, s:s, s:{s:s, s:s, s:s, s:I}}", "apiVersion", API_VERSION, "kind", "DeviceMetadata",
                   "metadata", "name", name, "namespace", ns, "uid", uid, "generation", generation);
  if (pod_claim_name)
    json_object_set_new (doc, "podClaimName", json_string (pod_claim_name));
  json_object_set_new (doc, "requests", json_pack ("[{s:s, s:O}]", "name", request, "devices", devs));
  cleanup_json json_t *spec = json_pack ("{s:s, s:s, s:[{s:s, s:{s:[{s:s, s:s, s:[s, s]}]}}]}", "cdiVersion", "0.5.0",
                                         "kind", kind, "devices", "name", dev_name, "containerEdits", "mounts",
                                         "hostPath", host, "containerPath", container, "options", "ro", "bind");
  /* The other names are checked above; the directory is the node's setting. */
  if (spec == NULL)
    return nrm_error_set (err, EINVAL, "the plugin data directory `%s` is not valid UTF-8", plugin_data_dir);
  text = dump (doc);
  spec_text = dump (spec);

  if (nrm_mkdir_p (plugin_data_dir, 0755, err) < 0 || own_dir (top, err) < 0 || own_dir (claim_dir, err) < 0
      || own_dir (req_dir, err) < 0 || nrm_write_atomic (host, text, strlen (text), 0644, err) < 0
      || nrm_mkdir_p (cdi_dir, 0755, err) < 0
      || nrm_write_atomic (cdi_file, spec_text, strlen (spec_text), 0644, err) < 0)
    return nrm_error_wrap (err, "device metadata of request `%s` of claim %s/%s", request, ns, name);
  if (ret_cdi_id)
    *ret_cdi_id = TAKE_PTR (id);
  return 0;
}

/* --- removal ----------------------------------------------------------------- */

/* Removes name in the directory dfd (shown as where), and everything below
 * it when it is a directory; links are removed, never followed. */
static int
remove_at (int dfd, const char *where, const char *name, int depth, nrm_error_t *err)
{
  cleanup_free char *path = xasprintf ("%s/%s", where, name);
  struct stat st;
  int rc = 0;

  if (fstatat (dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? 0 : nrm_error_errno (err, errno, "cannot stat `%s`", path);
  if (!S_ISDIR (st.st_mode))
    {
      if (unlinkat (dfd, name, 0) < 0 && errno != ENOENT)
        return nrm_error_errno (err, errno, "cannot remove `%s`", path);
      return 0;
    }
  /* This module writes two levels; anything much deeper is not ours. */
  if (depth >= 8)
    return nrm_error_set (err, ELOOP, "`%s` is nested too deep to remove", path);
  int fd = openat (dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    {
      if (errno == ENOENT)
        return 0;
      /* Replaced by a link or a file since the fstatat(). */
      if ((errno == ELOOP || errno == ENOTDIR) && (unlinkat (dfd, name, 0) == 0 || errno == ENOENT))
        return 0;
      return nrm_error_errno (err, errno, "cannot open `%s`", path);
    }
  cleanup_dir DIR *d = fdopendir (fd);
  if (d == NULL)
    {
      int e = errno;
      close (fd);
      return nrm_error_errno (err, e, "cannot read `%s`", path);
    }
  for (;;)
    {
      errno = 0;
      struct dirent *de = readdir (d);
      if (de == NULL)
        {
          if (errno != 0)
            rc = nrm_error_errno (err, errno, "cannot read `%s`", path);
          break;
        }
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      if (remove_at (dirfd (d), path, de->d_name, depth + 1, err) < 0)
        rc = -1;
    }
  if (rc < 0)
    return rc;
  if (unlinkat (dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
    return nrm_error_errno (err, errno, "cannot remove `%s`", path);
  return 0;
}

/* Removes <driver>_metadata_<uid>_*.json (and temporary files left of
 * them) from the CDI directory. */
static int
remove_specs (const char *cdi_dir, const char *driver, const char *uid, nrm_error_t *err)
{
  cleanup_free char *prefix = xasprintf ("%s_metadata_%s_", driver, uid);
  int rc = 0;

  size_t plen = strlen (prefix);
  cleanup_dir DIR *d = opendir (cdi_dir);
  if (d == NULL)
    return errno == ENOENT ? 0 : nrm_error_errno (err, errno, "cannot open `%s`", cdi_dir);
  for (;;)
    {
      errno = 0;
      struct dirent *de = readdir (d);
      if (de == NULL)
        {
          if (errno != 0)
            rc = nrm_error_errno (err, errno, "cannot read `%s`", cdi_dir);
          break;
        }
      const char *n = de->d_name;
      size_t len = strlen (n);
      if (len <= plen + 5 || strncmp (n, prefix, plen) != 0)
        continue;
      if (strcmp (n + len - 5, ".json") != 0 && strstr (n + plen, ".json.tmp.") == NULL)
        continue;
      /* Never a directory of ours: leave one alone rather than fail forever. */
      if (unlinkat (dirfd (d), n, 0) < 0 && errno != ENOENT && errno != EISDIR)
        rc = nrm_error_errno (err, errno, "cannot remove `%s/%s`", cdi_dir, n);
    }
  return rc;
}

int
nrm_metadata_remove (const char *plugin_data_dir, const char *cdi_dir, const char *driver, const char *ns,
                     const char *name, const char *uid, nrm_error_t *err)
{
  cleanup_free char *top = NULL, *claim_dir = NULL;
  int rc = 0;

  if (plugin_data_dir == NULL || *plugin_data_dir == '\0' || cdi_dir == NULL || *cdi_dir == '\0')
    return nrm_error_set (err, EINVAL, "the plugin data and CDI directories are required");
  if (check_claim (driver, ns, name, uid, err) < 0)
    return -1;
  top = xasprintf ("%s/" HOST_SUBDIR, plugin_data_dir);
  claim_dir = xasprintf ("%s_%s", ns, name);

  cleanup_close int dfd = open (top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 && errno != ENOENT)
    rc = nrm_error_errno (err, errno, "cannot open `%s`", top);
  /* A name too long for a file name was never written. */
  else if (dfd >= 0 && strlen (claim_dir) <= NAME_MAX && remove_at (dfd, top, claim_dir, 0, err) < 0)
    rc = -1;
  if (remove_specs (cdi_dir, driver, uid, err) < 0)
    rc = -1;
  if (rc < 0)
    return nrm_error_wrap (err, "device metadata of claim %s/%s", ns, name);
  return 0;
}

const char *
nrm_metadata_pod_claim_name (json_t *claim)
{
  json_t *annotations = json_object_get (json_object_get (claim, "metadata"), "annotations");
  return json_string_value (json_object_get (annotations, NRM_METADATA_POD_CLAIM_NAME_ANNOTATION));
}

/* --- the metadata of a claim, for the plugin ------------------------------ */

json_t *
nrm_metadata_entries (const char *driver, const struct nrm_claim_view *v, json_t *attrs)
{
  json_t *out = json_array ();
  const char *pcn = nrm_metadata_pod_claim_name (v->claim);
  for (size_t i = 0; i < v->n_results; i++)
    {
      const struct nrm_alloc_result *r = &v->results[i];
      cleanup_free char *base = nrm_base_request (r->request);
      json_t *entry = NULL, *e;
      size_t k;
      json_array_foreach (out, k, e)
      {
        cleanup_free char *b = nrm_base_request (json_string_value (json_object_get (e, "request")));
        if (strcmp (b, base) == 0)
          entry = e;
      }
      if (entry == NULL)
        {
          entry = json_pack ("{s:s, s:[]}", "request", r->request, "devices");
          if (pcn)
            json_object_set_new (entry, "podClaimName", json_string (pcn));
          json_array_append_new (out, entry);
        }
      json_t *dev = json_pack ("{s:s, s:s, s:s}", "driver", driver, "pool", r->pool, "name", r->device);
      json_t *a = json_object_get (attrs, r->device);
      if (json_object_size (a) > 0)
        json_object_set (dev, "attributes", a);
      json_array_append_new (json_object_get (entry, "devices"), dev);
    }
  return out;
}

void
nrm_metadata_write_claim (const char *plugin_data_dir, const char *cdi_dir, const char *driver, const char *ns,
                          const char *name, const char *uid, json_t *entries, json_t *devs, nrm_log_fn log,
                          void *log_ctx)
{
  size_t i, k;
  json_t *e, *d;
  json_array_foreach (entries, i, e)
  {
    cleanup_free char *id = NULL;
    const char *request = json_string_value (json_object_get (e, "request"));
    nrm_error_t err = NULL;
    if (nrm_metadata_write (plugin_data_dir, cdi_dir, driver, ns, name, uid,
                            json_string_value (json_object_get (e, "podClaimName")), request,
                            json_object_get (e, "devices"), &id, &err)
        < 0)
      {
        NRM_LOG_TO (log, log_ctx, NRM_LOG_WARNING, "%s: claim %s/%s: device metadata: %s", driver, ns, name,
                    nrm_error_msg (err));
        nrm_error_release (&err);
        continue;
      }
    cleanup_free char *base = nrm_base_request (request);
    json_array_foreach (devs, k, d)
    {
      json_t *names = json_object_get (d, "requestNames");
      if (strcmp (json_string_value (json_array_get (names, 0)) ?: "", base) == 0)
        {
          json_t *ids = json_object_get (d, "cdiDeviceIDs");
          size_t x;
          json_t *have;
          bool dup = false;
          json_array_foreach (ids, x, have) { dup |= strcmp (json_string_value (have) ?: "", id) == 0; }
          if (!dup)
            json_array_append_new (ids, json_string (id));
          break;
        }
    }
  }
}

void
nrm_metadata_remove_entry (const char *plugin_data_dir, const char *cdi_dir, const char *driver, const char *uid,
                           json_t *entry, bool all, nrm_log_fn log, void *log_ctx)
{
  const char *ns = json_string_value (json_object_get (entry, "namespace"));
  const char *name = json_string_value (json_object_get (entry, "name"));
  nrm_error_t err = NULL;
  if (ns == NULL || name == NULL || (!all && json_object_get (entry, "metadata") == NULL))
    return;
  if (nrm_metadata_remove (plugin_data_dir, cdi_dir, driver, ns, name, uid, &err) < 0)
    {
      NRM_LOG_TO (log, log_ctx, NRM_LOG_WARNING, "%s: claim %s: removing device metadata: %s", driver, uid,
                  nrm_error_msg (err));
      nrm_error_release (&err);
    }
}

static bool
same_str (json_t *v, const char *s)
{
  return json_is_string (v) && strcmp (json_string_value (v), s) == 0;
}

/* Claim UIDs, namespaces and names have no '_': the UID of a spec is what
 * comes before the next one, the namespace of a folder what comes before
 * the first. */
void
nrm_metadata_remove_orphans (const char *plugin_data_dir, const char *cdi_dir, const char *driver, json_t *claims,
                             nrm_log_fn log, void *log_ctx)
{
  cleanup_free char *prefix = xasprintf ("%s_metadata_", driver);
  cleanup_free char *dir = xasprintf ("%s/" HOST_SUBDIR, plugin_data_dir);
  size_t plen = strlen (prefix);
  DIR *d = opendir (cdi_dir);
  struct dirent *de;
  while (d && (de = readdir (d)) != NULL)
    {
      const char *rest = de->d_name + plen;
      if (strncmp (de->d_name, prefix, plen) != 0 || strchr (rest, '_') == NULL)
        continue;
      cleanup_free char *uid = xstrndup (rest, strcspn (rest, "_"));
      if (json_object_get (claims, uid) == NULL && unlinkat (dirfd (d), de->d_name, 0) == 0)
        NRM_LOG_TO (log, log_ctx, NRM_LOG_INFO, "removed the metadata spec %s of unknown claim %s", de->d_name, uid);
    }
  if (d)
    closedir (d);
  d = opendir (dir);
  while (d && (de = readdir (d)) != NULL)
    {
      const char *sep = strchr (de->d_name, '_');
      if (de->d_name[0] == '.' || sep == NULL)
        continue;
      cleanup_free char *ns = xstrndup (de->d_name, (size_t) (sep - de->d_name));
      bool known = false;
      const char *uid;
      json_t *c;
      json_object_foreach (claims, uid, c)
      {
        known |= same_str (json_object_get (c, "namespace"), ns) && same_str (json_object_get (c, "name"), sep + 1);
      }
      nrm_error_t err = NULL;
      /* No UID matches "-": only the folder goes here. */
      if (!known && nrm_metadata_remove (plugin_data_dir, cdi_dir, driver, ns, sep + 1, "-", &err) == 0)
        NRM_LOG_TO (log, log_ctx, NRM_LOG_INFO, "removed the device metadata of unknown claim %s/%s", ns, sep + 1);
      nrm_error_release (&err);
    }
  if (d)
    closedir (d);
}
