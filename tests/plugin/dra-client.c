/* SPDX-License-Identifier: Apache-2.0 */
/* A command-line kubelet stand-in for the real-kernel tests:
 *   dra-client prepare SOCKET NAMESPACE NAME UID     prints the CDI ids
 *   dra-client unprepare SOCKET UID
 *   dra-client watch SOCKET                          opens the health stream as the
 *                                                    kubelet keeps it, prints the first
 *                                                    message's device count, holds it
 *                                                    open until stdin closes
 *   dra-client health SOCKET SECONDS                 prints every health message of the
 *                                                    stream for SECONDS, one "N DEVICE
 *                                                    HEALTH MESSAGE" line a device (N
 *                                                    counts the messages from 1)
 *   dra-client register SOCKET                       the kubelet's registration over a
 *                                                    plugins_registry socket: GetInfo,
 *                                                    then NotifyRegistrationStatus(true);
 *                                                    prints the driver's name
 *   dra-client cpus-disjoint LIST LIST               exit 0 when disjoint
 *   dra-client cpus-equal LIST LIST                  exit 0 when equal
 *   dra-client cpus-within LIST LIST                 exit 0 when the first is in the second
 *   dra-client hugetlb-map BYTES                     maps and touches BYTES of 2 MiB huge
 *                                                    pages: exit 0 when the cgroup lets it,
 *                                                    1 when mmap or a fault is refused */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <hwloc.h>

#include "proto/dra_health_v1alpha1.pb-c.h"
#include "proto/dra_v1.pb-c.h"
#include "proto/pluginregistration.pb-c.h"
#include "tests/plugin/kubelet.h"

static int
lists (const char *op, const char *a, const char *b)
{
  hwloc_bitmap_t x = hwloc_bitmap_alloc (), y = hwloc_bitmap_alloc ();
  if (hwloc_bitmap_list_sscanf (x, a) < 0 || hwloc_bitmap_list_sscanf (y, b) < 0)
    return 2;
  int r;
  if (strcmp (op, "cpus-disjoint") == 0)
    r = !hwloc_bitmap_intersects (x, y);
  else if (strcmp (op, "cpus-equal") == 0)
    r = hwloc_bitmap_isequal (x, y);
  else
    r = hwloc_bitmap_isincluded (x, y);
  hwloc_bitmap_free (x);
  hwloc_bitmap_free (y);
  return r ? 0 : 1;
}

static void
on_sigbus (int sig)
{
  (void) sig;
  _exit (1); /* a page the hugetlb limit refused at fault time */
}

static int
hugetlb_map (const char *bytes)
{
  size_t n = strtoull (bytes, NULL, 10), page = 2 << 20;
  if (n == 0 || n % page)
    return 2;
  signal (SIGBUS, on_sigbus);
  /* Charged at mmap to hugetlb.2MB.rsvd, at the first touch to .max. */
  char *p = mmap (NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  if (p == MAP_FAILED)
    {
      perror ("mmap");
      return 1;
    }
  for (size_t i = 0; i < n; i += page)
    p[i] = 1;
  munmap (p, n);
  return 0;
}

static int
watch (const char *socket)
{
  V1alpha1__NodeWatchResourcesRequest in = V1ALPHA1__NODE_WATCH_RESOURCES_REQUEST__INIT;
  uint8_t buf[8];
  size_t len = protobuf_c_message_pack (&in.base, buf);
  grpc_init ();
  grpc_channel *ch = kc_connect (socket);
  /* The kubelet holds the stream for the plugin's lifetime: a day's deadline. */
  struct kc_stream *s = kc_stream_open (ch, "/v1alpha1.DRAResourceHealth/NodeWatchResources", buf, len, 86400000);
  uint8_t *data = NULL;
  size_t dlen = 0;
  int rc = 1;
  if (s && kc_stream_read (s, 10000, &data, &dlen) == 1)
    {
      V1alpha1__NodeWatchResourcesResponse *r = v1alpha1__node_watch_resources_response__unpack (NULL, dlen, data);
      if (r)
        {
          printf ("%zu\n", r->n_devices);
          fflush (stdout);
          v1alpha1__node_watch_resources_response__free_unpacked (r, NULL);
          rc = 0;
          while (getchar () != EOF)
            ;
        }
    }
  if (rc)
    fprintf (stderr, "dra-client: no health message from %s\n", socket);
  free (data);
  if (s)
    kc_stream_close (s);
  kc_close (ch);
  grpc_shutdown ();
  return rc;
}

static int
health (const char *socket, int seconds)
{
  V1alpha1__NodeWatchResourcesRequest in = V1ALPHA1__NODE_WATCH_RESOURCES_REQUEST__INIT;
  uint8_t buf[8];
  size_t len = protobuf_c_message_pack (&in.base, buf);
  grpc_init ();
  grpc_channel *ch = kc_connect (socket);
  struct kc_stream *s
      = kc_stream_open (ch, "/v1alpha1.DRAResourceHealth/NodeWatchResources", buf, len, (seconds + 5) * 1000);
  int64_t end = time (NULL) + seconds;
  int n = 0;
  for (int64_t left; s && (left = end - time (NULL)) > 0;)
    {
      uint8_t *data = NULL;
      size_t dlen = 0;
      if (kc_stream_read (s, (int) left * 1000, &data, &dlen) != 1)
        {
          free (data);
          break;
        }
      V1alpha1__NodeWatchResourcesResponse *r = v1alpha1__node_watch_resources_response__unpack (NULL, dlen, data);
      free (data);
      if (r == NULL)
        break;
      n++;
      for (size_t i = 0; i < r->n_devices; i++)
        {
          const V1alpha1__DeviceHealth *h = r->devices[i];
          printf ("%d %s %s %s\n", n, h->device ? h->device->device_name : "-",
                  h->health == V1ALPHA1__HEALTH_STATUS__HEALTHY     ? "Healthy"
                  : h->health == V1ALPHA1__HEALTH_STATUS__UNHEALTHY ? "Unhealthy"
                                                                    : "Unknown",
                  h->message && h->message[0] ? h->message : "-");
        }
      fflush (stdout);
      v1alpha1__node_watch_resources_response__free_unpacked (r, NULL);
    }
  if (n == 0)
    fprintf (stderr, "dra-client: no health message from %s\n", socket);
  if (s)
    kc_stream_close (s);
  kc_close (ch);
  grpc_shutdown ();
  return n ? 0 : 1;
}

static int
register_plugin (const char *socket)
{
  grpc_init ();
  grpc_channel *ch = kc_connect (socket);
  struct kc_reply rep = { 0 };
  int rc = 1;
  Pluginregistration__InfoRequest q = PLUGINREGISTRATION__INFO_REQUEST__INIT;
  uint8_t buf[256];
  size_t len = protobuf_c_message_pack (&q.base, buf);
  if (kc_unary (ch, "/pluginregistration.Registration/GetInfo", buf, len, 10000, &rep) < 0
      || rep.status != GRPC_STATUS_OK)
    fprintf (stderr, "dra-client: GetInfo failed: %s\n", rep.details ? rep.details : "no answer");
  else
    {
      Pluginregistration__PluginInfo *info = pluginregistration__plugin_info__unpack (NULL, rep.len, rep.data);
      kc_reply_done (&rep);
      Pluginregistration__RegistrationStatus st = PLUGINREGISTRATION__REGISTRATION_STATUS__INIT;
      st.plugin_registered = true;
      len = protobuf_c_message_pack (&st.base, buf);
      if (info == NULL)
        fprintf (stderr, "dra-client: GetInfo: bad reply\n");
      else if (kc_unary (ch, "/pluginregistration.Registration/NotifyRegistrationStatus", buf, len, 10000, &rep) < 0
               || rep.status != GRPC_STATUS_OK)
        fprintf (stderr, "dra-client: NotifyRegistrationStatus failed: %s\n", rep.details ? rep.details : "no answer");
      else
        {
          printf ("%s\n", info->name);
          rc = 0;
        }
      if (info)
        pluginregistration__plugin_info__free_unpacked (info, NULL);
    }
  kc_reply_done (&rep);
  kc_close (ch);
  grpc_shutdown ();
  return rc;
}

int
main (int argc, char **argv)
{
  if (argc == 4 && strncmp (argv[1], "cpus-", 5) == 0)
    return lists (argv[1], argv[2], argv[3]);
  if (argc == 3 && strcmp (argv[1], "watch") == 0)
    return watch (argv[2]);
  if (argc == 3 && strcmp (argv[1], "register") == 0)
    return register_plugin (argv[2]);
  if (argc == 3 && strcmp (argv[1], "hugetlb-map") == 0)
    return hugetlb_map (argv[2]);
  if (argc == 4 && strcmp (argv[1], "health") == 0)
    return health (argv[2], atoi (argv[3]));
  bool prep = argc == 6 && strcmp (argv[1], "prepare") == 0;
  bool unprep = argc == 4 && strcmp (argv[1], "unprepare") == 0;
  if (!prep && !unprep)
    {
      fprintf (stderr, "usage: dra-client prepare SOCKET NS NAME UID | unprepare SOCKET UID | register SOCKET | watch "
                       "SOCKET | health SOCKET SECONDS | cpus-OP A B | hugetlb-map BYTES\n");
      return 2;
    }
  K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim c = K8S__IO__KUBELET__PKG__APIS__DRA__V1__CLAIM__INIT;
  K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim *cp = &c;
  const char *ns = prep ? argv[3] : "default", *name = prep ? argv[4] : "unknown", *uid = prep ? argv[5] : argv[3];
  c.namespace_ = (ProtobufCBinaryData){ strlen (ns), (uint8_t *) ns };
  c.name = (ProtobufCBinaryData){ strlen (name), (uint8_t *) name };
  c.uid = (ProtobufCBinaryData){ strlen (uid), (uint8_t *) uid };
  uint8_t buf[4096];
  size_t len;
  if (prep)
    {
      K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest r
          = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
      r.n_claims = 1;
      r.claims = &cp;
      len = protobuf_c_message_pack (&r.base, buf);
    }
  else
    {
      K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest r
          = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_REQUEST__INIT;
      r.n_claims = 1;
      r.claims = &cp;
      len = protobuf_c_message_pack (&r.base, buf);
    }
  grpc_init ();
  grpc_channel *ch = kc_connect (argv[2]);
  struct kc_reply rep;
  int rc = 1;
  const char *method = prep ? "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
                            : "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources";
  if (kc_unary (ch, method, buf, len, 30000, &rep) < 0 || rep.status != GRPC_STATUS_OK)
    fprintf (stderr, "dra-client: call failed: %s\n", rep.details ? rep.details : "no answer");
  else if (prep)
    {
      K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *r
          = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack (NULL, rep.len, rep.data);
      if (r && r->n_claims == 1 && r->claims[0]->value->error[0] == '\0')
        {
          for (size_t i = 0; i < r->claims[0]->value->n_devices; i++)
            for (size_t k = 0; k < r->claims[0]->value->devices[i]->n_cdi_device_ids; k++)
              printf ("%s\n", r->claims[0]->value->devices[i]->cdi_device_ids[k]);
          rc = 0;
        }
      else
        fprintf (stderr, "dra-client: %s\n", r && r->n_claims ? r->claims[0]->value->error : "bad reply");
      if (r)
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (r, NULL);
    }
  else
    {
      K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse *r
          = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack (NULL, rep.len, rep.data);
      rc = r && r->n_claims == 1 && r->claims[0]->value->error[0] == '\0' ? 0 : 1;
      if (r)
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked (r, NULL);
    }
  kc_reply_done (&rep);
  kc_close (ch);
  grpc_shutdown ();
  return rc;
}
