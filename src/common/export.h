/* The export marker of kdev's libraries. Every module is compiled with
 * -fvisibility=hidden (kdev_module() in CMakeLists.txt), so a function is
 * visible outside its module's library only when its declaration in the
 * module's public header carries KDEV_API:
 *
 *     KDEV_API int kdev_rpc_call_reply(struct kdev_rpc_call *call, ...);
 *
 * Internal helpers (names with a double underscore, kdev_rpc__*, and
 * everything declared in *_internal.h) are never marked. The libraries are
 * static, so inside one executable hidden symbols still link across
 * modules; what the marker fixes is the module's exported surface: a module
 * linked into a shared object, or a module's objects partially linked into
 * one (ld -r), exports exactly its marked functions. tests/integration/
 * visibility.py checks that for every module library (docs/architecture.md,
 * "Exported symbols"). */
#ifndef KDEV_COMMON_EXPORT_H
#define KDEV_COMMON_EXPORT_H

/* Marks a public function of a module: default visibility in a build with
 * -fvisibility=hidden (GCC and Clang).
 *
 * A target that compiles a module's sources into something that is not that
 * module defines KDEV_NO_EXPORT: there the marker means nothing and those
 * functions stay hidden. The mock libnvidia-ml.so.1 (mock/nvml) does, for the
 * common/file.c and common/err.c it builds in, so that it exports NVML's
 * entry points and its kdevMock* controls, never a kdev_* function. */
#ifdef KDEV_NO_EXPORT
#define KDEV_API
#else
#define KDEV_API __attribute__((visibility("default")))
#endif

#endif /* KDEV_COMMON_EXPORT_H */
