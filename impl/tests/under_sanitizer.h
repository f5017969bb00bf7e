/* Which sanitizer a test binary was built with, for the few tests whose
 * cost under one differs in kind, not degree (gcc says __SANITIZE_*__,
 * clang __has_feature). */
#ifndef RKV_TESTS_UNDER_SANITIZER_H
#define RKV_TESTS_UNDER_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#endif
