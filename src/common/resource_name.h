/* Extended resource names: the rule kubelet applies to a device plugin's
 * resource name, shared by the device model's users (the backends' config
 * readers, the device plugin runtime) and by kdevctl's stand-in kubelet
 * (kubelet/devmgr.h), which may include only rpc, the messages and common
 * (docs/architecture.md, "Module graph").
 *
 * It follows Kubernetes' extended resource name validation:
 * IsExtendedResourceName in k8s.io/kubernetes pkg/apis/core/v1/helper
 * (helpers.go), used by kubelet's device manager on Register
 * (pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go) and by
 * ValidateResourceName in pkg/apis/core/validation; its parts are the
 * qualified name rules of k8s.io/apimachinery pkg/util/validation
 * (IsQualifiedName, IsDNS1123Subdomain). */
#ifndef KDEV_COMMON_RESOURCE_NAME_H
#define KDEV_COMMON_RESOURCE_NAME_H

#include "common/err.h"
#include "common/export.h"

/* Checks the NUL-terminated |name| (NULL counts as "") with kubelet's
 * extended resource name rules, in this order: it must contain '/'; must
 * not be in the kubernetes.io domain (no "kubernetes.io/" anywhere in it);
 * must not start with "requests."; must contain exactly one '/'; the domain
 * before it must be non-empty, at most 244 characters (253, the DNS-1123
 * subdomain limit, less the "requests." that k8s prefixes it with) and a
 * DNS-1123 subdomain ([a-z0-9]([-a-z0-9]*[a-z0-9])? labels joined by '.');
 * the name after it must be non-empty, at most 63 characters and a
 * qualified name part ([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?).
 *
 * Returns 0, or -EINVAL with |err| (may be NULL) set to
 * `resource name "<name>" is invalid: <the rule that failed>`. Allocates
 * nothing; |name| stays the caller's. */
KDEV_API int kdev_resource_name_check(const char *name, struct kdev_err *err);

#endif /* KDEV_COMMON_RESOURCE_NAME_H */
