/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_LEFTOUT_H
#define NRM_LEFTOUT_H

#include "driver/k8s/events.h"
#include "driver/registry.h"

/* Events on the Node when a PCI driver (generic or vendor) leaves a
 * function out of its slices (another DRA driver publishes it on the node,
 * another driver's DaemonSet serves it, the host uses it), and when it
 * publishes it again (nrm_pci_driver_left_out()). */
struct nrm_leftout;

/* NULL when no enabled driver is a PCI driver, or without events. */
struct nrm_leftout *nrm_leftout_new (const struct nrm_drivers *d, struct nrm_events *events, const char *node);

/* Compares what each PCI driver leaves out now with the last check, and
 * records an Event for each change (the first check: for each function
 * left out). A refresher's after-pass callback. */
void nrm_leftout_check (void *lo);

void nrm_leftout_free (struct nrm_leftout *lo);

#endif
