/* The share region: the accounting file that every process of one container
 * maps (`<region dir>/region`), the container's limits (`<region dir>/limits`)
 * and the reader API the node side uses (kdevctl share, metrics).
 *
 * Everything here uses libc only: libkdev-share.so, loaded into containers,
 * builds region.c in (with KDEV_NO_EXPORT) and links nothing else.
 *
 * Format (version 1; all integers little-endian as the host, the file is
 * fixed-size and mapped MAP_SHARED):
 *   struct kdev_share_region_file: magic "KDEVSHR1", version, size, GPU
 *   count, process-slot count, the high-water mark of slots ever used, the
 *   pacing policy, then KDEV_SHARE_MAX_GPUS GPU records (UUID, memory limit
 *   in bytes, compute share in percent) and KDEV_SHARE_MAX_PROCS process
 *   slots (pid, uid, start time, bytes in use per GPU, launches and paced
 *   time per GPU), one 64-byte-aligned slot each.
 * Memory in use on GPU g is the sum over the slots of used[g]: a process
 * adds to its own slot first and then checks the sum, so the sum of what
 * processes hold never passes the limit, and a process killed at any
 * instruction leaves only its own slot behind, which the next process that
 * finds it dead clears (docs/share.md, "The region"). */
#ifndef KDEV_SHARE_REGION_H
#define KDEV_SHARE_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/export.h"
#include "share/policy.h"

#define KDEV_SHARE_MAX_GPUS 16
#define KDEV_SHARE_MAX_PROCS 1024
#define KDEV_SHARE_UUID_MAX 96          /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define KDEV_SHARE_LIMITS_FILE_MAX 65536 /* bytes of a limits file */
#define KDEV_SHARE_REGION_MAGIC "KDEVSHR1"
#define KDEV_SHARE_REGION_VERSION 1u

/* One GPU of the limits file. */
struct kdev_share_limit {
        char uuid[KDEV_SHARE_UUID_MAX]; /* "GPU-..." or "MIG-..." as NVML prints it */
        uint64_t memory;                /* bytes */
        unsigned compute;               /* percent, 1..100 */
};

/* A parsed limits file. */
struct kdev_share_limits {
        struct kdev_share_limit gpu[KDEV_SHARE_MAX_GPUS];
        size_t n;
        enum kdev_share_policy policy;
};

/* Parses the text of a limits file (Part of the contract with kdev-plugin's
 * Allocate: `# comment`, blank lines, `<GPU UUID> <memory bytes> <compute
 * percent 1..100>` per GPU, at most one `policy work-conserving|strict|none`
 * line). |text| need not be NUL-terminated; |path| is only used in messages.
 * Returns 0 and fills |out|; or -1 with "<path>:<line>: <what>" in |msg|
 * (e.g. "limits:3: compute share 0 is not in 1..100", "limits:2: GPU
 * GPU-1 is listed twice", "limits:5: more than 16 GPUs"). */
KDEV_API int kdev_share_limits_parse(const char *text, size_t len, const char *path,
                                     struct kdev_share_limits *out, char *msg,
                                     size_t msg_size);

/* The policy named |name| (KDEV_SHARE_POLICY_NAMES): 0 with *out set, or -1
 * for another name. */
KDEV_API int kdev_share_policy_parse(const char *name, enum kdev_share_policy *out);

/* Reads and parses the limits file |path| (at most KDEV_SHARE_LIMITS_FILE_MAX
 * bytes, a regular file; read with open/read, no allocation). Returns 0
 * (parsed), 1 (no such file: |out| empty, nothing limited) or -1 with
 * "<path>: <reason>" or the parser's message in |msg|. */
KDEV_API int kdev_share_limits_load(const char *path, struct kdev_share_limits *out,
                                    char *msg, size_t msg_size);

/* The name of policy |p| (KDEV_SHARE_POLICY_NAMES), "?" for another value. */
KDEV_API const char *kdev_share_policy_name(enum kdev_share_policy p);

struct kdev_share_region_gpu {
        char uuid[KDEV_SHARE_UUID_MAX];
        uint64_t memory;                /* limit, bytes */
        uint32_t compute;               /* percent */
        uint32_t reserved0;
        /* compute pacing (docs/share.md, "Compute"): the container's budget
         * of GPU time in ns (a token bucket refilled at compute% of wall
         * time, capped at compute% of the pacing window), when it was last
         * refilled (CLOCK_MONOTONIC ns), the GPU time its kernels took, and
         * until when another container is known to want the GPU */
        _Atomic int64_t tokens_ns;
        _Atomic uint64_t refill_ns;
        _Atomic uint64_t busy_ns;
        _Atomic uint64_t contended_until_ns;
        uint64_t reserved[2];
};

struct kdev_share_region_proc {
        _Atomic int32_t pid;            /* 0 free, -1 being reclaimed */
        uint32_t uid;
        uint64_t start_time;            /* /proc/<pid>/stat field 22 (clock ticks) */
        _Atomic uint64_t used[KDEV_SHARE_MAX_GPUS];     /* bytes */
        _Atomic uint64_t launches[KDEV_SHARE_MAX_GPUS]; /* kernel and graph launches */
        _Atomic uint64_t paced_ns[KDEV_SHARE_MAX_GPUS]; /* time launches waited */
} __attribute__((aligned(64)));

struct kdev_share_region_file {
        char magic[8];
        uint32_t version;
        uint32_t size;                  /* sizeof(struct kdev_share_region_file) */
        uint32_t n_gpus;
        uint32_t max_procs;
        _Atomic uint32_t procs_hwm;     /* slots [0, procs_hwm) were ever used */
        uint32_t policy;                /* enum kdev_share_policy */
        uint32_t limits_error;          /* 1: the limits file was malformed (fail closed) */
        uint32_t reserved0[7];
        struct kdev_share_region_gpu gpu[KDEV_SHARE_MAX_GPUS];
        struct kdev_share_region_proc proc[KDEV_SHARE_MAX_PROCS];
};

/* Maps the region of directory |dir| (`<dir>/region`), creating it when it
 * does not exist yet: the first process writes a whole file with |limits|
 * (NULL: none; |limits_error|: the limits file was malformed) to a
 * temporary name and links it into place, so another process sees either
 * no region or a complete one; a loser of the race maps the winner's. The
 * file gets mode 0666 (fchmod), so that a second OS user in the container
 * can map it when the directory lets it (mode 01777).
 * Returns the mapping (munmap with kdev_share_region_unmap) or NULL with
 * "<dir>/region: <reason>" in |msg| (cannot create, not a region, wrong
 * version or size). */
KDEV_API struct kdev_share_region_file *
kdev_share_region_map(const char *dir, const struct kdev_share_limits *limits,
                      bool limits_error, char *msg, size_t msg_size);

/* Maps the region of directory |dir| when it exists, read-write, without
 * creating it. Returns the mapping, or NULL with errno ENOENT (no region
 * yet) or another errno and "<dir>/region: <reason>" in |msg| (not a
 * regular file, not a region, wrong version or size). */
KDEV_API struct kdev_share_region_file *kdev_share_region_open(const char *dir, char *msg,
                                                               size_t msg_size);

/* Unmaps a region (NULL-safe). */
KDEV_API void kdev_share_region_unmap(struct kdev_share_region_file *r);

/* Claims a process slot for |pid| with start time |start_time| (0: not
 * known yet, see kdev_share_region_note_start) and |uid|: the slot that
 * already holds |pid| (an earlier image of the process, replaced by exec:
 * its memory is gone), else the first free one. Dead processes' slots are
 * cleared first (kill(pid, 0) per slot; a reused pid is left to
 * kdev_share_region_reap) only when the claim would raise the slots in use
 * to a multiple of 32, or when every slot is held: a claim among many
 * processes starting at once makes no system call. Returns the slot index,
 * or -1 when all KDEV_SHARE_MAX_PROCS slots are held by live processes.
 * Callers claim once per process (concurrent claims for one pid may take
 * one slot twice). */
KDEV_API int kdev_share_region_claim(struct kdev_share_region_file *r, int32_t pid,
                                     uint64_t start_time, uint32_t uid);

/* The slot holding |pid|, or -1: loads only, no store and no system call. */
KDEV_API int kdev_share_region_find(const struct kdev_share_region_file *r, int32_t pid);

/* Records the start time of |pid| (/proc/<pid>/stat field 22) in slot
 * |slot| when it holds |pid| and has none yet: what kdev_share_region_reap
 * compares to tell a reused pid. One read of /proc: called at a process's
 * first reservation, not at its start. */
KDEV_API void kdev_share_region_note_start(struct kdev_share_region_file *r, int slot,
                                           int32_t pid);

/* Releases slot |slot| held by |pid| (its counters are cleared). */
KDEV_API void kdev_share_region_release(struct kdev_share_region_file *r, int slot,
                                        int32_t pid);

/* Adds |bytes| to slot |slot|'s use of GPU |gpu| and checks the container's
 * sum against the GPU's limit: returns 0 when the sum stays within it, or
 * takes the bytes back and returns -1 (the caller answers
 * CUDA_ERROR_OUT_OF_MEMORY). Lock-free: atomics only, no system call. */
KDEV_API int kdev_share_region_reserve(struct kdev_share_region_file *r, int slot, int gpu,
                                       uint64_t bytes);

/* Takes |bytes| back from slot |slot|'s use of GPU |gpu| (never below 0). */
KDEV_API void kdev_share_region_unreserve(struct kdev_share_region_file *r, int slot,
                                          int gpu, uint64_t bytes);

/* The bytes the container holds on GPU |gpu|: the sum over the slots. */
KDEV_API uint64_t kdev_share_region_used(const struct kdev_share_region_file *r, int gpu);

/* Clears the slots of processes that no longer exist (kill(pid, 0) fails
 * with ESRCH, or /proc/<pid>/stat shows another start time: the pid was
 * reused). Returns how many were cleared. Makes system calls: only on the
 * slow paths (claim, an allocation that would fail). */
KDEV_API int kdev_share_region_reap(struct kdev_share_region_file *r);

/* --- the reader (node side) ------------------------------------------------- */

struct kdev_share_usage_proc {
        int32_t pid;                    /* in the container's pid namespace */
        uint32_t uid;
        uint64_t used[KDEV_SHARE_MAX_GPUS];     /* bytes */
        uint64_t launches[KDEV_SHARE_MAX_GPUS];
        uint64_t paced_ns[KDEV_SHARE_MAX_GPUS];
};

struct kdev_share_usage {
        size_t n_gpus;
        struct kdev_share_limit gpu[KDEV_SHARE_MAX_GPUS];
        uint64_t used[KDEV_SHARE_MAX_GPUS];     /* bytes, sum over the processes */
        enum kdev_share_policy policy;
        bool limits_error;
        size_t n_procs;
        struct kdev_share_usage_proc proc[KDEV_SHARE_MAX_PROCS];
};

/* Reads a snapshot of the region of directory |dir| (read-only mapping,
 * nothing created) into |out| (caller-owned; about 400 KiB: allocate it).
 * Slots with pid 0 are left out. Returns 0, or -1 with "<dir>/region:
 * <reason>" in |msg| (missing, not a region, wrong version or size). */
KDEV_API int kdev_share_usage_read(const char *dir, struct kdev_share_usage *out, char *msg,
                                   size_t msg_size);

#endif /* KDEV_SHARE_REGION_H */
