#pragma once

// Clang's thread-safety analysis attributes (-Wthread-safety), no-ops for
// other compilers. A member that a mutex protects says so with GUARDED_BY;
// a private helper that expects the caller to hold it says REQUIRES. The
// clang build in CI (ctest lint/thread_safety) turns every violation into
// an error. Use them with common/mutex.h's Mutex: std::mutex carries no
// capability attribute in libstdc++. Abseil's (legacy) header, which gRPC
// includes, defines some of the same names with the same meaning: each is
// defined here only if it is not yet.

#if defined(__clang__)
#define DDP_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DDP_THREAD_ANNOTATION(x)
#endif

#ifndef CAPABILITY
#define CAPABILITY(x) DDP_THREAD_ANNOTATION(capability(x))
#endif
#ifndef SCOPED_CAPABILITY
#define SCOPED_CAPABILITY DDP_THREAD_ANNOTATION(scoped_lockable)
#endif
#ifndef GUARDED_BY
#define GUARDED_BY(x) DDP_THREAD_ANNOTATION(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) DDP_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
#ifndef REQUIRES
#define REQUIRES(...) DDP_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
#ifndef ACQUIRE
#define ACQUIRE(...) DDP_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#endif
#ifndef RELEASE
#define RELEASE(...) DDP_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) DDP_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
#ifndef RETURN_CAPABILITY
#define RETURN_CAPABILITY(x) DDP_THREAD_ANNOTATION(lock_returned(x))
#endif
#ifndef NO_THREAD_SAFETY_ANALYSIS
#define NO_THREAD_SAFETY_ANALYSIS \
  DDP_THREAD_ANNOTATION(no_thread_safety_analysis)
#endif
