/* How a forked child of the harness ends without returning to its parent's
 * code: _exit, so that stdio buffers and atexit handlers copied from the
 * parent are not run twice. In a coverage build (RKV_GCOV_DUMP, set by
 * ci/coverage) the child first writes its gcov counters, which only exit()
 * would write otherwise: what the probes', predict's, the swarm's and the
 * launcher's children run is measured like the rest. */
#ifndef RKV_HARNESS_CHILD_EXIT_H
#define RKV_HARNESS_CHILD_EXIT_H

#include <unistd.h>

#ifdef RKV_GCOV_DUMP
void __gcov_dump(void);
#endif

static inline _Noreturn void rkv_child_exit(int code)
{
#ifdef RKV_GCOV_DUMP
    __gcov_dump();
#endif
    _exit(code);
}

#endif
