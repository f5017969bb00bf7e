/* The launcher: a scenario (rkv run --backend tcp|verbs) or the demo's
 * built-in workload as one process per server and worker on this host,
 * crash faults by kill and restart, the workers' output gathered into one
 * report. The real-host sibling of the twin runner (sim/twin.c). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/child_exit.h"
#include "harness/aggregate.h"
#include "harness/client_stats.h"
#include "harness/launch.h"
#include "harness/reaper.h"
#include "harness/limits.h"
#include "harness/oracle.h"
#include "harness/workload.h"
#include "harness/report.h"
#include "harness/timed.h"
#include "harness/trace_merge.h"
#include "nic/nic.h"
#include "port/port_file.h"
#include "store/node.h"
#include "store/server_int.h"
#include "store/store_int.h"

#define DEMO_MAX_ARGS (2 * CMD_KEY_COUNT_ + 8)
#define DEMO_MAX_PROCS 512

struct demo {
    const char *self; /* argv[0] of the nodes */
    const char *exe;  /* the binary they run, NULL: this process's own */
    const char *cmd;  /* "rkv demo" or "rkv run": the prefix of its messages */
    /* SIGINT, SIGTERM and SIGHUP are blocked in this process and read from
     * sig_fd where it waits, so that a Ctrl-C or a `timeout` stops the
     * children and removes what they leave instead of orphaning them;
     * old_mask is what the children get back before exec. */
    int sig_fd;
    int signo; /* the signal that stopped the run, 0 if none */
    sigset_t old_mask;
    pid_t parent; /* this process, for the children's getppid() check */
    /* Removes what demo_finish would (segments, secret file, scratch
     * directories) if this process dies without it: made at the first
     * spawn, when they are all named (demo_reap). */
    struct rkv_reaper reaper;
    int reaper_tried;
    uint32_t n_machines_shm;       /* machines whose segments this run removes at the end */
    int port_hold[DEMO_MAX_PROCS]; /* rkv_launch_free_ports' reservations, closed at the end */
    uint32_t n_port_hold;
    char *args[DEMO_MAX_ARGS];
    int nargs;
    char bufs[CMD_KEY_COUNT_][32];
    pid_t servers[DEMO_MAX_PROCS], workers[DEMO_MAX_PROCS];
    int out_fd[DEMO_MAX_PROCS];
    char *out[DEMO_MAX_PROCS]; /* each worker's stdout */
    struct rkv_timed_result res[DEMO_MAX_PROCS];
    int status[DEMO_MAX_PROCS];
    uint32_t n_servers, n_workers, machines;
    /* Crash faults of `rkv run`: whom to SIGKILL, when (seconds after t0_s, or
     * once client 0 reported a phase done on its stdout). */
    struct demo_fault {
        char name[32];
        double at_s;
        int after_phase;     /* phase index, or -1 */
        char after_name[64]; /* that phase's name, as the file gives it */
        int is_server;
        uint32_t idx;
        int fired;
        double restart_after_s; /* > 0: start the server again this long after */
        double restart_at;      /* when that is due (0: not yet killed) */
        int restarted;
        int machine_lost; /* unlink the machine's shared memory with the kill */
        uint32_t machine;
        /* Restarted after the servers were shut down: it never heard a
         * SHUTDOWN, and the launcher had to stop it (demo_wait_servers). */
        int late;
    } faults[RKV_SC_MAX_FAULTS];
    /* Durable runs: the snapshot directory this run made; its shm prefix
     * and tensor count name the segments a machine loss takes away. */
    char durable_dir[64];
    /* The cluster's secret when the user gave none (demo_secret): a file
     * of this run's, removed at its end. */
    char secret_file[PATH_MAX];
    char shm_prefix[40];
    uint32_t n_tensors;
    char retry_buf[16];
    char seed_buf[24];
    uint32_t n_faults, next_fault;
    int client0_phase;
    int server_failed;               /* a server exited on an error while the workers ran */
    char server_error[160];          /* which, and how, for the verdict */
    uint8_t stopped[DEMO_MAX_PROCS]; /* servers demo_wait_servers had to stop */
    /* Crash faults after a phase: client 0 waits at the phase's end until
     * this launcher has fired them (one byte per such phase on the gate
     * pipe, whose read end every worker inherits), so that the crash lands
     * between that phase and the next, not after a run that outran the
     * launcher's reading of its PHASEDONE line. -1: no gate. */
    int gate_rd, gate_wr;
    int gate_done;                  /* the last phase released */
    size_t scanned[DEMO_MAX_PROCS]; /* stdout bytes already searched for PHASEDONE */
    double t0_s;                    /* rkv_timed_now_s at the start of run_cluster */
    char fault_log[RKV_SC_FAULTS_TEXT];
    /* drop / delay / link_down: the children's fault NICs count what they
     * did into one file per node in fault_dir. */
    char fault_dir[64];
    int nic_faults;
    /* rkv bench: the children's stderr, shown only if the cluster failed
     * (else their progress lines bury the figures). NULL: inherited. */
    FILE *child_err;
    struct rkv_trace_run *trace; /* rkv run --trace: where the children's spans go, or NULL */
    const char *trace_out;       /* --trace's file, written by demo_finish */
    int trace_rc;                /* rkv_trace_run_end's */
    /* The host setting when it lists several addresses (machines without a
     * cluster file, round robin over them; NULL otherwise): each child gets
     * its machine's as RKV_HOST, the address a node's verbs NIC picks its
     * device by and dials from, as each host of a real cluster sets it. */
    const char *hosts;
    uint32_t servers_per_machine;
};

static pid_t demo_spawn(struct demo *d, const char *role, const char *flag, uint32_t val,
                        const char *node, int *out_fd);
static void demo_reap(void *arg);
static int demo_kill_due(struct demo *d);
static void demo_gate_release(struct demo *d);

/* A machine loss: its shared memory (the machine segment and every
 * tensor's shard) goes with the server, so a restart has only the snapshot. */
static void demo_shm_unlink(void *user, const char *name)
{
    (void)user;
    shm_unlink(name);
}

static void demo_lose_machine(const struct demo *d, uint32_t machine)
{
    rkv_mach_each_segment(d->shm_prefix, machine, d->n_tensors, demo_shm_unlink, NULL);
}

/* Starts the crashed servers whose restart came due; returns how long
 * poll() may sleep before the next one (ms), -1 when none is pending. */
static int demo_restart_servers(struct demo *d)
{
    int wait = -1;
    for (uint32_t i = 0; i < d->n_faults; i++) {
        struct demo_fault *f = &d->faults[i];
        if (f->restart_at <= 0 || f->restarted)
            continue;
        double now = rkv_timed_now_s() - d->t0_s;
        if (now < f->restart_at) {
            int ms = (int)((f->restart_at - now) * 1000) + 1;
            wait = wait < 0 || ms < wait ? ms : wait;
            continue;
        }
        d->servers[f->idx] = demo_spawn(d, "server", "--server-id", f->idx, f->name, NULL);
        f->restarted = d->servers[f->idx] > 0;
        size_t l = strlen(d->fault_log);
        snprintf(d->fault_log + l, sizeof(d->fault_log) - l, "; %s restarted at %.3f s", f->name,
                 now);
        fprintf(stderr, "rkv: fault: %s restarted at %.3f s\n", f->name, now);
    }
    return wait;
}

/* Kills the processes whose fault came due, as a crash looks to the OS:
 * their sockets close and peers see the connections drop. Returns how long
 * poll() may sleep before the next check (ms), -1 when none is left. */
static int demo_fire_faults(struct demo *d)
{
    int wait = demo_kill_due(d); /* first: a kill may plan a restart */
    demo_gate_release(d);
    int restart_wait = demo_restart_servers(d);
    return wait < 0 || (restart_wait >= 0 && restart_wait < wait) ? restart_wait : wait;
}

/* Lets client 0 go on past each phase p unless the next crash fault to
 * fire (they fire in the scenario's order) is one of p or of an earlier
 * phase: that one waits only for the launcher (and its at_s), so client 0
 * waits for it. A fault behind another that waits for a later phase, or
 * for a time, does not hold client 0: it fires when its turn comes, as it
 * did before the gate (holding client 0 for it would wait for a phase
 * that never comes). */
static void demo_gate_release(struct demo *d)
{
    while (d->gate_wr >= 0) {
        int p = INT_MAX;
        for (uint32_t i = 0; i < d->n_faults; i++)
            if (d->faults[i].after_phase > d->gate_done && d->faults[i].after_phase < p)
                p = d->faults[i].after_phase;
        if (p == INT_MAX || d->client0_phase < p)
            return;
        if (d->next_fault < d->n_faults && d->faults[d->next_fault].after_phase >= 0 &&
            d->faults[d->next_fault].after_phase <= p)
            return;
        if (write(d->gate_wr, "g", 1) != 1) { /* cannot fill: one byte per fault at most */
            fprintf(stderr, "%s: cannot release client 0 after phase %d: %s\n", d->cmd, p,
                    strerror(errno));
            close(d->gate_wr); /* the end of the pipe releases it for good */
            d->gate_wr = -1;
        }
        d->gate_done = p;
    }
}

static int demo_kill_due(struct demo *d)
{
    while (d->next_fault < d->n_faults) {
        struct demo_fault *f = &d->faults[d->next_fault];
        double now = rkv_timed_now_s() - d->t0_s;
        if (now < f->at_s)
            return (int)((f->at_s - now) * 1000) + 1;
        if (f->after_phase >= 0 && d->client0_phase < f->after_phase)
            return 50; /* the PHASEDONE line wakes poll() anyway */
        pid_t *pid = f->is_server ? &d->servers[f->idx] : &d->workers[f->idx];
        if (*pid > 0) {
            kill(*pid, SIGKILL);
            waitpid(*pid, NULL, 0);
            *pid = 0;
            f->fired = 1;
            if (f->machine_lost)
                demo_lose_machine(d, f->machine);
            if (f->restart_after_s > 0)
                f->restart_at = now + f->restart_after_s;
            size_t l = strlen(d->fault_log);
            snprintf(d->fault_log + l, sizeof(d->fault_log) - l, "%s%s killed at %.3f s%s",
                     l ? "; " : "", f->name, now,
                     f->machine_lost ? " with its machine's memory" : "");
            /* Client 0 is known to be held at the gate: it reported the
             * phase done and this launcher has not released it yet. */
            l = strlen(d->fault_log);
            if (f->after_phase >= 0 && d->gate_wr >= 0 && d->gate_done < f->after_phase &&
                d->client0_phase == f->after_phase)
                snprintf(d->fault_log + l, sizeof(d->fault_log) - l,
                         " while client 0 waited after phase \"%s\"", f->after_name);
            fprintf(stderr, "rkv: fault: %s killed at %.3f s\n", f->name, now);
        }
        d->next_fault++;
    }
    return -1;
}

/* Client 0's progress, from the PHASEDONE lines in worker i's output. */
static void demo_scan_progress(struct demo *d, uint32_t i, size_t len)
{
    const char *base = d->out[i];
    size_t at = d->scanned[i];
    while (at < len) {
        const char *eol = memchr(base + at, '\n', len - at);
        if (!eol)
            break;
        unsigned w, p;
        if (sscanf(base + at, "PHASEDONE w=%u p=%u", &w, &p) == 2 && w == 0 &&
            (int)p > d->client0_phase)
            d->client0_phase = (int)p;
        at = (size_t)(eol - base) + 1;
    }
    d->scanned[i] = at;
}

/* Whether port is free on loopback: a bind without SO_REUSEADDR, which
 * fails while any socket holds the port. With hold_p the socket stays bound
 * and is returned, with SO_REUSEADDR set only after the bind: other
 * launchers' probes still fail on it, while this run's servers
 * (SO_REUSEADDR, listen) can bind the port, since it does not listen. */
static int demo_port_free(uint32_t port, int *hold_p)
{
    int f = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in b = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int r = f >= 0 ? bind(f, (struct sockaddr *)&b, sizeof(b)) : -1;
    if (r == 0 && hold_p) {
        int one = 1;
        setsockopt(f, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        *hold_p = f;
    } else if (f >= 0) {
        close(f);
    }
    return r == 0;
}

/* Finds n consecutive free TCP ports in 20000..23999: below Linux's
 * ephemeral range (32768+), where this run's own outgoing connections would
 * take them, and apart from the ranges the test binaries use. With hold
 * (n entries), the ports stay reserved against other launchers of this host
 * until the caller closes hold[0..n) (two runs started together picked the
 * same ports, and one server failed "Address already in use"); a client
 * that reaches a foreign server is turned away by the cluster fingerprint
 * at HELLO. */
int rkv_launch_free_ports(uint32_t n, uint16_t *base_p, int *hold)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t)getpid() * 2654435761u ^ (uint64_t)ts.tv_nsec;
    for (int attempt = 0; attempt < 200; attempt++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t base = 20000 + (uint32_t)((x >> 33) % (4000 - n)); /* tests use 24000+ */
        uint32_t ok = 0;
        while (ok < n && demo_port_free(base + ok, hold ? &hold[ok] : NULL))
            ok++;
        if (ok == n) {
            *base_p = (uint16_t)base;
            return 0;
        }
        while (hold && ok > 0)
            close(hold[--ok]);
    }
    return -1;
}

/* Why a child could not be started, with the limit that is the usual
 * cause: descriptors (a pipe per worker) or processes. */
static void demo_spawn_failed(const struct demo *d, const char *role, uint32_t val,
                              const char *what)
{
    int e = errno;
    struct rlimit rl;
    char limit[160] = "";
    int res = e == EAGAIN ? RLIMIT_NPROC : RLIMIT_NOFILE;
    if ((e == EMFILE || e == ENFILE || e == EAGAIN) && getrlimit(res, &rl) == 0)
        snprintf(limit, sizeof(limit), " (%s limit %llu, ulimit %s)",
                 res == RLIMIT_NPROC ? "process" : "open-file", (unsigned long long)rl.rlim_cur,
                 res == RLIMIT_NPROC ? "-u" : "-n");
    fprintf(stderr, "%s: cannot start %s %u: %s: %s%s; stopping the run\n", d->cmd, role, val, what,
            strerror(e), limit);
}

static pid_t demo_spawn(struct demo *d, const char *role, const char *flag, uint32_t val,
                        const char *node, int *out_fd)
{
    if (!d->reaper_tried) {
        d->reaper_tried = 1;
        (void)rkv_reaper_start(&d->reaper, demo_reap, d);
    }
    int pipefd[2] = {-1, -1};
    if (out_fd && pipe(pipefd) < 0) {
        /* Said here, with the limit: the caller stops the run (a worker
         * that never started read as one that "exited with status 0",
         * after the others waited a hello timeout for it). */
        demo_spawn_failed(d, role, val, "pipe");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        demo_spawn_failed(d, role, val, "fork");
        if (out_fd) {
            close(pipefd[0]);
            close(pipefd[1]);
        }
        return -1;
    }
    if (pid == 0) {
        /* Die with the launcher, whatever kills it; if it died before the
         * prctl, getppid() is no longer it. The stopping signals it blocked
         * are the child's again. */
        sigprocmask(SIG_SETMASK, &d->old_mask, NULL);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != d->parent)
            rkv_child_exit(127);
        char num[16];
        snprintf(num, sizeof(num), "%u", val);
        char *argv[DEMO_MAX_ARGS + 6];
        int n = 0;
        argv[n++] = (char *)d->self;
        argv[n++] = (char *)role;
        for (int i = 0; i < d->nargs; i++)
            argv[n++] = d->args[i];
        argv[n++] = (char *)flag;
        argv[n++] = num;
        argv[n] = NULL;
        /* Every node is named: it tells `rkv node` that this launcher,
         * which runs the file's faults, started it (not mpirun). */
        if (node)
            setenv("RKV_FAULT_NODE", node, 1);
        if (node && d->fault_dir[0]) {
            char stats[128];
            snprintf(stats, sizeof(stats), "%s/%s", d->fault_dir, node);
            setenv("RKV_FAULT_STATS", stats, 1);
        }
        if (node && d->trace)
            rkv_trace_run_child_env(d->trace, node);
        /* Not one inherited from this launcher's own environment: that
         * descriptor number may be anything in the child. */
        unsetenv(RKV_LAUNCH_GATE_ENV);
        if (d->gate_rd >= 0 && !strcmp(role, "worker")) {
            char fd[16];
            snprintf(fd, sizeof(fd), "%d", d->gate_rd);
            if (fcntl(d->gate_rd, F_SETFD, 0) == 0) /* kept across execv */
                setenv(RKV_LAUNCH_GATE_ENV, fd, 1);
        }
        if (d->hosts) {
            char host[RKV_HOST_MAX + 1], err[160];
            uint32_t m = strcmp(flag, "--server-id") ? val : val / d->servers_per_machine;
            if (rkv_cmd_host_pick(d->hosts, m, host, sizeof(host), err, sizeof(err)) == 0)
                setenv("RKV_HOST", host, 1); /* checked by demo_check_settings */
        }
        if (out_fd) {
            dup2(pipefd[1], STDOUT_FILENO);
            close(pipefd[0]);
            close(pipefd[1]);
        }
        if (d->child_err)
            dup2(fileno(d->child_err), STDERR_FILENO);
        if (d->exe)
            execv(d->exe, argv);
        /* The binary by its resolved path: under valgrind /proc/self/exe is
         * the tool, while readlink() of it names the program. */
        char exe[4096];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (k > 0) {
            exe[k] = 0;
            execv(exe, argv);
        }
        execv("/proc/self/exe", argv);
        rkv_child_exit(127);
    }
    if (out_fd) {
        close(pipefd[1]);
        *out_fd = pipefd[0];
    }
    return pid;
}

/* Blocks the stopping signals and opens sig_fd (see struct demo). */
static int demo_signals_open(struct demo *d)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    d->parent = getpid();
    d->sig_fd = -1;
    if (sigprocmask(SIG_BLOCK, &set, &d->old_mask) < 0)
        return -1;
    d->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return d->sig_fd < 0 ? -1 : 0;
}

/* 1 once a stopping signal arrived (kept in d->signo). */
static int demo_signalled(struct demo *d)
{
    struct signalfd_siginfo si;
    if (!d->signo && d->sig_fd >= 0 && read(d->sig_fd, &si, sizeof(si)) == sizeof(si))
        d->signo = (int)si.ssi_signo;
    return d->signo != 0;
}

/* Sleeps up to ms, woken early by a stopping signal. */
static void demo_nap(struct demo *d, int ms)
{
    struct pollfd pf = {.fd = d->sig_fd, .events = POLLIN};
    if (d->sig_fd < 0 || poll(&pf, 1, ms) == 0) {
        if (d->sig_fd < 0) {
            struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
        return;
    }
    demo_signalled(d);
}

/* Stops every child still running: the launcher's signal first (each ends
 * as it would have without a launcher), SIGKILL after 2 s; all reaped. */
static void demo_stop_children(struct demo *d)
{
    pid_t *pids[2] = {d->servers, d->workers};
    uint32_t n[2] = {d->n_servers, d->n_workers};
    for (int g = 0; g < 2; g++)
        for (uint32_t i = 0; i < n[g]; i++)
            if (pids[g][i] > 0)
                kill(pids[g][i], d->signo ? d->signo : SIGTERM);
    for (int waited_ms = 0; waited_ms <= 2000; waited_ms += 20) {
        uint32_t left = 0;
        for (int g = 0; g < 2; g++)
            for (uint32_t i = 0; i < n[g]; i++)
                if (pids[g][i] > 0 && waitpid(pids[g][i], NULL, WNOHANG) == 0)
                    left++;
                else
                    pids[g][i] = 0;
        if (!left)
            return;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    for (int g = 0; g < 2; g++)
        for (uint32_t i = 0; i < n[g]; i++)
            if (pids[g][i] > 0) {
                kill(pids[g][i], SIGKILL);
                waitpid(pids[g][i], NULL, 0);
                pids[g][i] = 0;
            }
}

/* Once every child is gone: the shared memory of each machine of the run.
 * A killed server leaves its segments behind (a restart would need them),
 * and nobody but the launcher that killed it knows they are garbage. But
 * a machine segment whose maker still runs is no child's of this run (they
 * are all reaped by now): another cluster with the same shm prefix (a second
 * `rkv run --base-port P` beside the first, whose servers were refused with
 * "in use by a running server") made it, and removing its segments broke
 * that cluster mid-run (its workers: "shard ...: cannot map"). */
static void demo_remove_segments(const struct demo *d);

/* In the reaper, once this launcher is gone without cleaning (SIGKILL of
 * it or of its process group): the children die with it (PDEATHSIG), but
 * may still hold their segments for a moment, so a segment whose maker
 * lives is tried again for up to 2 s; then it is someone else's. */
static void demo_reap(void *arg)
{
    const struct demo *d = arg;
    if (d->secret_file[0])
        unlink(d->secret_file);
    /* The launcher's end reaches this read before its children get their
     * PDEATHSIG: their segments, and the files a server may still be
     * writing into the durable directory, are looked at once they are gone. */
    for (int tries = 0; tries < 20; tries++) {
        int live = 0;
        for (uint32_t m = 0; d->shm_prefix[0] && m < d->n_machines_shm; m++)
            live += rkv_node_shm_maker(d->shm_prefix, m) != 0;
        if (!live)
            break;
        usleep(100 * 1000);
    }
    const char *dirs[3] = {d->fault_dir[0] && d->nic_faults ? d->fault_dir : "", d->durable_dir,
                           d->trace ? d->trace->dir : ""};
    for (int k = 0; k < 3; k++) /* a file made during a pass left it: again */
        for (int tries = 0; dirs[k][0] && tries < 5 && access(dirs[k], F_OK) == 0; tries++) {
            rkv_file_remove_dir(dirs[k]);
            if (access(dirs[k], F_OK) == 0)
                usleep(100 * 1000);
        }
    struct demo quiet = *d;
    quiet.cmd = "rkv (the reaper of a run that was killed)";
    demo_remove_segments(&quiet);
}

static void demo_remove_segments(const struct demo *d)
{
    for (uint32_t m = 0; d->shm_prefix[0] && m < d->n_machines_shm; m++) {
        uint64_t maker = rkv_node_shm_maker(d->shm_prefix, m);
        if (maker) {
            fprintf(stderr,
                    "%s: machine %u's shared memory (shm prefix \"%s\") left in place: process "
                    "%llu, not one of this run's, uses it\n",
                    d->cmd, m, d->shm_prefix, (unsigned long long)RKV_PORT_PROC_PID(maker));
            continue;
        }
        demo_lose_machine(d, m);
    }
}

/* Undoes demo_signals_open. A signal that stopped the run is raised again
 * with its default action, so that whoever sent it sees this process end
 * by it (a shell's Ctrl-C, `timeout`); the caller returns 128 + signo if
 * that does not end the process. */
static void demo_signals_close(struct demo *d)
{
    if (d->sig_fd < 0)
        return;
    close(d->sig_fd);
    d->sig_fd = -1;
    if (d->signo) {
        fprintf(stderr,
                "%s: stopped by %s: its processes were stopped and their shared memory "
                "removed\n",
                d->cmd, strsignal(d->signo));
        fflush(stdout);
        signal(d->signo, SIG_DFL);
    }
    sigprocmask(SIG_SETMASK, &d->old_mask, NULL);
    if (d->signo)
        raise(d->signo);
}

/* Reads every worker's stdout at once until all of them closed it: a worker
 * blocked on a full pipe would stall the others at the next barrier. */
/* A server that exited on an error (a port taken, say) while the workers
 * run: they would wait out connect-retry-ms and the request timeout (60 s
 * before a verdict without a reason); they are stopped at once, and the
 * run fails saying which server. A server ending with 0 did so on a
 * SHUTDOWN, after the workers' last barrier. A crash fault's kill is not
 * seen here: demo_kill_due reaps its victim at once. */
static void demo_check_servers(struct demo *d)
{
    for (uint32_t i = 0; i < d->n_servers && !d->server_failed; i++) {
        int st;
        if (d->servers[i] <= 0 || waitpid(d->servers[i], &st, WNOHANG) != d->servers[i])
            continue;
        d->servers[i] = 0;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
            continue;
        d->server_failed = 1;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        uint32_t spm = d->servers_per_machine ? d->servers_per_machine : 1;
        snprintf(d->server_error, sizeof(d->server_error),
                 "server %u (s%u.%u) exited with status %d at %.1f s while the workers ran (its "
                 "error is on stderr)",
                 i, i / spm, i % spm, code, rkv_timed_now_s() - d->t0_s);
        fprintf(stderr,
                "%s: server %u exited with status %d while the workers ran; stopping them\n",
                d->cmd, i, code);
        for (uint32_t w = 0; w < d->n_workers; w++)
            if (d->workers[w] > 0)
                kill(d->workers[w], SIGTERM);
    }
}

static void demo_collect(struct demo *d)
{
    struct pollfd pf[DEMO_MAX_PROCS + 1];
    size_t cap[DEMO_MAX_PROCS] = {0}, len[DEMO_MAX_PROCS] = {0};
    uint32_t open_n = 0;
    for (uint32_t i = 0; i < d->n_workers; i++) {
        pf[i] = (struct pollfd){.fd = d->workers[i] > 0 ? d->out_fd[i] : -1, .events = POLLIN};
        open_n += pf[i].fd >= 0;
    }
    pf[d->n_workers] = (struct pollfd){.fd = d->sig_fd, .events = POLLIN};
    while (open_n > 0 && !demo_signalled(d)) {
        int wait_ms = demo_fire_faults(d);
        /* In fault runs too: a crash fault's victim is reaped where it is
         * killed, so a server seen exiting here failed on its own. Runs
         * with a crash fault were not watched, and a server whose port was
         * taken at start left the workers to wait out their timeouts (35-63
         * s) and a verdict that did not name it (an outside tester). */
        demo_check_servers(d);
        wait_ms = wait_ms < 0 || wait_ms > 200 ? 200 : wait_ms;
        if (poll(pf, d->n_workers + 1, wait_ms) < 0 && errno != EINTR)
            break;
        for (uint32_t i = 0; i < d->n_workers; i++) {
            if (pf[i].fd < 0 || !pf[i].revents)
                continue;
            if (len[i] + 4096 + 1 > cap[i]) {
                size_t ncap = cap[i] ? 2 * cap[i] : 16384;
                char *nb = realloc(d->out[i], ncap);
                if (!nb)
                    break;
                d->out[i] = nb;
                cap[i] = ncap;
                d->out[i][len[i]] = 0; /* a worker that prints nothing still has "" */
            }
            ssize_t r = read(pf[i].fd, d->out[i] + len[i], 4096);
            if (r > 0) {
                len[i] += (size_t)r;
                d->out[i][len[i]] = 0;
                if (d->n_faults)
                    demo_scan_progress(d, i, len[i]);
                continue;
            }
            if (r < 0 && errno == EINTR)
                continue;
            close(pf[i].fd);
            pf[i].fd = -1;
            open_n--;
        }
    }
    for (uint32_t i = 0; i < d->n_workers; i++) /* left open when a signal stopped the run */
        if (pf[i].fd >= 0)
            close(pf[i].fd);
}

/* ---- a launched worker's side: the lines the launcher reads ---- */

struct worker_gate {
    FILE *out;
    const struct rkv_scenario *sc;
    int fd; /* -1: none */
};

/* How long client 0 waits at a gate: the launcher releases it as soon as
 * the crash fired (or, for a fault with at_s too, once at_s came); past
 * this the launcher is taken to be stuck and the run goes on without it. */
#define WORKER_GATE_MS 120000

/* A line per finished phase, read by the launcher as it comes: crash faults
 * with after_phase wait for it, and client 0 waits for them. */
static void worker_on_phase(void *user, uint32_t worker, uint32_t phase)
{
    struct worker_gate *g = user;
    fprintf(g->out, "PHASEDONE w=%u p=%u\n", worker, phase);
    fflush(g->out);
    int gated = 0;
    for (uint32_t i = 0; i < g->sc->n_faults; i++)
        gated |= g->sc->faults[i].after_phase[0] && g->sc->faults[i].after_phase_ix == phase &&
                 !strcmp(g->sc->faults[i].kind, "crash");
    if (worker != 0 || g->fd < 0 || !gated)
        return;
    struct pollfd pf = {.fd = g->fd, .events = POLLIN};
    int n;
    while ((n = poll(&pf, 1, WORKER_GATE_MS)) < 0 && errno == EINTR)
        ;
    char b;
    if (n <= 0 || read(g->fd, &b, 1) != 1) { /* the launcher is gone or stuck: go on */
        fprintf(stderr, "rkv worker: no word from the launcher after phase %u (%s); going on\n",
                phase,
                n == 0  ? "timed out"
                : n < 0 ? strerror(errno)
                        : "pipe closed");
        close(g->fd);
        g->fd = -1;
    }
}

/* The gate's descriptor from the environment, or -1. */
static int worker_gate_fd(void)
{
    const char *v = getenv(RKV_LAUNCH_GATE_ENV);
    char *end;
    long fd = v && *v ? strtol(v, &end, 10) : -1;
    if (fd < 0 || fd > INT_MAX || *end || fcntl((int)fd, F_GETFD) < 0)
        return -1;
    return (int)fd;
}

int rkv_launch_worker_run(struct rkv_client *cli, const struct rkv_config *cfg,
                          const struct rkv_scenario *sc, const struct rkv_timed_workload *wl,
                          int bench, FILE *lines, int *wl_rc_p)
{
    struct rkv_wl_phase_stats *st = calloc(sc->n_phases, sizeof(*st));
    struct worker_gate gate = {.out = stdout, .sc = sc, .fd = worker_gate_fd()};
    /* Pinned assign winners go to the launcher with the PHASE lines, which
     * compares them across workers. */
    int rc = st ? rkv_wl_run_pinned(cli, rkv_client_port(cli), sc, rkv_client_id(cli), st, stderr,
                                    lines, worker_on_phase, &gate)
                : -RKV_ENOMEM;
    if (gate.fd >= 0)
        close(gate.fd);
    *wl_rc_p = rc;
    struct rkv_timed_result res = {0};
    for (uint32_t p = 0; st && p < sc->n_phases; p++) {
        rkv_wl_print(lines, rkv_client_id(cli), p, &st[p]);
        res.checks += st[p].checks;
        res.errors += st[p].errors;
    }
    if (st && rkv_stats_print(stdout, cli) < 0) /* the report's "stats" */
        rc = rc < 0 ? rc : -RKV_ENOMEM;
    free(st);
    if (rc == 0 && bench)
        rc = rkv_timed_run(cli, cfg, wl, &res, stderr);
    if (bench)
        printf("RESULT worker=%u status=%d checks=%llu errors=%llu push_bytes=%llu push_s=%.6f "
               "pull_bytes=%llu pull_s=%.6f lat_p50_us=%.2f lat_p99_us=%.2f "
               "pushpull_bytes=%llu pushpull_s=%.6f pushpipe_bytes=%llu pushpipe_s=%.6f "
               "lat_vcsw=%.3f lat_ivcsw=%.3f lat_call_vcsw=%.3f busy_poll=%d push_t0_s=%.6f "
               "pull_t0_s=%.6f pushpull_t0_s=%.6f pushpipe_t0_s=%.6f\n",
               rkv_client_id(cli), rc, (unsigned long long)res.checks,
               (unsigned long long)res.errors, (unsigned long long)res.push_bytes, res.push_s,
               (unsigned long long)res.pull_bytes, res.pull_s, res.pull_lat_us_p50,
               res.pull_lat_us_p99, (unsigned long long)res.pushpull_bytes, res.pushpull_s,
               (unsigned long long)res.pushpipe_bytes, res.pushpipe_s, res.pull_lat_vcsw,
               res.pull_lat_ivcsw, res.pull_lat_call_vcsw, cfg->busy_poll, res.push_t0_s,
               res.pull_t0_s, res.pushpull_t0_s, res.pushpipe_t0_s);
    fflush(stdout);
    return rc < 0 ? RKV_EXIT_STORE : res.errors ? RKV_EXIT_CHECK : RKV_EXIT_OK;
}

/* ---- the launcher's side ---- */

/* Parses a worker's RESULT line (from its stdout) into res; 0 if found. */
static int demo_parse_result(const char *out, struct rkv_timed_result *res, int *status_p)
{
    const char *line = out ? strstr(out, "RESULT ") : NULL;
    unsigned w;
    unsigned long long c, e, pb, lb, ppb, qb;
    if (!line ||
        sscanf(line,
               "RESULT worker=%u status=%d checks=%llu errors=%llu push_bytes=%llu "
               "push_s=%lf pull_bytes=%llu pull_s=%lf lat_p50_us=%lf lat_p99_us=%lf "
               "pushpull_bytes=%llu pushpull_s=%lf pushpipe_bytes=%llu pushpipe_s=%lf "
               "lat_vcsw=%lf lat_ivcsw=%lf lat_call_vcsw=%lf busy_poll=%d "
               "push_t0_s=%lf pull_t0_s=%lf pushpull_t0_s=%lf pushpipe_t0_s=%lf",
               &w, status_p, &c, &e, &pb, &res->push_s, &lb, &res->pull_s, &res->pull_lat_us_p50,
               &res->pull_lat_us_p99, &ppb, &res->pushpull_s, &qb, &res->pushpipe_s,
               &res->pull_lat_vcsw, &res->pull_lat_ivcsw, &res->pull_lat_call_vcsw, &res->busy_poll,
               &res->push_t0_s, &res->pull_t0_s, &res->pushpull_t0_s, &res->pushpipe_t0_s) != 22)
        return -1;
    res->pushpipe_bytes = qb;
    res->checks = c;
    res->errors = e;
    res->push_bytes = pb;
    res->pull_bytes = lb;
    res->pushpull_bytes = ppb;
    return 0;
}

static int demo_wait_servers(struct demo *d, int timeout_s)
{
    int bad = 0;
    for (int waited = 0; waited <= timeout_s * 10; waited++) {
        int left = 0;
        for (uint32_t i = 0; i < d->n_servers; i++) {
            if (d->servers[i] <= 0)
                continue;
            int st;
            pid_t r = waitpid(d->servers[i], &st, WNOHANG);
            if (r == d->servers[i]) {
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    fprintf(stderr, "%s: server %u exited with status %d\n", d->cmd, i,
                            WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
                    bad = 1;
                }
                d->servers[i] = 0;
            } else {
                left++;
            }
        }
        if (!left)
            return bad;
        demo_nap(d, 100);
        if (d->signo)
            return 1; /* the caller stops them */
    }
    /* SIGTERM first: a server stops on it as on a SHUTDOWN and writes its
     * fault counts (one no SHUTDOWN reached, its worker's connection
     * broken by the fault, read 0 when killed outright); SIGKILL 2 s on. */
    for (uint32_t i = 0; i < d->n_servers; i++) {
        if (d->servers[i] > 0) {
            fprintf(stderr, "%s: server %u did not exit; stopping it\n", d->cmd, i);
            kill(d->servers[i], SIGTERM);
            d->stopped[i] = 1;
        }
    }
    for (int waited = 0; waited < 20; waited++) {
        int left = 0;
        for (uint32_t i = 0; i < d->n_servers; i++) {
            if (d->servers[i] > 0 && waitpid(d->servers[i], NULL, WNOHANG) == d->servers[i])
                d->servers[i] = 0;
            left += d->servers[i] > 0;
        }
        if (!left)
            return 1;
        demo_nap(d, 100);
    }
    for (uint32_t i = 0; i < d->n_servers; i++) {
        if (d->servers[i] > 0) {
            fprintf(stderr, "%s: server %u did not stop; killing it\n", d->cmd, i);
            kill(d->servers[i], SIGKILL);
            waitpid(d->servers[i], NULL, 0);
            d->servers[i] = 0;
        }
    }
    return 1;
}

/* A worker's timed pass of one kind (0 push, 1 pull, 2 push+pull, 3 push
 * pipelined), as harness/aggregate.h takes it. */
static struct rkv_pass demo_pass(const struct rkv_timed_result *r, int kind)
{
    const uint64_t bytes[4] = {r->push_bytes, r->pull_bytes, r->pushpull_bytes, r->pushpipe_bytes};
    const double t0[4] = {r->push_t0_s, r->pull_t0_s, r->pushpull_t0_s, r->pushpipe_t0_s};
    const double s[4] = {r->push_s, r->pull_s, r->pushpull_s, r->pushpipe_s};
    assert(kind >= 0 && kind < 4);
    return (struct rkv_pass){
        .bytes = bytes[kind], .start_s = t0[kind], .end_s = t0[kind] + s[kind]};
}

/* Each kind's throughput is every worker's bytes over the window from the
 * first worker's start to the last one's end (the workers start each pass
 * together, at a barrier); latency is the workers' mean p50 and their
 * worst p99. */
static void demo_figures(const struct demo *d, struct rkv_launch_figures *f)
{
    struct rkv_pass pass[4][DEMO_MAX_PROCS];
    *f = (struct rkv_launch_figures){0};
    for (uint32_t i = 0; i < d->n_workers; i++) {
        const struct rkv_timed_result *r = &d->res[i];
        f->checks += r->checks;
        f->errors += r->errors;
        for (int kind = 0; kind < 4; kind++)
            pass[kind][i] = demo_pass(r, kind);
        f->lat_p50_us += r->pull_lat_us_p50 / d->n_workers;
        f->lat_vcsw += r->pull_lat_vcsw / d->n_workers;
        f->lat_ivcsw += r->pull_lat_ivcsw / d->n_workers;
        f->lat_call_vcsw += r->pull_lat_call_vcsw / d->n_workers;
        f->busy_workers += r->busy_poll != 0;
        f->lat_p99_us = r->pull_lat_us_p99 > f->lat_p99_us ? r->pull_lat_us_p99 : f->lat_p99_us;
    }
    f->push_gbs = rkv_pass_aggregate_gbs(pass[0], d->n_workers);
    f->pull_gbs = rkv_pass_aggregate_gbs(pass[1], d->n_workers);
    f->pushpull_gbs = rkv_pass_aggregate_gbs(pass[2], d->n_workers);
    f->pushpipe_gbs = rkv_pass_aggregate_gbs(pass[3], d->n_workers);
}

/* Each worker's own passes: its throughput and when it ran (ms after the
 * first worker's first pass began), which shows how much they overlapped. */
static void demo_report_passes(const struct demo *d)
{
    static const char *const what[4] = {"push", "pull", "push+pull", "pipelined"};
    double t0 = 0;
    int any = 0;
    for (uint32_t i = 0; i < d->n_workers; i++) {
        struct rkv_pass p = demo_pass(&d->res[i], 0);
        if (p.bytes && (!any || p.start_s < t0))
            t0 = p.start_s;
        any |= p.bytes != 0;
    }
    for (uint32_t i = 0; i < d->n_workers; i++) {
        printf("worker %u:", i);
        for (int kind = 0; kind < 4; kind++) {
            struct rkv_pass p = demo_pass(&d->res[i], kind);
            double s = p.end_s - p.start_s;
            printf("%s %s %.3f GB/s in %.2f..%.2f ms", kind ? "," : "", what[kind],
                   s > 0 ? p.bytes / s / 1e9 : 0, (p.start_s - t0) * 1e3, (p.end_s - t0) * 1e3);
        }
        printf("\n");
    }
}

static void demo_report(const struct demo *d, uint64_t value_bytes)
{
    struct rkv_launch_figures f;
    demo_figures(d, &f);
    printf("\n| workers | machines / servers | value bytes | push GB/s | pull GB/s | "
           "push+pull GB/s | pull p50 us | pull p99 us | checked values | wrong |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    printf("| %u | %u / %u | %llu | %.3f | %.3f | %.3f | %.1f | %.1f | %llu | %llu |\n",
           d->n_workers, d->machines, d->n_servers, (unsigned long long)value_bytes, f.push_gbs,
           f.pull_gbs, f.pushpull_gbs, f.lat_p50_us, f.lat_p99_us, (unsigned long long)f.checks,
           (unsigned long long)f.errors);
    printf("1-row pulls: %.2f sleeps of the calling thread, %.2f sleeps and %.2f preemptions "
           "of the worker process per pull; %u of %u workers busy-polled\n",
           f.lat_call_vcsw, f.lat_vcsw, f.lat_ivcsw, f.busy_workers, d->n_workers);
    demo_report_passes(d);
    for (uint32_t i = 0; i < d->n_workers; i++)
        if (d->status[i])
            printf("worker %u: store error %d (%s)\n", i, d->status[i], rkv_strerror(d->status[i]));
    double tcp = rkv_limit_tcp_gbps(), mc = rkv_limit_memcpy_gbps(64u << 20),
           mv = rkv_limit_memcpy_gbps((size_t)value_bytes);
    printf("\nlimits measured now: loopback TCP 1 stream %.3f GB/s, memcpy 1 core %.3f GB/s, "
           "memcpy of %llu-byte blocks %.3f GB/s\n",
           tcp, mc, (unsigned long long)value_bytes, mv);
    if (tcp > 0 && f.push_gbs > 0 && f.pull_gbs > 0)
        printf("ratio push/tcp1 %.2f  pull/tcp1 %.2f (rkv bench tcp|shm measures more)\n",
               f.push_gbs / tcp, f.pull_gbs / tcp);
}

/* The oracle's table for the built-in scenario the workers ran. Returns 1
 * when every phase passed and every process exited cleanly. */
static int demo_verdict(const struct demo *d, const struct cmd_settings *s, int procs_ok)
{
    struct rkv_config cfg;
    struct rkv_scenario *sc = NULL;
    char err[512];
    if (rkv_cmd_build_config(s, &cfg, err, sizeof(err)) < 0)
        return 0;
    int rc = rkv_scenario_builtin(&cfg, strtoull(s->val[CMD_ROWS], NULL, 0),
                                  (uint32_t)strtoul(s->val[CMD_ROUNDS], NULL, 0), &sc);
    free(cfg.machines);
    struct rkv_report r;
    if (rc < 0 || rkv_report_collect(&r, sc, d->out, d->n_workers) < 0) {
        rkv_scenario_free(sc);
        return 0;
    }
    r.processes_ok = procs_ok;
    rkv_report_print(&r, stdout, s->val[CMD_BACKEND]);
    int passed = rkv_report_passed(&r);
    rkv_report_free(&r);
    rkv_scenario_free(sc);
    return passed;
}

static int demo_configure(struct demo *d, struct cmd_settings *s);

static int demo_setup(struct demo *d, struct cmd_settings *s, int argc, char **argv)
{
    char err[512];
    if (rkv_cmd_settings_load(s, argc, argv, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv demo: %s\n", err);
        return -1;
    }
    if (strcmp(s->src[CMD_SCENARIO], "default") != 0) {
        fprintf(stderr,
                "rkv demo: scenario (%s): the demo runs its built-in workload; a "
                "scenario file runs with `rkv run FILE --backend tcp`\n",
                s->src[CMD_SCENARIO]);
        return -1;
    }
    if (strcmp(s->src[CMD_MACHINES], "default") == 0)
        s->val[CMD_MACHINES] = "2";
    if (strcmp(s->src[CMD_SERVERS_PER_MACHINE], "default") == 0)
        s->val[CMD_SERVERS_PER_MACHINE] = "2";
    if (strcmp(s->src[CMD_NUM_WORKERS], "default") == 0)
        s->val[CMD_NUM_WORKERS] = "4";
    return demo_configure(d, s);
}

/* The settings the launcher sets for each child itself (role, machine,
 * server). Every other setting is passed to every child by its flag,
 * default or not, so that the child's own environment cannot make it see
 * another value than the launcher checked. */
static const enum cmd_key demo_per_child[] = {CMD_ROLE, CMD_MACHINE_ID, CMD_SERVER_ID};

static int demo_is_per_child(int k)
{
    for (size_t i = 0; i < sizeof(demo_per_child) / sizeof(demo_per_child[0]); i++)
        if ((int)demo_per_child[i] == k)
            return 1;
    return 0;
}

int rkv_launch_args(const struct cmd_settings *s, char **argv, int cap)
{
    int n = 0;
    /* A scenario's workers run its workload, and refuse the built-in
     * one's flags beside it (cmd_worker_refuse_workload). */
    int scenario = *s->val[CMD_SCENARIO] != 0;
    for (int k = 0; k < CMD_KEY_COUNT_; k++) {
        if (demo_is_per_child(k) ||
            (scenario && (k == CMD_ROWS || k == CMD_VALUE_BYTES || k == CMD_ROUNDS)))
            continue;
        if (n + 2 > cap)
            return -1;
        argv[n++] = (char *)rkv_cmd_key_flag((enum cmd_key)k);
        argv[n++] = (char *)s->val[k];
    }
    return n;
}

/* The settings the launcher sets per child, given to the launcher itself. */
static int demo_refuse_per_child(const struct demo *d, const struct cmd_settings *s)
{
    int i =
        rkv_cmd_first_flag(s, demo_per_child, sizeof(demo_per_child) / sizeof(demo_per_child[0]));
    if (i >= 0) {
        fprintf(stderr, "%s: %s: the launcher sets it for each process it starts\n", d->cmd,
                rkv_cmd_key_flag(demo_per_child[i]));
        return -1;
    }
    return 0;
}

/* Every setting checked once, here, as each child would check it: a bad
 * one is one line and exit 2, not one copy per child. */
static int demo_check_settings(struct demo *d, const struct cmd_settings *s)
{
    char err[512];
    struct rkv_config cfg;
    struct rkv_timed_workload wl;
    if (rkv_cmd_build_config(s, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: %s\n", d->cmd, err);
        return -1;
    }
    if (rkv_timed_workload_load(s, &wl, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: %s\n", d->cmd, err);
        free(cfg.machines);
        return -1;
    }
    int rc = 0;
    /* A name no build knows is a typo, not a backend this host lacks:
     * say so and list the names (a known one that cannot run here keeps
     * the message below). */
    if (strcmp(cfg.backend, "tcp") && strcmp(cfg.backend, "verbs") && strcmp(cfg.backend, "sim")) {
        /* verbs named either way: "known: tcp, sim" beside --help's
         * "sim|tcp|verbs" read as a mistake (an outside tester). */
        fprintf(stderr, "%s: backend: unknown \"%s\" (known: tcp, verbs%s, sim)\n", d->cmd,
                cfg.backend, rkv_nic_find("verbs") ? "" : " (not in this build)");
        rc = -1;
    } else if (!strcmp(cfg.backend, "verbs") && !rkv_nic_find("verbs")) {
        /* It read "cannot run as processes on this host (tcp)", as if the
         * host lacked a device: the build lacks the backend. */
        fprintf(stderr,
                "%s: backend: this build has no verbs (configure with -DRKV_WITH_VERBS=ON, "
                "which needs rdma-core's libibverbs-dev and librdmacm-dev); it has tcp and sim\n",
                d->cmd);
        rc = -1;
    } else if (!rkv_nic_find(cfg.backend) || !strcmp(cfg.backend, "sim")) {
        fprintf(stderr, "%s: backend: \"%s\" cannot run as processes on this host (tcp%s)\n",
                d->cmd, cfg.backend, rkv_nic_find("verbs") ? ", verbs" : "");
        rc = -1;
    }
    /* Every server started here opens it: a missing one was found by each
     * server after the launch (one line per server, "exited with status 2
     * while the workers ran", exit 3) rather than checked once, before. */
    if (rc == 0 && cfg.durable_dir[0] &&
        rkv_file_check_dir(cfg.durable_dir, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: durable-dir (%s): %s\n", d->cmd, s->src[CMD_DURABLE_DIR], err);
        rc = -1;
    }
    struct rkv_scenario *sc = NULL; /* rkv demo: the workers' built-in scenario */
    /* And the timed phase's t_bench after them (timed.c): its segments
     * were left in /dev/shm by a Ctrl-C during that phase. */
    if (rc == 0 && !d->n_tensors && rkv_scenario_builtin(&cfg, wl.rows, wl.rounds, &sc) == 0)
        d->n_tensors = sc->n_tensors + 1;
    rkv_scenario_free(sc);
    snprintf(d->shm_prefix, sizeof(d->shm_prefix), "%s", cfg.shm_prefix);
    d->n_machines_shm = cfg.n_machines;
    free(cfg.machines);
    return rc;
}

/* Open files: this launcher holds a port per server (until they bind) and
 * a pipe per worker; a server holds a connection per worker and per server
 * it talks to, a worker one per server, each with a few of its own. The
 * soft limit is raised as far as the hard one allows (the children inherit
 * it); a hard limit below the need is refused now, naming it: past it the
 * launcher's ports ran out ("no 128 free consecutive ports") or its pipes
 * did (workers never started, the rest waited for them), and a server
 * turned workers away until their hello timed out. */
static int demo_fd_room(const struct demo *d)
{
    uint64_t need = (uint64_t)d->n_servers + d->n_workers + 64;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        fprintf(stderr,
                "%s: %u servers and %u workers need about %llu open files in a process (a "
                "connection per peer; this launcher a port per server and a pipe per worker), "
                "but the open-file limit is %llu (hard limit %llu): raise it (ulimit -n %llu)\n",
                d->cmd, d->n_servers, d->n_workers, (unsigned long long)need,
                (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
                (unsigned long long)need);
        return -1;
    }
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        fprintf(stderr, "%s: cannot raise the open-file limit to %llu: %s\n", d->cmd,
                (unsigned long long)need, strerror(errno));
        return -1;
    }
    return 0;
}

/* Sizes the run from the settings, checks them, and builds the flags every
 * child gets. */
/* A cluster this launcher starts is open to anyone who reaches its ports
 * unless it has a secret: each server said so (NO SHARED SECRET), and any
 * local user could join a CI run's cluster, write its tensors and stop it.
 * Unless the user gave one (--secret-file, RKV_SECRET_FILE or RKV_TOKEN,
 * which the children inherit), the launcher makes one for this run: 32
 * random bytes in a file only this user reads (mkstemp: 0600), in $TMPDIR
 * or /tmp, passed to every child by its flag and removed at the end. */
static int demo_secret(struct demo *d, struct cmd_settings *s)
{
    if (*s->val[CMD_SECRET_FILE] || getenv("RKV_TOKEN"))
        return 0;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    int len = snprintf(d->secret_file, sizeof(d->secret_file), "%s/rkv-secret.XXXXXX", tmp);
    if (len < 0 || (size_t)len >= sizeof(d->secret_file)) {
        fprintf(stderr, "%s: TMPDIR is too long for this run's secret file\n", d->cmd);
        d->secret_file[0] = 0;
        return -1;
    }
    int fd = mkstemp(d->secret_file);
    if (fd < 0) {
        fprintf(stderr, "%s: cannot make this run's secret file in %s: %s\n", d->cmd, tmp,
                strerror(errno));
        d->secret_file[0] = 0;
        return -1;
    }
    uint8_t key[32];
    char hex[2 * sizeof(key) + 2];
    ssize_t got = getrandom(key, sizeof(key), 0);
    for (size_t i = 0; i < sizeof(key); i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    hex[2 * sizeof(key)] = '\n';
    int ok = got == (ssize_t)sizeof(key) &&
             write(fd, hex, 2 * sizeof(key) + 1) == (ssize_t)(2 * sizeof(key) + 1);
    int err = errno;
    close(fd);
    if (!ok) {
        fprintf(stderr, "%s: cannot write this run's secret file %s: %s\n", d->cmd, d->secret_file,
                got == (ssize_t)sizeof(key) ? strerror(err) : "no random bytes");
        unlink(d->secret_file);
        d->secret_file[0] = 0;
        return -1;
    }
    s->val[CMD_SECRET_FILE] = d->secret_file;
    s->src[CMD_SECRET_FILE] = "launcher";
    return 0;
}

static int demo_configure(struct demo *d, struct cmd_settings *s)
{
    char err[512] = "";
    uint64_t w;
    uint32_t m32 = 0, spm32 = 0;
    if (demo_refuse_per_child(d, s) < 0)
        return -1;
    /* The cluster every node will build (num-servers: every machine's
     * servers together), unless a cluster file gives it. */
    if (!*s->val[CMD_CLUSTER] && rkv_cmd_local_shape(s, &m32, &spm32, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: %s\n", d->cmd, err);
        return -1;
    }
    uint64_t m = m32, spm = spm32;
    if (rkv_cmd_get_u64(s, CMD_NUM_WORKERS, &w, err, sizeof(err)) < 0 || w == 0 ||
        m * spm > DEMO_MAX_PROCS || w > DEMO_MAX_PROCS) {
        /* Say what was asked: a twin-sized scenario on tcp read as if the
         * file held no servers. */
        if (!err[0])
            snprintf(err, sizeof(err),
                     "%llu servers (%llu machines x %llu) and %llu workers: a run on this host "
                     "starts 1..%d of each, and at most 256 servers per machine%s",
                     (unsigned long long)(m * spm), (unsigned long long)m, (unsigned long long)spm,
                     (unsigned long long)w, DEMO_MAX_PROCS,
                     strcmp(d->cmd, "rkv run") ? ""
                                               : " (larger clusters: the twin, --backend sim)");
        fprintf(stderr, "%s: %s\n", d->cmd, err);
        return -1;
    }
    d->n_workers = (uint32_t)w;
    if (*s->val[CMD_CLUSTER]) { /* DGL's ip_config.txt: its ports, its servers */
        struct rkv_machine *ms;
        uint32_t nm, total = 0;
        /* Lines without a count get servers-per-machine, as every node
         * reads the file (rkv_cmd_build_config); num-servers is then the
         * file's total, checked there. It was the lines' count here, and
         * the launcher started servers the nodes had no id for. */
        uint64_t line_spm = 0;
        if (rkv_cmd_get_u64(s, CMD_SERVERS_PER_MACHINE, &line_spm, err, sizeof(err)) < 0 ||
            line_spm > 256) {
            fprintf(stderr, "%s: %s\n", d->cmd, err[0] ? err : "servers-per-machine: 1..256");
            return -1;
        }
        if (rkv_cmd_cluster_parse(s->val[CMD_CLUSTER], (uint32_t)line_spm, &ms, &nm, err,
                                  sizeof(err)) < 0) {
            fprintf(stderr, "%s: %s\n", d->cmd, err);
            return -1;
        }
        for (uint32_t i = 0; i < nm; i++)
            total += ms[i].servers;
        free(ms);
        if (total > DEMO_MAX_PROCS) {
            fprintf(stderr, "%s: more than %d servers\n", d->cmd, DEMO_MAX_PROCS);
            return -1;
        }
        d->machines = nm;
        d->n_servers = total;
    } else {
        d->machines = (uint32_t)m;
        d->n_servers = (uint32_t)(m * spm);
        d->servers_per_machine = (uint32_t)spm;
        /* The children get every setting: servers-per-machine as the count
         * found here, so that it agrees with num-servers over machines in
         * each (rkv demo's default 2 would not). */
        snprintf(d->bufs[CMD_SERVERS_PER_MACHINE], sizeof(d->bufs[0]), "%u", spm32);
        s->val[CMD_SERVERS_PER_MACHINE] = d->bufs[CMD_SERVERS_PER_MACHINE];
        d->hosts = strchr(s->val[CMD_HOST], ',') ? s->val[CMD_HOST] : NULL;
    }
    if (demo_fd_room(d) < 0)
        return -1;
    if (!*s->val[CMD_CLUSTER]) {
        if (strcmp(s->src[CMD_BASE_PORT], "default") == 0) {
            uint16_t base;
            if (rkv_launch_free_ports(d->n_servers, &base, d->port_hold) < 0) {
                fprintf(stderr, "%s: no %u free consecutive ports\n", d->cmd, d->n_servers);
                return -1;
            }
            d->n_port_hold = d->n_servers;
            snprintf(d->bufs[CMD_BASE_PORT], sizeof(d->bufs[0]), "%u", base);
            s->val[CMD_BASE_PORT] = d->bufs[CMD_BASE_PORT];
        }
    }
    if (demo_secret(d, s) < 0 || demo_check_settings(d, s) < 0)
        return -1;
    d->nargs = rkv_launch_args(s, d->args, DEMO_MAX_ARGS);
    assert(d->nargs > 0); /* DEMO_MAX_ARGS holds every setting */
    return 0;
}

static int demo_run(struct demo *dp, int argc, char **argv);
static void demo_start(struct demo *d, const char *cmd, const char *self);
static int demo_finish(struct demo *d, int code);

int rkv_launch_demo(int argc, char **argv, const char *self)
{
    struct demo *dp = calloc(1, sizeof(*dp));
    if (!dp)
        return RKV_EXIT_STORE;
    demo_start(dp, "rkv demo", self);
    int code = demo_finish(dp, demo_run(dp, argc, argv));
    for (uint32_t i = 0; i < DEMO_MAX_PROCS; i++)
        free(dp->out[i]);
    free(dp);
    return code;
}

/* Starts the servers and workers, waits for all of them and reads each
 * worker's RESULT line. Returns 1 when every process ended cleanly, -1 when
 * one could not be started. */
static int demo_cluster(struct demo *dp)
{
    int ok = 1;
    for (uint32_t i = 0; i < dp->n_servers; i++)
        if ((dp->servers[i] = demo_spawn(dp, "server", "--server-id", i, NULL, NULL)) < 0)
            return -1; /* said; demo_finish stops the others */
    for (uint32_t i = 0; i < dp->n_workers; i++)
        if ((dp->workers[i] = demo_spawn(dp, "worker", "--machine-id", i % dp->machines, NULL,
                                         &dp->out_fd[i])) < 0)
            return -1;
    demo_collect(dp);
    if (dp->signo)
        return 0; /* demo_finish stops them */
    for (uint32_t i = 0; i < dp->n_workers; i++) {
        memset(&dp->res[i], 0, sizeof(dp->res[i]));
        dp->status[i] = 0;
        if (dp->workers[i] <= 0 || demo_parse_result(dp->out[i], &dp->res[i], &dp->status[i]) < 0)
            ok = 0;
        int st = 0;
        if (dp->workers[i] > 0)
            waitpid(dp->workers[i], &st, 0);
        dp->workers[i] = 0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rkv demo: worker process %u exited with status %d\n", i,
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
            ok = 0;
        }
        if (dp->res[i].errors)
            ok = 0;
    }
    /* A worker that failed may be worker 0, which shuts the servers down:
     * the wait was the full 30 s, without a word, as the faults' is not. */
    if (demo_wait_servers(dp, ok ? 30 : 3))
        ok = 0;
    return ok;
}

static int demo_exit_code(const struct demo *dp, int ok)
{
    if (ok > 0)
        return RKV_EXIT_OK;
    for (uint32_t i = 0; i < dp->n_workers; i++)
        if (dp->res[i].errors)
            return RKV_EXIT_CHECK;
    return RKV_EXIT_STORE;
}

/* Starts a launch: d->cmd names it in messages, stopping signals are
 * watched from here on (demo_finish undoes it). */
static void demo_start(struct demo *d, const char *cmd, const char *self)
{
    d->cmd = cmd;
    d->self = self;
    d->gate_rd = d->gate_wr = -1;
    if (demo_signals_open(d) < 0)
        fprintf(stderr, "%s: cannot watch for signals (%s): a Ctrl-C may leave processes behind\n",
                cmd, strerror(errno));
}

/* Ends a launch whatever happened: no child left running, no shared memory
 * of the run left, no scratch directory; a stopping signal raised again.
 * code is what to return if that signal does not end the process. */
static int demo_finish(struct demo *d, int code)
{
    demo_stop_children(d);
    if (d->gate_rd >= 0)
        close(d->gate_rd);
    if (d->gate_wr >= 0)
        close(d->gate_wr);
    d->gate_rd = d->gate_wr = -1;
    while (d->n_port_hold > 0)
        close(d->port_hold[--d->n_port_hold]);
    demo_remove_segments(d);
    if (d->fault_dir[0] && d->nic_faults)
        rkv_file_remove_dir(d->fault_dir);
    d->fault_dir[0] = 0;
    if (d->durable_dir[0])
        rkv_file_remove_dir(d->durable_dir);
    d->durable_dir[0] = 0;
    if (d->secret_file[0]) /* after the children: a restarted server reads it */
        unlink(d->secret_file);
    d->secret_file[0] = 0;
    /* The trace is merged before a stopping signal is raised again, which
     * ends this process: its scratch directory stayed behind, and the
     * trace file was left empty. */
    if (d->trace) {
        d->trace_rc = rkv_trace_run_end(d->trace, d->trace_out, stdout);
        d->trace = NULL;
    }
    rkv_reaper_done(&d->reaper); /* all removed: it exits without a look */
    int signo = d->signo;
    demo_signals_close(d);
    return signo ? 128 + signo : code;
}

static int demo_run(struct demo *dp, int argc, char **argv)
{
    struct cmd_settings s;
    if (demo_setup(dp, &s, argc, argv) < 0)
        return RKV_EXIT_USAGE;
    printf("rkv demo: %u machines, %u servers, %u workers, %s over loopback\n", dp->machines,
           dp->n_servers, dp->n_workers, s.val[CMD_BACKEND]);
    fflush(stdout);
    int ok = demo_cluster(dp);
    if (dp->signo || ok < 0)
        return RKV_EXIT_STORE;
    demo_report(dp, strtoull(s.val[CMD_VALUE_BYTES], NULL, 0));
    ok = demo_verdict(dp, &s, ok);
    return demo_exit_code(dp, ok);
}

int rkv_launch_demo_measure(const char *self, int argc, char **argv, struct rkv_launch_figures *f_p)
{
    struct demo *dp = calloc(1, sizeof(*dp));
    struct cmd_settings s;
    int code = RKV_EXIT_STORE;
    if (!dp)
        return code;
    demo_start(dp, "rkv demo", self);
    code = RKV_EXIT_USAGE;
    if (demo_setup(dp, &s, argc, argv) < 0)
        goto out;
    /* The servers inherit stdout: nothing of theirs may land between the
     * figures this process prints. */
    fflush(stdout);
    dp->child_err = tmpfile();
    int ok = demo_cluster(dp);
    code = demo_exit_code(dp, ok);
    if (code == RKV_EXIT_OK)
        demo_figures(dp, f_p);
    else if (dp->child_err) { /* what the children said about it */
        char buf[4096];
        size_t n;
        rewind(dp->child_err);
        while ((n = fread(buf, 1, sizeof(buf), dp->child_err)) > 0)
            fwrite(buf, 1, n, stderr);
    }
    if (dp->child_err)
        fclose(dp->child_err);
out:
    code = demo_finish(dp, code);
    for (uint32_t i = 0; i < DEMO_MAX_PROCS; i++)
        free(dp->out[i]);
    free(dp);
    return code;
}

/* ---- a scenario file on a real backend ---- */

int rkv_launch_load(const char *file, struct rkv_scenario **sc)
{
    char err[512];
    if (rkv_scenario_load(file, sc, err, sizeof(err)) < 0 ||
        rkv_oracle_check_scenario(*sc, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return -1;
    }
    return 0;
}

/* The scenario's cluster: flags that would size another one are refused
 * (on every backend), not silently replaced. */
int rkv_launch_refuse_sized(const struct cmd_settings *s)
{
    static const enum cmd_key sized[] = {CMD_MACHINES,    CMD_SERVERS_PER_MACHINE,
                                         CMD_NUM_SERVERS, CMD_NUM_WORKERS,
                                         CMD_CLUSTER,     CMD_SCENARIO,
                                         CMD_ROWS,        CMD_VALUE_BYTES,
                                         CMD_ROUNDS};
    int i = rkv_cmd_first_flag(s, sized, sizeof(sized) / sizeof(sized[0]));
    if (i >= 0) {
        fprintf(stderr, "rkv run: %s: the scenario file decides the cluster and workload\n",
                rkv_cmd_key_flag(sized[i]));
        return -1;
    }
    return 0;
}

static int run_configure(struct demo *d, struct cmd_settings *s, const struct rkv_scenario *sc,
                         const char *file)
{
    s->val[CMD_NUM_SERVERS] = "";
    s->val[CMD_SCENARIO] = file;
    /* The scenario's seed (or --seed's, already in sc): a child given
     * none would take the file's, but every setting is passed. */
    snprintf(d->seed_buf, sizeof(d->seed_buf), "%llu", (unsigned long long)sc->seed);
    s->val[CMD_SEED] = d->seed_buf;
    snprintf(d->bufs[CMD_MACHINES], sizeof(d->bufs[0]), "%u", sc->machines);
    snprintf(d->bufs[CMD_SERVERS_PER_MACHINE], sizeof(d->bufs[0]), "%u", sc->servers_per_machine);
    snprintf(d->bufs[CMD_NUM_WORKERS], sizeof(d->bufs[0]), "%u", rkv_scenario_workers(sc));
    s->val[CMD_MACHINES] = d->bufs[CMD_MACHINES];
    s->val[CMD_SERVERS_PER_MACHINE] = d->bufs[CMD_SERVERS_PER_MACHINE];
    s->val[CMD_NUM_WORKERS] = d->bufs[CMD_NUM_WORKERS];
    s->val[CMD_CLUSTER] = "";
    if (sc->tcp_base_port && !strcmp(s->src[CMD_BASE_PORT], "default")) {
        snprintf(d->bufs[CMD_BASE_PORT], sizeof(d->bufs[0]), "%u", sc->tcp_base_port);
        s->val[CMD_BASE_PORT] = d->bufs[CMD_BASE_PORT];
        s->src[CMD_BASE_PORT] = "scenario";
    }
    d->n_tensors = sc->n_tensors;
    /* A durable scenario without --durable-dir: a scratch directory of
     * this run's, removed at its end. */
    if (sc->durable && !*s->val[CMD_DURABLE_DIR]) {
        snprintf(d->durable_dir, sizeof(d->durable_dir), "/tmp/rkv-durable.XXXXXX");
        if (!mkdtemp(d->durable_dir)) {
            fprintf(stderr, "rkv run: cannot make a snapshot directory: %s\n", strerror(errno));
            d->durable_dir[0] = 0;
            return -1;
        }
        s->val[CMD_DURABLE_DIR] = d->durable_dir;
    }
    if (sc->retry_ms && !strcmp(s->src[CMD_RETRY_MS], "default")) {
        snprintf(d->retry_buf, sizeof(d->retry_buf), "%u", sc->retry_ms);
        s->val[CMD_RETRY_MS] = d->retry_buf;
    }
    return demo_configure(d, s);
}

/* The crash faults of sc as processes to kill (targets were checked when
 * the scenario was loaded; workers are named in spawn order). The NIC
 * faults are the children's own business: they only need a place to report. */
static int run_plan_faults(struct demo *d, const struct rkv_scenario *sc, const char *backend)
{
    d->client0_phase = -1;
    d->gate_done = -1;
    for (uint32_t i = 0; i < sc->n_faults; i++) {
        const struct rkv_sc_fault *sf = &sc->faults[i];
        if (!strcmp(sf->kind, "slow_cpu")) {
            fprintf(stderr,
                    "rkv run: %s: faults[%u]: slow_cpu is modelled by the twin only (run it "
                    "with --backend sim); on %s a slow node is a real slow node\n",
                    sc->path, i, backend);
            return RKV_EXIT_USAGE;
        }
        if (strcmp(sf->kind, "crash") != 0) {
            d->nic_faults = 1;
            continue;
        }
        struct demo_fault *f = &d->faults[d->n_faults];
        unsigned m, l, w;
        snprintf(f->name, sizeof(f->name), "%s", sf->target);
        f->at_s = sf->at_s;
        f->after_phase = sf->after_phase[0] ? (int)sf->after_phase_ix : -1;
        /* The file names phases: "after phase 3" (1-based) matched none. */
        snprintf(f->after_name, sizeof(f->after_name), "%s", sf->after_phase);
        f->restart_after_s = sf->restart_after_s;
        f->machine_lost = sf->machine_lost;
        if (sscanf(f->name, "s%u.%u", &m, &l) == 2) {
            f->is_server = 1;
            f->machine = m;
            f->idx = m * sc->servers_per_machine + l;
        } else if (sscanf(f->name, "w%u", &w) == 1) {
            f->idx = w;
        } else {
            continue;
        }
        d->n_faults++;
    }
    int gated = 0;
    for (uint32_t i = 0; i < d->n_faults; i++)
        gated |= d->faults[i].after_phase >= 0;
    int gate[2];
    if (gated) {
        if (pipe2(gate, O_CLOEXEC) < 0) {
            fprintf(stderr, "rkv run: cannot make the phase gate's pipe: %s\n", strerror(errno));
            return RKV_EXIT_STORE;
        }
        d->gate_rd = gate[0];
        d->gate_wr = gate[1];
    }
    snprintf(d->fault_dir, sizeof(d->fault_dir), "/tmp/rkv-faults.XXXXXX");
    if (d->nic_faults && !mkdtemp(d->fault_dir)) {
        fprintf(stderr, "rkv run: cannot make a directory for fault counts: %s\n", strerror(errno));
        return RKV_EXIT_STORE;
    }
    if (!d->nic_faults)
        d->fault_dir[0] = 0;
    return 0;
}

/* Reads back what each faulted node's NIC did; 1 when every NIC fault of
 * the scenario touched at least one message. Removes the files. */
static int run_fault_stats(struct demo *d, const struct rkv_scenario *sc, uint64_t *broken_p)
{
    int fired = 1;
    *broken_p = 0;
    for (uint32_t i = 0; i < sc->n_faults; i++) {
        const struct rkv_sc_fault *sf = &sc->faults[i];
        uint32_t k = rkv_scenario_nic_fault_index(sc, i);
        if (k == UINT32_MAX)
            continue; /* crash, slow_cpu */
        char path[128], line[1024] = "";
        snprintf(path, sizeof(path), "%s/%s", d->fault_dir, sf->target);
        FILE *f = fopen(path, "r");
        unsigned long long msgs = 0, drop = 0, dly = 0, held = 0, brk = 0, acted = 0;
        if (f && fgets(line, sizeof(line), f)) {
            sscanf(line,
                   "FAULTSTAT node=%*s messages=%llu dropped=%llu delayed=%llu held=%llu "
                   "broken=%llu",
                   &msgs, &drop, &dly, &held, &brk);
            const char *a = strstr(line, " acted=");
            for (uint32_t j = 0; a && j <= k; j++) {
                char *end;
                acted = strtoull(a + (j ? 1 : 7), &end, 10);
                a = *end == ',' ? end : NULL;
                if (j < k && !a)
                    acted = 0;
            }
        }
        if (f)
            fclose(f); /* unlinked below: two faults on one node read its one file */
        fired &= acted > 0;
        if (k == 0) /* the node's counts, once */
            *broken_p += brk;
        size_t l = strlen(d->fault_log);
        snprintf(d->fault_log + l, sizeof(d->fault_log) - l,
                 "%s%s %s: acted on %llu messages (the node: %llu messages in a fault window, "
                 "%llu transmissions lost, %llu delayed, %llu held by the link, %llu connections "
                 "broken)",
                 l ? "; " : "", sf->kind, sf->target, acted, msgs, drop, dly, held, brk);
    }
    for (uint32_t i = 0; i < sc->n_faults; i++) {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s", d->fault_dir, sc->faults[i].target);
        unlink(path);
    }
    rmdir(d->fault_dir);
    return fired;
}

/* Waits for the workers; with faults, a survivor may end on a named store
 * error (exit 3), and the crashed ones were reaped when killed. */
static int run_reap_workers(struct demo *d, uint32_t *survivor_errors)
{
    int ok = 1;
    for (uint32_t i = 0; i < d->n_workers; i++) {
        int st = 0;
        if (d->workers[i] == 0 && d->n_faults)
            continue;
        if (d->workers[i] > 0)
            waitpid(d->workers[i], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if ((d->n_faults || d->nic_faults) && d->workers[i] > 0 && code == RKV_EXIT_STORE) {
            (*survivor_errors)++;
            d->workers[i] = 0;
            continue;
        }
        if (d->workers[i] <= 0 || code != 0) {
            fprintf(stderr, "rkv run: worker process %u exited with status %d\n", i, code);
            ok = 0;
        }
        d->workers[i] = 0;
    }
    return ok;
}

static int run_cluster(struct demo *d, const struct rkv_scenario *sc, const char *backend,
                       struct rkv_report *r_p)
{
    d->t0_s = rkv_timed_now_s();
    int rc = run_plan_faults(d, sc, backend);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < d->n_servers; i++) {
        char node[32];
        snprintf(node, sizeof(node), "s%u.%u", i / sc->servers_per_machine,
                 i % sc->servers_per_machine);
        d->servers[i] = demo_spawn(d, "server", "--server-id", i, node, NULL);
        if (d->servers[i] < 0)
            return RKV_EXIT_STORE; /* said; demo_finish stops the others */
    }
    for (uint32_t i = 0; i < d->n_workers; i++) {
        char node[32];
        snprintf(node, sizeof(node), "w%u", i);
        d->workers[i] = demo_spawn(d, "worker", "--machine-id", rkv_scenario_worker_machine(sc, i),
                                   node, &d->out_fd[i]);
        if (d->workers[i] < 0)
            return RKV_EXIT_STORE;
    }
    demo_collect(d);
    if (d->signo)
        return RKV_EXIT_STORE; /* demo_finish stops the children */
    uint32_t survivor_errors = 0;
    int procs_ok = run_reap_workers(d, &survivor_errors);
    /* A crashed worker 0, or one whose connection a fault broke, cannot
     * shut the servers down: do not wait long. */
    int faulty = d->n_faults || d->nic_faults;
    int servers_stopped = demo_wait_servers(d, faulty || d->server_failed || !procs_ok ? 3 : 30);
    if (d->server_failed)
        procs_ok = 0;
    if (d->signo)
        return RKV_EXIT_STORE;
    double t1_s = rkv_timed_now_s();
    struct rkv_report r;
    if (rkv_report_collect(&r, sc, d->out, d->n_workers) < 0)
        return RKV_EXIT_STORE;
    r.processes_ok = procs_ok;
    r.wall_s = t1_s - d->t0_s;
    /* The verdict said "a process failed (its error is on stderr)". */
    if (d->server_failed && !r.node_error[0])
        snprintf(r.node_error, sizeof(r.node_error), "%s", d->server_error);
    if (d->n_faults || d->nic_faults) {
        uint64_t broken = 0;
        r.fault_run = 1;
        r.faults_fired = d->nic_faults ? run_fault_stats(d, sc, &broken) : 1;
        uint32_t gone = 0; /* crashed and not restarted */
        for (uint32_t i = 0; i < d->n_faults; i++) {
            struct demo_fault *f = &d->faults[i];
            /* A crash that landed as the servers were shutting down was
             * restarted after the SHUTDOWN: its server waited for peers
             * that had gone, the launcher stopped it, and the verdict read
             * "a process failed" with no reason, where another run of the
             * same file passed or said the fault did not fire (an outside
             * tester). Its restart came too late: it did not fire. */
            f->late = f->is_server && f->restarted && d->stopped[f->idx];
            if (f->late) {
                size_t l = strlen(d->fault_log);
                snprintf(d->fault_log + l, sizeof(d->fault_log) - l,
                         "%s%s, restarted, never heard the servers' SHUTDOWN (its restart came as "
                         "they stopped?) and was stopped by the launcher",
                         l ? "; " : "", f->name);
            }
            r.faults_fired &= f->fired && (f->restart_after_s <= 0 || (f->restarted && !f->late));
            gone += f->restart_after_s <= 0;
            /* The verdict said "see faults: above", where only the ones
             * that fired were (an outside tester). */
            size_t l = strlen(d->fault_log);
            if (!f->fired && l < sizeof(d->fault_log))
                snprintf(d->fault_log + l, sizeof(d->fault_log) - l, "%scrash %s: did not fire",
                         l ? "; " : "", f->name);
        }
        /* Without a node gone for good or a broken connection nothing may be
         * lost: every worker must finish every phase. */
        r.must_complete = !gone && !broken;
        r.survivor_errors = survivor_errors;
        snprintf(r.faults, sizeof(r.faults), "%s", d->fault_log);
    }
    /* Servers the launcher had to stop are a failure unless a node was
     * gone or a connection broke: then the SHUTDOWN may have had no way
     * to them (the twin stops them too). It was a FAIL without a reason
     * whenever the broken connection was worker 0's. */
    /* A late restart's stop is its fault's not firing, said above. */
    int stopped_other = 0;
    for (uint32_t i = 0; i < d->n_servers; i++) {
        int late = 0;
        for (uint32_t k = 0; k < d->n_faults; k++)
            late |= d->faults[k].late && d->faults[k].is_server && d->faults[k].idx == i;
        stopped_other |= d->stopped[i] && !late;
    }
    if (servers_stopped && stopped_other && (!r.fault_run || r.must_complete))
        r.processes_ok = 0; /* demo_wait_servers said which */
    *r_p = r;
    return rkv_launch_verdict(r_p);
}

int rkv_launch_verdict(const struct rkv_report *r)
{
    int wrong = 0;
    for (uint32_t p = 0; p < r->sc->n_phases; p++)
        wrong |= r->phase[p].errors > 0;
    return rkv_report_passed(r) ? RKV_EXIT_OK : wrong ? RKV_EXIT_CHECK : RKV_EXIT_STORE;
}

int rkv_launch_run(struct rkv_scenario *sc, const char *backend, const struct rkv_launch_opts *o,
                   struct rkv_report *r_p)
{
    memset(r_p, 0, sizeof(*r_p));
    struct demo *d = calloc(1, sizeof(*d));
    if (!d)
        return RKV_EXIT_STORE;
    int code = RKV_EXIT_USAGE;
    struct rkv_trace_run trun;
    char err[512];
    /* payloadless thins rows in the twin only: here every worker holds the
     * declared rows' oracle and requests (the loader checked thin ones). */
    if (sc->sim_payloadless && rkv_scenario_check_size(sc, 0, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        free(d);
        return RKV_EXIT_USAGE;
    }
    if (o->trace && rkv_trace_run_start(&trun, o->trace, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        free(d);
        return RKV_EXIT_USAGE;
    }
    d->trace = o->trace ? &trun : NULL;
    d->trace_out = o->trace;
    demo_start(d, "rkv run", o->self);
    d->exe = o->exe;
    if (run_configure(d, o->settings, sc, o->file ? o->file : sc->path) == 0) {
        printf("rkv run: %s: %u servers, %u workers over %s, one process each on this host\n",
               o->file ? o->file : sc->path, d->n_servers, d->n_workers, backend);
        fflush(stdout);
        code = run_cluster(d, sc, backend, r_p);
    }
    code = demo_finish(d, code); /* ends the trace too */
    if (o->trace && d->trace_rc < 0 && code == RKV_EXIT_OK)
        code = RKV_EXIT_STORE;
    for (uint32_t i = 0; i < DEMO_MAX_PROCS; i++)
        free(d->out[i]);
    free(d);
    return code;
}

int rkv_launch_report(struct rkv_scenario *sc, const struct rkv_launch_opts *o, const char *out_dir,
                      int plot)
{
    const char *backend = o->settings->val[CMD_BACKEND];
    struct rkv_report r;
    int code = rkv_launch_run(sc, backend, o, &r);
    if (!r.sc)
        return code;
    rkv_report_print(&r, stdout, backend);
    if (out_dir && rkv_report_write(&r, out_dir, backend) < 0) {
        fprintf(stderr, "rkv run: cannot write the report into %s\n", out_dir);
        code = code == RKV_EXIT_OK ? RKV_EXIT_STORE : code; /* the report was asked for */
    }
    /* Plots that were asked for and not made are the run's failure, as a
     * --trace that could not be written is (it exited 0). */
    if (plot && rkv_report_plot_and_say(&r, out_dir, backend) < 0 && code == RKV_EXIT_OK)
        code = RKV_EXIT_STORE;
    rkv_report_free(&r);
    return code;
}

int rkv_launch_settings(struct rkv_scenario *sc, struct cmd_settings *s, int argc, char **argv)
{
    char err[512];
    if (rkv_cmd_settings_load(s, argc, argv, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return -1;
    }
    if (rkv_launch_refuse_sized(s) < 0)
        return -1;
    uint64_t seed;
    if (strcmp(s->src[CMD_SEED], "default") != 0) {
        if (rkv_cmd_get_u64(s, CMD_SEED, &seed, err, sizeof(err)) < 0) {
            fprintf(stderr, "rkv run: %s\n", err);
            return -1;
        }
        sc->seed = seed; /* the workers get the same --seed */
    }
    return 0;
}

int rkv_launch_twin_store(const struct cmd_settings *s, const struct rkv_scenario *sc,
                          int refuse_owned, struct rkv_config *cfg, unsigned *set, char *err,
                          size_t err_len)
{
    /* The twin names its own machines, ports and segments, and models the
     * network from the scenario's sim: section. */
    static const enum cmd_key owned[] = {CMD_HOST,           CMD_BASE_PORT,       CMD_SHM_PREFIX,
                                         CMD_DURABLE_DIR,    CMD_DISCOVER,        CMD_NODE_HOST,
                                         CMD_INTERFACE,      CMD_VERBS_DEV,       CMD_VERBS_TOS,
                                         CMD_VERBS_SL,       CMD_VERBS_GID_INDEX, CMD_VERBS_MTU,
                                         CMD_VERBS_SRQ_DEPTH};
    int given = refuse_owned ? rkv_cmd_first_flag(s, owned, sizeof(owned) / sizeof(owned[0])) : -1;
    if (given >= 0) {
        snprintf(err, err_len,
                 "%s has no meaning in the twin (it names its own hosts, ports and "
                 "segments; the scenario's sim: section is its network): drop it, or run "
                 "on a real backend (--backend tcp|verbs)",
                 rkv_cmd_key_flag(owned[given]));
        return -1;
    }
    if (rkv_cmd_build_config(s, cfg, err, err_len) < 0)
        return -1;
    if (sc->retry_ms && !strcmp(s->src[CMD_RETRY_MS], "default"))
        cfg->retry_ms = sc->retry_ms; /* as run_configure gives every node */
    *set = (strcmp(s->src[CMD_RX_DEPTH], "default") ? RKV_LAUNCH_SET_RX_DEPTH : 0u) |
           (strcmp(s->src[CMD_CTRL_BUF_BYTES], "default") ? RKV_LAUNCH_SET_CTRL_BUF : 0u);
    return 0;
}

int rkv_launch_file(const char *file, int argc, char **argv, const char *out_dir, int plot,
                    const char *self)
{
    struct rkv_scenario *sc = NULL;
    struct cmd_settings s;
    int code = RKV_EXIT_USAGE;
    if (rkv_launch_load(file, &sc) == 0 && rkv_launch_settings(sc, &s, argc, argv) == 0) {
        struct rkv_launch_opts o = {.self = self, .settings = &s, .file = file};
        code = rkv_launch_report(sc, &o, out_dir, plot);
    }
    rkv_scenario_free(sc);
    return code;
}
