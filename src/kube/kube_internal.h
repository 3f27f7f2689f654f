/* Internals of the kube module shared between its files and its unit tests. */
#ifndef KDEV_KUBE_KUBE_INTERNAL_H
#define KDEV_KUBE_KUBE_INTERNAL_H

#include "kube/kube.h"

/* Positive errno for a CURLcode |code| (table in kube.h). */
int kdev_kube_curl_errno(int code);

/* Positive errno for an HTTP error |status|; |reason| is the Status reason
 * (distinguishes 409 AlreadyExists from Conflict), may be NULL. */
int kdev_kube_status_errno(long status, const char *reason);

/* Reason phrase of |status| ("Not Found"), "" when unknown. Static string. */
const char *kdev_kube_status_text(long status);

/* The client's conflict_retries option. */
unsigned kdev_kube_conflict_retries(const struct kdev_kube *k);

#endif /* KDEV_KUBE_KUBE_INTERNAL_H */
