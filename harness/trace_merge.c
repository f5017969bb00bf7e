/* `rkv run --trace` on real backends: the clock server the children sync
 * against, and the merge of their files (harness/trace_merge.h). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "harness/trace_merge.h"
#include "port/trace.h"
#include "rkv.h"
#include "util/util.h"

/* Limits: a run has at most this many nodes (the launcher's own cap is
 * lower) and a node this many threads that wrote spans. */
#define TM_MAX_NODES 4096u
#define TM_MAX_TIDS 64u

static uint64_t tm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the clock server: answers each ping with this process's clock ---- */

static void *tm_clock_main(void *arg)
{
    struct rkv_trace_run *tr = arg;
    while (!atomic_load(&tr->stop)) {
        struct pollfd p = {.fd = tr->fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        uint64_t ping[2];
        struct sockaddr_in from;
        socklen_t fl = sizeof(from);
        ssize_t k = recvfrom(tr->fd, ping, sizeof(ping), 0, (struct sockaddr *)&from, &fl);
        if (k != (ssize_t)sizeof(ping) || ping[0] != RKV_TRACE_PING_MAGIC)
            continue;
        uint64_t pong[3] = {RKV_TRACE_PING_MAGIC, ping[1], tm_now_ns()};
        (void)sendto(tr->fd, pong, sizeof(pong), 0, (struct sockaddr *)&from, fl);
    }
    return NULL;
}

int rkv_trace_run_start(struct rkv_trace_run *tr, const char *out_path, char *err, size_t err_len)
{
    memset(tr, 0, sizeof(*tr));
    tr->fd = -1;
    /* A file that cannot be written is said now, not after the run. */
    FILE *probe = fopen(out_path, "a");
    if (!probe)
        return rkv_errf(err, err_len, -RKV_EIO, "--trace: cannot write %s: %s", out_path,
                        strerror(errno));
    fclose(probe);
    /* Where the run's other scratch goes (the secret file): TMPDIR. */
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    if ((size_t)snprintf(tr->dir, sizeof(tr->dir), "%s/rkv-trace.XXXXXX", tmp) >= sizeof(tr->dir))
        snprintf(tr->dir, sizeof(tr->dir), "/tmp/rkv-trace.XXXXXX");
    if (!mkdtemp(tr->dir)) {
        tr->dir[0] = 0;
        return rkv_errf(err, err_len, -RKV_EIO, "--trace: cannot make a directory: %s",
                        strerror(errno));
    }
    /* Loopback: the children run on this host. A launcher of several hosts
     * binds an address they reach; the exchange is the same. */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    tr->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (tr->fd < 0 || bind(tr->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(tr->fd, (struct sockaddr *)&sa, &sl) < 0) {
        int e = errno;
        rkv_trace_run_finish(tr, NULL, NULL, NULL, 0);
        return rkv_errf(err, err_len, -RKV_EIO, "--trace: clock server socket: %s", strerror(e));
    }
    tr->port = ntohs(sa.sin_port);
    atomic_store(&tr->stop, 0);
    /* The clock thread takes no signal: the launcher reads SIGINT, SIGTERM
     * and SIGHUP from a signalfd with them blocked (launch.c), but only
     * in the threads that blocked them; made before that, this thread took
     * a Ctrl-C with the default action, and the launcher died without
     * stopping its processes, leaving the trace's directory and an empty
     * trace file. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int prc = pthread_create(&tr->thread, NULL, tm_clock_main, tr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc != 0) {
        rkv_trace_run_finish(tr, NULL, NULL, NULL, 0);
        return rkv_errf(err, err_len, -RKV_EIO, "--trace: cannot start the clock server");
    }
    tr->running = 1;
    return 0;
}

void rkv_trace_run_child_env(const struct rkv_trace_run *tr, const char *node)
{
    char path[256], clock[32], name[32];
    /* A restarted node is a process of its own: node-r2, node-r3, ... */
    snprintf(name, sizeof(name), "%s", node);
    snprintf(path, sizeof(path), "%s/%s.jsonl", tr->dir, name);
    for (unsigned k = 2; access(path, F_OK) == 0 && k < 1000; k++) {
        snprintf(name, sizeof(name), "%.20s-r%u", node, k);
        snprintf(path, sizeof(path), "%s/%s.jsonl", tr->dir, name);
    }
    snprintf(clock, sizeof(clock), "127.0.0.1:%u", tr->port);
    setenv("RKV_TRACE_FILE", path, 1);
    setenv("RKV_TRACE_NODE", name, 1);
    setenv("RKV_TRACE_CLOCK", clock, 1);
}

/* Files by node name (their name less ".jsonl"): s0.1 before s0.1-r2. */
static int tm_cmp_str(const void *a, const void *b)
{
    char x[128], y[128];
    snprintf(x, sizeof(x), "%s", *(char *const *)a);
    snprintf(y, sizeof(y), "%s", *(char *const *)b);
    char *dx = strstr(x, ".jsonl"), *dy = strstr(y, ".jsonl");
    if (dx)
        *dx = 0;
    if (dy)
        *dy = 0;
    return strverscmp(x, y);
}

int rkv_trace_run_finish(struct rkv_trace_run *tr, const char *out_path,
                         struct rkv_trace_merge_stats *st_p, char *err, size_t err_len)
{
    if (tr->running) {
        atomic_store(&tr->stop, 1);
        pthread_join(tr->thread, NULL);
        tr->running = 0;
    }
    if (tr->fd >= 0)
        close(tr->fd);
    tr->fd = -1;
    if (!tr->dir[0])
        return 0;
    char *files[TM_MAX_NODES];
    size_t n = 0;
    DIR *d = opendir(tr->dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".jsonl") || n >= TM_MAX_NODES)
            continue;
        if (asprintf(&files[n], "%s/%s", tr->dir, e->d_name) >= 0)
            n++;
    }
    if (d)
        closedir(d);
    int rc = 0;
    if (out_path) {
        qsort(files, n, sizeof(*files), tm_cmp_str);
        rc = n ? rkv_trace_merge(files, n, out_path, st_p, err, err_len)
               : rkv_errf(err, err_len, -RKV_EIO, "--trace: no process wrote a trace");
    }
    for (size_t i = 0; i < n; i++) {
        unlink(files[i]);
        free(files[i]);
    }
    rmdir(tr->dir);
    tr->dir[0] = 0;
    return rc;
}

/* ---- the merge ---- */

struct tm_tid {
    json_int_t tid;
    int has_op, has_recv;
};

struct tm_node {
    const char *path;
    char name[32];
    int64_t offset_ns;
    double rtt_us;
    int clocked;
    struct tm_tid tids[TM_MAX_TIDS];
    uint32_t n_tids;
};

/* Growing arrays of flow ids. */
struct tm_ids {
    uint64_t *v;
    size_t n, cap;
};

static int tm_ids_add(struct tm_ids *a, uint64_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 1024;
        uint64_t *v = realloc(a->v, cap * sizeof(*v));
        if (!v)
            return -RKV_ENOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

static int tm_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* How many of ends have a start (both sorted; a start serves one end). */
static uint64_t tm_matched(struct tm_ids *starts, struct tm_ids *ends)
{
    if (!starts->n || !ends->n)
        return 0; /* (and qsort may not be given a NULL array) */
    qsort(starts->v, starts->n, sizeof(uint64_t), tm_cmp_u64);
    qsort(ends->v, ends->n, sizeof(uint64_t), tm_cmp_u64);
    uint64_t m = 0;
    for (size_t i = 0, j = 0; i < starts->n && j < ends->n;) {
        if (starts->v[i] == ends->v[j]) {
            m++, i++, j++;
        } else if (starts->v[i] < ends->v[j]) {
            i++;
        } else {
            j++;
        }
    }
    return m;
}

static struct tm_tid *tm_tid_of(struct tm_node *nd, json_int_t tid)
{
    for (uint32_t i = 0; i < nd->n_tids; i++)
        if (nd->tids[i].tid == tid)
            return &nd->tids[i];
    if (nd->n_tids == TM_MAX_TIDS)
        return NULL;
    nd->tids[nd->n_tids] = (struct tm_tid){.tid = tid};
    return &nd->tids[nd->n_tids++];
}

/* Each line of a node's file as JSON (NULL for a line that is not). */
typedef int (*tm_line_fn)(void *user, struct tm_node *nd, json_t *ev);

static int tm_each_line(struct tm_node *nd, tm_line_fn fn, void *user, uint64_t *bad_p, char *err,
                        size_t err_len)
{
    FILE *f = fopen(nd->path, "r");
    if (!f)
        return rkv_errf(err, err_len, -RKV_EIO, "--trace: cannot read %s: %s", nd->path,
                        strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        json_t *ev = json_loads(line, 0, NULL);
        if (!json_is_object(ev)) {
            (*bad_p)++;
            json_decref(ev);
            continue;
        }
        rc = fn(user, nd, ev);
        json_decref(ev);
    }
    free(line);
    fclose(f);
    return rc;
}

struct tm_scan {
    int64_t base_ns; /* the earliest event, on the launcher's clock */
    int any;
    uint64_t lines;
    uint32_t cut; /* nodes whose file reached its limit */
};

/* First pass: the node's clock line, its threads, the earliest event. */
static int tm_scan_line(void *user, struct tm_node *nd, json_t *ev)
{
    struct tm_scan *sc = user;
    const char *ph = json_string_value(json_object_get(ev, "ph"));
    if (!ph)
        return 0;
    if (!strcmp(ph, "cut")) {
        sc->cut++;
        return 0;
    }
    if (!strcmp(ph, "clock")) {
        const char *name = json_string_value(json_object_get(ev, "node"));
        snprintf(nd->name, sizeof(nd->name), "%s", name ? name : "?");
        nd->offset_ns = json_integer_value(json_object_get(ev, "offset_ns"));
        nd->rtt_us = (double)json_integer_value(json_object_get(ev, "rtt_ns")) / 1e3;
        nd->clocked = 1;
        return 0;
    }
    if (!nd->clocked) /* the clock line comes first: without it, no place in time */
        return 0;
    sc->lines++;
    int64_t t = json_integer_value(json_object_get(ev, "t")) + nd->offset_ns;
    if (!sc->any || t < sc->base_ns)
        sc->base_ns = t;
    sc->any = 1;
    struct tm_tid *td = tm_tid_of(nd, json_integer_value(json_object_get(ev, "tid")));
    const char *cat = json_string_value(json_object_get(ev, "cat"));
    const char *name = json_string_value(json_object_get(ev, "name"));
    if (td && cat && !strcmp(cat, "op"))
        td->has_op = 1;
    if (td && name && !strncmp(name, "recv ", 5))
        td->has_recv = 1;
    return 0;
}

struct tm_out {
    FILE *f;
    int64_t base_ns;
    uint32_t pid;
    struct tm_ids starts, ends;
    struct rkv_trace_merge_stats *st;
};

static int tm_emit(struct tm_out *o, json_t *ev)
{
    if (!ev)
        return -RKV_ENOMEM;
    fprintf(o->f, "%s\n", o->st->events ? "," : "");
    int rc = json_dumpf(ev, o->f, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(ev);
    o->st->events++;
    return rc < 0 ? -RKV_EIO : 0;
}

/* Second pass: each event on the launcher's clock, in microseconds since
 * the earliest one, under the node's pid. */
static int tm_write_line(void *user, struct tm_node *nd, json_t *ev)
{
    struct tm_out *o = user;
    const char *ph = json_string_value(json_object_get(ev, "ph"));
    json_t *tid = json_object_get(ev, "tid"), *t = json_object_get(ev, "t");
    if (!ph || !json_is_integer(tid) || !json_is_integer(t))
        return 0; /* the clock line, or a line of another kind */
    double ts_us = (double)(json_integer_value(t) + nd->offset_ns - o->base_ns) / 1e3;
    json_t *out = json_pack("{s:s, s:I, s:I, s:f}", "ph", ph, "pid", (json_int_t)o->pid, "tid",
                            json_integer_value(tid), "ts", ts_us);
    if (!out)
        return -RKV_ENOMEM;
    if (!strcmp(ph, "X")) {
        o->st->spans++;
        json_t *args = json_object_get(ev, "args");
        json_object_set(out, "name", json_object_get(ev, "name"));
        json_object_set(out, "cat", json_object_get(ev, "cat"));
        json_object_set_new(out, "dur",
                            json_real((double)json_integer_value(json_object_get(ev, "d")) / 1e3));
        if (json_is_object(args))
            json_object_set(out, "args", args);
    } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
        uint64_t id = (uint64_t)json_integer_value(json_object_get(ev, "id"));
        int start = ph[0] == 's';
        int rc = tm_ids_add(start ? &o->starts : &o->ends, id);
        if (rc < 0) {
            json_decref(out);
            return rc;
        }
        *(start ? &o->st->flow_starts : &o->st->flow_ends) += 1;
        json_object_set_new(out, "name", json_string("msg"));
        json_object_set_new(out, "cat", json_string("flow"));
        json_object_set_new(out, "id", json_integer((json_int_t)id));
        if (!start) /* binds to the span around it: the receiving handler */
            json_object_set_new(out, "bp", json_string("e"));
    } else {
        json_decref(out);
        return 0;
    }
    return tm_emit(o, out);
}

/* process_name / process_sort_index / thread_name of one node. */
static int tm_write_names(struct tm_out *o, const struct tm_node *nd)
{
    char pname[64];
    snprintf(pname, sizeof(pname), "%s", nd->name);
    int rc = tm_emit(o, json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "name", "process_name", "ph",
                                  "M", "pid", (json_int_t)o->pid, "tid", (json_int_t)0, "args",
                                  "name", pname));
    if (rc == 0)
        rc = tm_emit(o, json_pack("{s:s, s:s, s:I, s:I, s:{s:I}}", "name", "process_sort_index",
                                  "ph", "M", "pid", (json_int_t)o->pid, "tid", (json_int_t)0,
                                  "args", "sort_index", (json_int_t)o->pid));
    for (uint32_t i = 0; rc == 0 && i < nd->n_tids; i++) {
        const struct tm_tid *td = &nd->tids[i];
        char tname[64];
        /* The application thread makes the calls (op spans); the progress
         * task receives (recv spans) and sends the replies. */
        snprintf(tname, sizeof(tname), "%s %s", nd->name,
                 td->has_op     ? "app"
                 : td->has_recv ? "progress"
                                : "thread");
        rc =
            tm_emit(o, json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "name", "thread_name", "ph", "M",
                                 "pid", (json_int_t)o->pid, "tid", td->tid, "args", "name", tname));
    }
    return rc;
}

int rkv_trace_merge(char *const *files, size_t n, const char *out_path,
                    struct rkv_trace_merge_stats *st_p, char *err, size_t err_len)
{
    struct rkv_trace_merge_stats st = {0};
    struct tm_scan sc = {0};
    struct tm_out o = {.st = &st};
    int rc = 0;
    if (n == 0 || n > TM_MAX_NODES)
        return rkv_errf(err, err_len, -RKV_EINVAL, "--trace: %zu files to merge (1..%u)", n,
                        TM_MAX_NODES);
    struct tm_node *nodes = calloc(n, sizeof(*nodes));
    if (!nodes)
        return rkv_errf(err, err_len, -RKV_ENOMEM, "--trace: out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        nodes[i].path = files[i];
        rc = tm_each_line(&nodes[i], tm_scan_line, &sc, &st.bad_lines, err, err_len);
        /* A node killed before it synced has no clock to place it by. */
        st.unclocked += rc == 0 && !nodes[i].clocked;
        if (rc == 0 && nodes[i].rtt_us > st.max_rtt_us)
            st.max_rtt_us = nodes[i].rtt_us;
    }
    if (rc < 0)
        goto free_nodes;
    if (!(o.f = fopen(out_path, "w"))) {
        rc = rkv_errf(err, err_len, -RKV_EIO, "--trace: cannot write %s: %s", out_path,
                      strerror(errno));
        goto free_nodes;
    }
    o.base_ns = sc.base_ns;
    uint64_t bad_again = 0; /* counted by the first pass */
    fprintf(o.f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!nodes[i].clocked)
            continue;
        o.pid = (uint32_t)i + 1;
        rc = tm_write_names(&o, &nodes[i]);
        if (rc == 0)
            rc = tm_each_line(&nodes[i], tm_write_line, &o, &bad_again, err, err_len);
    }
    fprintf(o.f, "\n]}\n");
    st.nodes = (uint32_t)(n - st.unclocked);
    st.cut = sc.cut;
    st.matched = tm_matched(&o.starts, &o.ends);
    st.bytes = (uint64_t)ftell(o.f);
    if (fclose(o.f) != 0 && rc == 0)
        rc = -RKV_EIO;
    if (rc < 0 && !(err && err[0]))
        rkv_errf(err, err_len, rc, "--trace: writing %s: %s", out_path, rkv_strerror(rc));
    if (rc == 0 && st_p)
        *st_p = st;
free_nodes:
    free(o.starts.v);
    free(o.ends.v);
    free(nodes);
    return rc;
}

int rkv_trace_run_end(struct rkv_trace_run *tr, const char *out_path, FILE *out)
{
    struct rkv_trace_merge_stats st;
    char err[512] = "";
    int rc = rkv_trace_run_finish(tr, out_path, &st, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return rc;
    }
    fprintf(out,
            "trace: %s: %u processes, %llu events (%llu spans, %llu of %llu message arrows "
            "matched), %.1f KiB; clock offsets measured to within %.1f us%s\n",
            out_path, st.nodes, (unsigned long long)st.events, (unsigned long long)st.spans,
            (unsigned long long)st.matched, (unsigned long long)st.flow_ends,
            (double)st.bytes / 1024.0, st.max_rtt_us / 2,
            st.cut ? "; some processes reached the limit of lines per file: their end is "
                     "missing"
                   : "");
    return 0;
}
