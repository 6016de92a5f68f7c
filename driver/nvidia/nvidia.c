/* SPDX-License-Identifier: Apache-2.0 */
/* The NVIDIA part of the PCI driver, as a shared object on the one driver
 * ABI: NVIDIA GPUs bound to the nvidia kernel driver, published as
 * nvidia.nrm.io devices. A prepared GPU reaches the container as its
 * /dev/nvidiaN node (the minor from /proc/driver/nvidia) and the control
 * nodes every CUDA process opens; the model and GPU UUID become attributes.
 * Everything else (sysfs facts, holding, health, hotplug, passthrough) is
 * the generic PCI driver's, which leaves these GPUs to this one while it
 * is loaded.
 * The driver libraries are not mounted: the image brings them, or the
 * NVIDIA container toolkit's own CDI spec does.
 *
 *   nrm plugin --driver-dir DIR --drivers cpu,memory,pci,nvidia
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "driver/pci/pci.h"
#include "nrm/base/xalloc.h"

#define NVIDIA 0x10de

static bool
nv_match (const struct nrm_pci_function *fn)
{
  return fn->facts.vendor_id == NVIDIA && strcmp (fn->class, "gpu") == 0;
}

/* The value of "Key:" in the GPU's /proc/driver/nvidia information file,
 * trimmed; NULL when there is none. */
static char *
information (const struct nrm_fsroot *fsroot, const char *bus_id, const char *key)
{
  char line[256];
  char *path = nrm_fsroot_path (fsroot, "/proc/driver/nvidia/gpus/%s/information", bus_id);
  FILE *f = fopen (path, "re");
  char *value = NULL;
  size_t n = strlen (key);
  while (f && value == NULL && fgets (line, sizeof (line), f))
    if (strncmp (line, key, n) == 0 && line[n] == ':')
      {
        char *v = line + n + 1;
        v += strspn (v, " \t");
        v[strcspn (v, "\r\n")] = '\0';
        value = *v ? xstrdup (v) : NULL;
      }
  if (f)
    fclose (f);
  free (path);
  return value;
}

static int
nv_edits (const struct nrm_fsroot *fsroot, const struct nrm_pci_function *fn, struct nrm_container_edits *e,
          nrm_error_t *err)
{
  static const char *const control[]
      = { "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset" };
  char *minor = information (fsroot, fn->facts.bus_id, "Device Minor");
  char *end = NULL;
  long m = minor ? strtol (minor, &end, 10) : -1;
  bool ok = minor && *end == '\0' && m >= 0 && m < 256;
  free (minor);
  if (!ok)
    return nrm_error_set (err, ENODEV, "GPU %s: the nvidia driver reports no device minor (is the driver loaded?)",
                          fn->facts.bus_id);
  char node[32];
  snprintf (node, sizeof (node), "/dev/nvidia%ld", m);
  if (!nrm_fsroot_exists (fsroot, node))
    return nrm_error_set (err, ENODEV, "GPU %s: %s does not exist", fn->facts.bus_id, node);
  if (e->device_nodes == NULL)
    e->device_nodes = json_array ();
  json_array_append_new (e->device_nodes, nrm_pci_device_node (fsroot, node));
  for (size_t i = 0; i < sizeof (control) / sizeof (control[0]); i++)
    {
      bool dup = false;
      size_t k;
      json_t *v;
      json_array_foreach (e->device_nodes, k, v)
      {
        dup |= strcmp (json_string_value (json_object_get (v, "path")), control[i]) == 0;
      }
      if (!dup && nrm_fsroot_exists (fsroot, control[i]))
        json_array_append_new (e->device_nodes, nrm_pci_device_node (fsroot, control[i]));
    }
  /* An image's NVIDIA_VISIBLE_DEVICES=all would make a legacy NVIDIA
   * runtime add every GPU of the node: the claim's nodes are the GPUs. */
  if (e->env == NULL)
    e->env = json_array ();
  if (json_array_size (e->env) == 0)
    json_array_append_new (e->env, json_string ("NVIDIA_VISIBLE_DEVICES=void"));
  return 0;
}

static void
nv_attributes (const struct nrm_fsroot *fsroot, const struct nrm_pci_function *fn, json_t *attrs)
{
  const char *keys[] = { "Model", "GPU UUID", "Device Minor" };
  const char *names[] = { "model", "uuid", "minor" };
  for (size_t i = 0; i < 3; i++)
    {
      char *v = information (fsroot, fn->facts.bus_id, keys[i]);
      /* Attribute strings are at most 64 bytes. */
      if (v && strlen (v) <= 64)
        {
          if (i == 2)
            json_object_set_new (attrs, names[i], json_pack ("{s:I}", "int", (json_int_t) strtol (v, NULL, 10)));
          else
            json_object_set_new (attrs, names[i], json_pack ("{s:s}", "string", v));
        }
      free (v);
    }
}

static const struct nrm_pci_vendor nvidia = {
  .name = "nvidia",
  .match = nv_match,
  .edits = nv_edits,
  .attributes = nv_attributes,
};

static int
nv_new (const struct nrm_driver_host *h, void **ret, nrm_error_t *err)
{
  return nrm_pci_driver_new (h, &nvidia, ret, err);
}

const struct nrm_driver_ops nrm_driver_component = {
  .abi = NRM_DRIVER_ABI,
  .id = "nvidia",
  .default_name = "nvidia." NRM_DEFAULT_DOMAIN,
  .summary = "NVIDIA GPUs with their /dev/nvidia nodes, on the PCI driver (driver/nvidia)",
  .new = nv_new,
  NRM_PCI_DRIVER_OPERATIONS,
};
