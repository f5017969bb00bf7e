/* See reaper.h. A signal handler would need a global and would not see
 * SIGKILL; a child in the same process group dies with it (timeout -s
 * KILL, a CI job's kill), which left /dev/shm segments, the run's 0600
 * secret file and durable directories behind. */
#include "harness/reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/util.h"

#define REAPER_DONE 'D'

/* Every descriptor but keep: close_range, else one by one (a kernel before
 * 5.9, or a seccomp profile that refuses it). Held here, the run's
 * descriptors would keep a reader of its output waiting. */
static void reaper_close_all_but(int keep)
{
    if (close_range(3, (unsigned)keep - 1, 0) == 0 && close_range((unsigned)keep + 1, ~0u, 0) == 0)
        return;
    struct rlimit rl;
    int top =
        getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1u << 20 ? (int)rl.rlim_cur : 1 << 20;
    for (int fd = 3; fd < top; fd++)
        if (fd != keep)
            close(fd);
}

int rkv_reaper_start(struct rkv_reaper *r, void (*clean)(void *arg), void *arg)
{
    /* A socket pair, not a pipe: rkv_reaper_done writes with MSG_NOSIGNAL,
     * so a reaper that is already gone (killed on its own) is an EPIPE, not
     * a SIGPIPE that ended the run at its verdict. */
    int p[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) < 0)
        return -RKV_EIO;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -RKV_EIO;
    }
    if (pid == 0) {
        close(p[1]);                      /* only the run holds it: its end is the EOF read below */
        setsid();                         /* out of the run's process group and terminal */
        prctl(PR_SET_NAME, "rkv-reaper"); /* told apart from the run's nodes in ps */
        int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP};
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
            signal(sigs[i], SIG_IGN);
        int rd = fcntl(p[0], F_DUPFD, 16);
        if (rd < 0)
            _exit(1);
        reaper_close_all_but(rd);
        int nul = open("/dev/null", O_RDWR);
        for (int fd = 0; nul >= 0 && fd < 3; fd++)
            if (fd != nul)
                dup2(nul, fd);
        if (nul > 2)
            close(nul);
        char c = 0;
        ssize_t n;
        do
            n = read(rd, &c, 1);
        while (n < 0 && errno == EINTR);
        if (!(n == 1 && c == REAPER_DONE))
            clean(arg);
        _exit(0);
    }
    close(p[0]);
    *r = (struct rkv_reaper){.pid = pid, .fd = p[1]};
    return 0;
}

void rkv_reaper_done(struct rkv_reaper *r)
{
    if (r->pid <= 0)
        return;
    char c = REAPER_DONE;
    if (send(r->fd, &c, 1, MSG_NOSIGNAL) != 1) {
        /* gone already (killed on its own): nothing left to tell it */
    }
    close(r->fd);
    while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    *r = (struct rkv_reaper){.fd = -1};
}
