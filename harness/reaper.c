/* See reaper.h. A signal handler would need a global and would not see
 * SIGKILL; a child in the same process group dies with it (timeout -s
 * KILL, a CI job's kill), which left /dev/shm segments, the run's 0600
 * secret file and durable directories behind. */
#include "harness/reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define REAPER_DONE 'D'

int rkv_reaper_start(struct rkv_reaper *r, void (*clean)(void *arg), void *arg)
{
    r->pid = 0;
    r->fd = -1;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        setsid();                         /* out of the run's process group and terminal */
        prctl(PR_SET_NAME, "rkv-reaper"); /* told apart from the run's nodes in ps */
        int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP};
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
            signal(sigs[i], SIG_IGN);
        int rd = fcntl(p[0], F_DUPFD, 16);
        if (rd < 0)
            _exit(1);
        /* A caller reading the run's output to its end is not kept
         * waiting by a descriptor held here. */
        close_range(3, (unsigned)rd - 1, 0);
        close_range((unsigned)rd + 1, ~0u, 0);
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
    r->pid = pid;
    r->fd = p[1];
    return 0;
}

void rkv_reaper_done(struct rkv_reaper *r)
{
    if (r->pid <= 0)
        return;
    char c = REAPER_DONE;
    if (write(r->fd, &c, 1) != 1) {
        /* it cleans instead: what this run made is gone already */
    }
    close(r->fd);
    while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    r->pid = 0;
    r->fd = -1;
}
