/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_KUBECONFIG_H
#define NRM_KUBECONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <time.h>

#include "nrm/base/error.h"

/* Kubeconfig files read as kubectl reads them: a list of files merged (the
 * first file that names a cluster, user or context, or sets
 * current-context, wins; missing files of a list are skipped), one context
 * picked (--context, else current-context), relative paths taken from the
 * file that holds them, and exec credential plugins
 * (client.authentication.k8s.io/v1 and v1beta1). */

struct nrm_kubeconfig
{
  char *context, *cluster_name, *user_name;
  char *namespace; /* the context's, or NULL */
  char *server;    /* https://host:port, no trailing slash */
  char *ca_file, *ca_pem;
  char *cert_file, *cert_pem, *key_file, *key_pem;
  char *token, *token_file;
  /* The user's exec plugin, its paths resolved, or NULL; exec_dir is the
   * directory of the file that named it. */
  json_t *exec;
};

/* paths: one file, or a list separated by ':' as $KUBECONFIG is (then
 * files that do not exist are skipped, but one must). context: the
 * context to use, or NULL for current-context. */
int nrm_kubeconfig_load (const char *paths, bool list, const char *context, struct nrm_kubeconfig **ret,
                         nrm_error_t *err);
void nrm_kubeconfig_free (struct nrm_kubeconfig *kc);

/* The kubeconfig files kubectl reads: $KUBECONFIG (a list) when set and
 * not empty, else ~/.kube/config (*list false). malloc'd. */
char *nrm_kubeconfig_default (bool *list, nrm_error_t *err);

/* What an exec plugin hands back. */
struct nrm_exec_credential
{
  char *token;              /* or NULL */
  char *cert_pem, *key_pem; /* both or neither */
  time_t expires;           /* 0: never (until the API answers 401) */
};

void nrm_exec_credential_clear (struct nrm_exec_credential *c);

/* The ExecCredential a plugin printed (text), for the apiVersion that was
 * asked of it. */
int nrm_exec_credential_parse (const char *text, size_t len, const char *api_version, struct nrm_exec_credential *ret,
                               nrm_error_t *err);

/* The KUBERNETES_EXEC_INFO the plugin gets (malloc'd JSON text). */
char *nrm_exec_info (const struct nrm_kubeconfig *kc, bool interactive);

/* Runs kc's exec plugin as kubectl runs it: its command (from $PATH unless
 * it has a /), its args, the environment plus its env and
 * KUBERNETES_EXEC_INFO; stdin only when it is a terminal and the plugin
 * may ask (interactiveMode IfAvailable or Always), stderr passed through. */
int nrm_exec_credential_run (const struct nrm_kubeconfig *kc, struct nrm_exec_credential *ret, nrm_error_t *err);

#endif
