/* SPDX-License-Identifier: Apache-2.0 */
/* What the commands share to set themselves up (nrm/setup.h). */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "nrm/base/cleanup.h"
#include "nrm/logging.h"
#include "nrm/setup.h"

int
nrm_setup_machine (const struct nrm_config *c, const struct nrm_fsroot *root, struct nrm_topology **ret,
                   nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  if (nrm_topology_load (c->topology, &t, err) < 0)
    return -1;
  if (nrm_topology_apply_settings (t, &c->node, root, err) < 0)
    {
      nrm_topology_free (t);
      return -1;
    }
  *ret = t;
  return 0;
}

int
nrm_setup_drivers (const struct nrm_config *c, const struct nrm_fsroot *root, const struct nrm_topology *t,
                   struct nrm_registry **reg, struct nrm_drivers *d, nrm_error_t *err)
{
  struct nrm_driver_selection sel;
  struct nrm_driver_host h = { .topo = t,
                               .node = &c->publish,
                               .fsroot = root,
                               .live = c->topology == NULL,
                               .log = nrm_log,
                               .kubelet_dir = c->kubelet_dir,
                               .state_dir = c->state_dir };
  nrm_config_drivers (c, &sel);
  if (nrm_registry_new (reg, err) < 0)
    return -1;
  if ((c->driver_dir && nrm_registry_load_dir (*reg, c->driver_dir, err) < 0)
      || nrm_drivers_open (*reg, &sel, &h, d, err) < 0)
    {
      nrm_registry_free (*reg);
      *reg = NULL;
      return -1;
    }
  return 0;
}

void
nrm_setup_close_drivers (struct nrm_registry *reg, struct nrm_drivers *d)
{
  nrm_drivers_close (d);
  nrm_registry_free (reg);
}

int
nrm_setup_kubelet (struct nrm_config *c, const char *cmd, int level, json_t **kubelet, nrm_error_t *err)
{
  cleanup_json json_t *notes = json_array ();
  size_t i;
  json_t *n;
  if (nrm_config_import_kubelet (c, kubelet, notes, err) < 0)
    return nrm_error_wrap (err, "%s", cmd);
  json_array_foreach (notes, i, n)
  {
    if (level >= 0)
      nrm_log (NULL, (enum nrm_log_level) level, "%s", json_string_value (n));
  }
  return 0;
}

int
nrm_setup_check_state_dir (const struct nrm_config *c, const char *cmd, nrm_error_t *err)
{
  struct stat st;
  if (stat (c->state_dir, &st) == 0)
    {
      if (!S_ISDIR (st.st_mode))
        return nrm_error_set (err, ENOTDIR, "%s: the state directory `%s` is not a directory", cmd, c->state_dir);
      return 0;
    }
  if (errno != ENOENT)
    return nrm_error_errno (err, errno, "%s: the state directory `%s`", cmd, c->state_dir);
  if (c->create_state_dir || strcmp (c->state_dir, NRM_DEFAULT_STATE_DIR) == 0)
    return 0;
  return nrm_error_set (err, ENOENT,
                        "%s: the state directory `%s` does not exist (a typo would split nrm's bookkeeping in "
                        "two): create it, or give --create-state-dir",
                        cmd, c->state_dir);
}
