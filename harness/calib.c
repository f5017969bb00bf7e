/* Calibration files: load, write, apply (see calib.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness/calib.h"
#include "harness/scenario.h"
#include "rkv.h"

static char *calib_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

/* v must be a or b: *is_b says which; -1 with a message otherwise. */
static int calib_pick(const char *k, const char *v, const char *a, const char *b, int *is_b,
                      char *why, size_t why_len)
{
    if (strcmp(v, a) && strcmp(v, b)) {
        snprintf(why, why_len, "%s: expected %s or %s, got \"%s\"", k, a, b, v);
        return -1;
    }
    *is_b = !strcmp(v, b);
    return 0;
}

/* One key = value line into c; -1 with a message when the key or value is bad. */
static int calib_set(struct rkv_calib *c, const char *k, const char *v, char *why, size_t why_len)
{
    static const struct {
        const char *key;
        size_t off;
        double min, max;
    } nums[] = {
        {"latency_us", offsetof(struct rkv_calib, latency_us), 0, 1e6},
        {"bandwidth_gbps", offsetof(struct rkv_calib, bandwidth_gbps), 1e-3, 1e6},
        {"msg_cost_ns", offsetof(struct rkv_calib, msg_cost_ns), 0, 1e9},
        {"row_cost_ns", offsetof(struct rkv_calib, row_cost_ns), 0, 1e9},
        {"send_byte_ns", offsetof(struct rkv_calib, send_byte_ns), 0, 1e6},
        {"recv_byte_ns", offsetof(struct rkv_calib, recv_byte_ns), 0, 1e6},
        {"copy_byte_ns", offsetof(struct rkv_calib, copy_byte_ns), 0, 1e6},
    };
    if (!strncmp(k, "measured_", 9))
        return 0;
    int second;
    if (!strcmp(k, "backend")) {
        if (calib_pick(k, v, "tcp", "verbs", &second, why, why_len) < 0)
            return -1;
        snprintf(c->backend, sizeof(c->backend), "%s", v);
        return 0;
    }
    if (!strcmp(k, "scheduler"))
        return calib_pick(k, v, "share", "cores", &c->sched_cores, why, why_len);
    if (!strcmp(k, "shared_host"))
        return calib_pick(k, v, "0", "1", &c->shared_host, why, why_len);
    if (!strcmp(k, "cpu")) {
        if (calib_pick(k, v, "measured", "model", &second, why, why_len) < 0)
            return -1;
        c->cpu_measured = !second;
        return 0;
    }
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!strcmp(k, "host_cores")) {
        if (*end || errno || d < 1 || d > 4096 || d != (uint32_t)d) {
            snprintf(why, why_len, "host_cores: expected 1..4096, got \"%s\"", v);
            return -1;
        }
        c->host_cores = (uint32_t)d;
        return 0;
    }
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        if (strcmp(k, nums[i].key))
            continue;
        if (*end || errno || !(d >= nums[i].min && d <= nums[i].max)) {
            snprintf(why, why_len, "%s: expected a number in %g..%g, got \"%s\"", k, nums[i].min,
                     nums[i].max, v);
            return -1;
        }
        *(double *)((char *)c + nums[i].off) = d;
        return 0;
    }
    snprintf(why, why_len, "unknown key \"%s\"", k);
    return -1;
}

/* Keys a calibration file has (rkv_calib_write: a dozen, and its notes'
 * measured_ ones). */
#define CALIB_MAX_KEYS 64

int rkv_calib_load(const char *path, struct rkv_calib *c, char *err, size_t err_len)
{
    /* A directory opens and reads as empty: "needs backend, ..." */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, err_len,
                 "%s: is a directory, not a calibration file (rkv calibrate "
                 "writes one)",
                 path);
        return -RKV_ECONFIG;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_len, "%s: cannot open the calibration file (rkv calibrate writes one)",
                 path);
        return -RKV_ECONFIG;
    }
    *c = (struct rkv_calib){.host_cores = 0};
    char line[512], why[256];
    int rc = 0;
    /* A key given twice (a hand edit) took the last value without a word. */
    struct {
        char key[32];
        unsigned ln;
    } seen[CALIB_MAX_KEYS];
    unsigned n_seen = 0;
    for (unsigned ln = 1; fgets(line, sizeof(line), f); ln++) {
        char *s = calib_trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        char *hash = strchr(s, '#');
        if (hash)
            *hash = 0;
        if (!eq || (hash && hash < eq)) {
            snprintf(err, err_len, "%s:%u: expected key = value, got \"%s\"", path, ln, s);
            rc = -RKV_ECONFIG;
            break;
        }
        *eq = 0;
        const char *key = calib_trim(s);
        for (unsigned i = 0; i < n_seen && rc == 0; i++) {
            if (!strcmp(seen[i].key, key)) {
                snprintf(err, err_len, "%s:%u: %s is given twice (line %u too)", path, ln, key,
                         seen[i].ln);
                rc = -RKV_ECONFIG;
            }
        }
        if (rc < 0)
            break;
        if (n_seen < CALIB_MAX_KEYS && strlen(key) < sizeof(seen[0].key)) {
            snprintf(seen[n_seen].key, sizeof(seen[0].key), "%s", key);
            seen[n_seen++].ln = ln;
        }
        if (calib_set(c, key, calib_trim(eq + 1), why, sizeof(why)) < 0) {
            snprintf(err, err_len, "%s:%u: %s", path, ln, why);
            rc = -RKV_ECONFIG;
            break;
        }
    }
    fclose(f);
    if (rc == 0 && (!c->backend[0] || !c->host_cores || c->bandwidth_gbps <= 0)) {
        snprintf(err, err_len, "%s: needs backend, host_cores and bandwidth_gbps", path);
        rc = -RKV_ECONFIG;
    }
    return rc;
}

int rkv_calib_write(const char *path, const struct rkv_calib *c, const char *notes, char *err,
                    size_t err_len)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno));
        return -RKV_EIO;
    }
    fprintf(f,
            "# rkv calibration for the twin: rkv run FILE --calibration THIS (sim/README.md)\n"
            "backend = %s\n"
            "host_cores = %u      # every node of a run on this host shares them\n"
            "shared_host = %d     # 1: the machines of a run are processes on this host\n"
            "latency_us = %.3f    # one-way, the part of a small message that is not CPU\n"
            "bandwidth_gbps = %.3f # one connection, beyond the CPU of its copies\n"
            "msg_cost_ns = %.0f    # kernel CPU per message posted and per message received\n"
            "send_byte_ns = %.4f  # kernel CPU per byte sent\n"
            "recv_byte_ns = %.4f  # kernel CPU per byte received\n"
            "copy_byte_ns = %.4f  # a warm memcpy; the twin's slower copies (first touch) are CPU\n"
            "row_cost_ns = %.1f    # CPU per row; applied only with cpu = model\n"
            "cpu = %s        # measured: the twin charges node code's own CPU time\n"
            "scheduler = %s     # cores: per-core run queues, as the kernel's (sim/README.md)\n",
            c->backend, c->host_cores, c->shared_host, c->latency_us, c->bandwidth_gbps,
            c->msg_cost_ns, c->send_byte_ns, c->recv_byte_ns, c->copy_byte_ns, c->row_cost_ns,
            c->cpu_measured ? "measured" : "model", c->sched_cores ? "cores" : "share");
    if (notes)
        fputs(notes, f);
    if (fclose(f) != 0) {
        snprintf(err, err_len, "cannot write %s", path);
        return -RKV_EIO;
    }
    return 0;
}

void rkv_calib_apply(const struct rkv_calib *c, struct rkv_scenario *sc)
{
    if (c->shared_host) {
        /* The machines are processes on this host: one pool of cores. */
        sc->sim_cores = c->host_cores;
        snprintf(sc->sim_platform, sizeof(sc->sim_platform), "loopback");
    } else {
        /* Each machine its share of the cores. */
        uint32_t cores = c->host_cores / (sc->machines ? sc->machines : 1);
        sc->sim_cores = cores ? cores : 1;
        snprintf(sc->sim_platform, sizeof(sc->sim_platform), "star");
    }
    sc->sim_platform_file[0] = 0;
    /* 0 would mean "the default" to the platform writer. */
    sc->sim_latency_us = c->latency_us > 1e-3 ? c->latency_us : 1e-3;
    sc->sim_bandwidth_gbps = c->bandwidth_gbps;
    sc->sim_msg_cost_ns = c->msg_cost_ns;
    sc->sim_send_byte_ns = c->send_byte_ns;
    sc->sim_recv_byte_ns = c->recv_byte_ns;
    sc->sim_copy_byte_ns = c->copy_byte_ns;
    /* Measured CPU already holds what a handler spends per row. */
    sc->sim_row_cost_ns = c->cpu_measured ? 0 : c->row_cost_ns;
    sc->sim_cpu_measured = c->cpu_measured;
    sc->sim_sched_cores = c->sched_cores;
}
