/* What a run leaves on the host (its secret file, shared-memory segments,
 * scratch directories) must not outlive it however it ends: a launcher's
 * or CI's SIGKILL of the whole process group included. */
#ifndef RKV_HARNESS_REAPER_H
#define RKV_HARNESS_REAPER_H

#include <sys/types.h>

struct rkv_reaper {
    pid_t pid; /* 0: none running */
    int fd;    /* the write end of its pipe, or -1 */
};

/* Forks a small process in a session of its own that waits until this
 * process is gone (the read end of a pipe only this process writes), then
 * calls clean(arg) there, in its copy of this process's memory as of now:
 * what clean reads must be set before. It ignores the terminal's signals
 * and holds none of this process's descriptors. Returns 0, or -RKV_EIO
 * when it could not (r untouched; the run goes on, and only an abnormal
 * end leaves things then). */
int rkv_reaper_start(struct rkv_reaper *r, void (*clean)(void *arg), void *arg);
/* The run cleaned up after itself: the reaper exits without cleaning
 * (a later run may already use the same names), and is waited for. */
void rkv_reaper_done(struct rkv_reaper *r);

#endif
