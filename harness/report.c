/* The verdict table and report files of `rkv run`. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "harness/child_exit.h"
#include "harness/client_stats.h"
#include "harness/report.h"

extern char **environ; /* the process environment, handed to gnuplot */

/* One pinned winner of concurrent assigns, as a worker's oracle printed it. */
/* Whether a wrong value found in phase p is the one to quote: the
 * headline names the earliest phase with wrong values, and quoted the
 * first worker's first, which could be another phase's (an outside
 * tester: "phase p0: 2 wrong values; the first: ... p=1 tensor t0"). */
static int rep_first_error_takes(struct rkv_report *r, uint32_t p)
{
    if (r->first_error_phase1 && r->first_error_phase1 <= p + 1)
        return 0;
    r->first_error_phase1 = p + 1;
    return 1;
}

struct rep_pin {
    uint64_t row;
    uint32_t tensor, epoch, worker, phase, round; /* tensor UINT32_MAX: empty slot */
    uint32_t reader;                              /* the output it came from */
};

static int rep_pin_parse(const char *line, const struct rkv_scenario *sc, struct rep_pin *p)
{
    unsigned t, e, w, ph, n;
    unsigned long long row;
    if (sscanf(line, "PIN t=%u r=%llu e=%u w=%u p=%u n=%u", &t, &row, &e, &w, &ph, &n) != 6 ||
        t >= sc->n_tensors || row >= sc->tensors[t].desc.rows || ph >= sc->n_phases ||
        e >= sc->n_phases)
        return -1;
    *p =
        (struct rep_pin){.row = row, .tensor = t, .epoch = e, .worker = w, .phase = ph, .round = n};
    return 0;
}

/* Each worker process pins the winner of a contested row at its first
 * read of an epoch (harness/oracle.h); two processes that pinned different
 * winners in one epoch saw the store disagree with itself. Counted as an
 * error of the assign's phase. */
static int rep_check_pins(struct rkv_report *r, char *const *outs, uint32_t n_workers)
{
    const struct rkv_scenario *sc = r->sc;
    uint64_t lines = 0;
    for (uint32_t w = 0; w < n_workers; w++)
        for (const char *at = outs[w]; at && (at = strstr(at, "PIN ")) != NULL; at += 4)
            lines++;
    if (!lines)
        return 0;
    uint64_t cap = 16;
    while (cap < 2 * lines)
        cap *= 2;
    struct rep_pin *tab = malloc(cap * sizeof(*tab));
    if (!tab)
        return -RKV_ENOMEM;
    for (uint64_t i = 0; i < cap; i++)
        tab[i].tensor = UINT32_MAX;
    for (uint32_t w = 0; w < n_workers; w++) {
        for (const char *line = outs[w]; line && *line;) {
            const char *eol = strchr(line, '\n');
            struct rep_pin p;
            if (!strncmp(line, "PIN ", 4) && rep_pin_parse(line, sc, &p) == 0) {
                p.reader = w;
                uint64_t i =
                    rkv_mix64(p.row * 0x9e3779b97f4a7c15ull ^ p.tensor ^ (uint64_t)p.epoch << 32) &
                    (cap - 1);
                while (
                    tab[i].tensor != UINT32_MAX &&
                    (tab[i].tensor != p.tensor || tab[i].row != p.row || tab[i].epoch != p.epoch))
                    i = (i + 1) & (cap - 1);
                struct rep_pin *e = &tab[i];
                if (e->tensor == UINT32_MAX) {
                    *e = p;
                } else if (e->worker != p.worker || e->phase != p.phase || e->round != p.round) {
                    r->phase[e->phase].errors++;
                    if (rep_first_error_takes(r, e->phase))
                        snprintf(r->first_error, sizeof(r->first_error),
                                 "tensor \"%s\" row %llu: worker process %u read the assign of "
                                 "worker %u (phase \"%s\" round %u), worker process %u that of "
                                 "worker %u (phase \"%s\" round %u): two winners of concurrent "
                                 "assigns",
                                 sc->tensors[p.tensor].desc.name, (unsigned long long)p.row,
                                 e->reader, e->worker, sc->phases[e->phase].name, e->round,
                                 p.reader, p.worker, sc->phases[p.phase].name, p.round);
                }
            }
            line = eol ? eol + 1 : NULL;
        }
    }
    free(tab);
    return 0;
}

/* One worker's STATS line (up to eol, or the end): kept for report.json.
 * A line that is not a JSON object (a worker killed mid-line) is skipped. */
static int rep_add_stats(struct rkv_report *r, const char *text, const char *eol)
{
    json_t *one = json_loadb(text, eol ? (size_t)(eol - text) : strlen(text), 0, NULL);
    if (!json_is_object(one)) {
        json_decref(one);
        return 0;
    }
    if (!r->stats && !(r->stats = json_array())) {
        json_decref(one);
        return -RKV_ENOMEM;
    }
    return json_array_append_new(r->stats, one) < 0 ? -RKV_ENOMEM : 0;
}

/* A STOPPED line (rkv_wl_print_as): the worker did not finish that phase,
 * whose PHASE line came just before it and was counted. */
static void rep_stopped(struct rkv_report *r, const char *line, const char *eol, int *stopped_p)
{
    unsigned w, p;
    int off = -1, rc = 0;
    /* Without rc=: a worker of an earlier build (its error's code unknown). */
    if ((sscanf(line, "STOPPED w=%u p=%u rc=%d %n", &w, &p, &rc, &off) != 3 || off < 0) &&
        (off = -1, rc = 0, sscanf(line, "STOPPED w=%u p=%u %n", &w, &p, &off) != 2 || off < 0))
        return;
    if (p >= r->sc->n_phases)
        return;
    if (r->reported[p])
        r->reported[p]--;
    if (!*stopped_p) {
        *stopped_p = 1;
        r->workers_stopped++;
    }
    int n = (int)((eol ? (size_t)(eol - line) : strlen(line)) - (size_t)off);
    /* w= is the worker's client id, which need not be its node's number
     * (ids are handed out as workers join): "w1 stopped" named w1 where
     * client 1 was w0 (an outside tester). */
    /* The first in worker order, unless it is an echo of another's stop:
     * a worker whose init_data failed shut the servers down, and the
     * verdict quoted another's "server 0 is shutting down" (an outside
     * tester), the cause only on stderr. */
    int echo = r->stop_rc == -RKV_ESHUTDOWN && rc != 0 && rc != -RKV_ESHUTDOWN;
    if ((!r->stop_error[0] || echo) && strncmp(line + off, "-", (size_t)n) != 0) {
        snprintf(r->stop_error, sizeof(r->stop_error),
                 "client %u stopped before finishing phase \"%s\": %.*s", w, r->sc->phases[p].name,
                 n, line + off);
        r->stop_rc = rc;
    }
    if (rc == -RKV_ETIMEDOUT && r->survivor_timeouts++ == 0)
        snprintf(r->timeout_error, sizeof(r->timeout_error), "client %u in phase \"%s\": %.*s", w,
                 r->sc->phases[p].name, n, line + off);
}

int rkv_report_collect(struct rkv_report *r, const struct rkv_scenario *sc, char *const *outs,
                       uint32_t n_workers)
{
    memset(r, 0, sizeof(*r));
    r->sc = sc;
    r->n_workers = n_workers;
    r->phase = calloc(sc->n_phases, sizeof(*r->phase));
    r->reported = calloc(sc->n_phases, sizeof(*r->reported));
    if (!r->phase || !r->reported)
        return -RKV_ENOMEM;
    struct rkv_wl_phase_stats st;
    for (uint32_t w = 0; w < n_workers; w++) {
        int stopped = 0;
        for (const char *line = outs[w]; line && *line;) {
            const char *eol = strchr(line, '\n');
            uint32_t wk, p;
            if (!strncmp(line, "PHASE ", 6) && rkv_wl_parse(line, &wk, &p, &st) == 0 &&
                p < sc->n_phases) {
                struct rkv_wl_phase_stats *m = &r->phase[p];
                m->pushes += st.pushes;
                m->pulls += st.pulls;
                m->bytes += st.bytes;
                m->checks += st.checks;
                m->skipped += st.skipped;
                m->errors += st.errors;
                m->wall_s = st.wall_s > m->wall_s ? st.wall_s : m->wall_s;
                m->max_us = st.max_us > m->max_us ? st.max_us : m->max_us;
                for (uint32_t b = 0; b < RKV_WL_HIST; b++)
                    m->hist[b] += st.hist[b];
                r->reported[p]++;
            } else if (!strncmp(line, "STATS ", 6)) {
                int rc = rep_add_stats(r, line + 6, eol);
                if (rc < 0)
                    return rc;
            } else if (!strncmp(line, "STOPPED ", 8)) {
                rep_stopped(r, line, eol, &stopped);
            } else if (!strncmp(line, "UNRESOLVED ", 11)) {
                unsigned uw, up;
                unsigned long long un;
                if (sscanf(line, "UNRESOLVED w=%u p=%u n=%llu", &uw, &up, &un) == 3 &&
                    up < sc->n_phases) {
                    if (!r->unresolved || up < r->unresolved_phase)
                        r->unresolved_phase = up;
                    r->unresolved += un;
                }
            } else if (!strncmp(line, "FIRSTERR ", 9)) {
                unsigned fw, fp;
                size_t n = (eol ? (size_t)(eol - line) : strlen(line)) - 9;
                if (sscanf(line, "FIRSTERR w=%u p=%u", &fw, &fp) == 2 && fp < sc->n_phases &&
                    rep_first_error_takes(r, fp))
                    snprintf(r->first_error, sizeof(r->first_error), "%.*s", (int)n, line + 9);
            }
            line = eol ? eol + 1 : NULL;
        }
    }
    return rep_check_pins(r, outs, n_workers);
}

void rkv_report_free(struct rkv_report *r)
{
    free(r->phase);
    free(r->reported);
    json_decref(r->stats);
    memset(r, 0, sizeof(*r));
}

int rkv_report_passed(const struct rkv_report *r)
{
    if (!r->processes_ok)
        return 0;
    if (r->fault_run) {
        for (uint32_t p = 0; p < r->sc->n_phases; p++)
            if (r->phase[p].errors || (r->must_complete && r->reported[p] != r->n_workers))
                return 0;
        /* A crash lets survivors end on the error it caused, but a request
         * of the workload that timed out met a node that neither answered
         * nor died: a delay fault past the timeout, or a hang. (A client
         * that was never let in, server 0 waiting for a worker the faults
         * took, times out before its workload and prints no STOPPED line.) */
        return r->faults_fired && !r->survivor_timeouts &&
               (!r->must_complete || r->survivor_errors == 0);
    }
    for (uint32_t p = 0; p < r->sc->n_phases; p++)
        if (r->reported[p] != r->n_workers || r->phase[p].errors)
            return 0;
    return 1;
}

/* The first phase with a wrong value, or (all_finish) one that not every
 * worker finished, said in buf (unfinished: what follows in why_more);
 * 1 when there is one. */
static int rep_phase_fail_reason(const struct rkv_report *r, int all_finish, const char *why_more,
                                 char *buf, size_t len)
{
    for (uint32_t p = 0; p < r->sc->n_phases; p++) {
        if (r->phase[p].errors) {
            snprintf(buf, len, "phase %s: %llu wrong value%s pulled%s%s", r->sc->phases[p].name,
                     (unsigned long long)r->phase[p].errors, r->phase[p].errors == 1 ? "" : "s",
                     r->first_error[0] ? "; the first: " : "", r->first_error);
            return 1;
        }
        if (all_finish && r->reported[p] != r->n_workers) {
            snprintf(buf, len, "phase %s: %u of %u workers finished it%s", r->sc->phases[p].name,
                     r->reported[p], r->n_workers, why_more);
            return 1;
        }
    }
    return 0;
}

/* Why a fault run failed, in rkv_report_passed's order: it said only
 * "FAIL" when a fault did not fire (a second crash of a node). */
static void rep_fault_fail_reason(const struct rkv_report *r, char *buf, size_t len)
{
    if (rep_phase_fail_reason(r, 0, "", buf, len))
        return; /* a wrong value first: its worker's exit 1 is only its echo */
    if (!r->processes_ok) {
        const char *why = r->node_error[0] ? r->node_error : r->stop_error;
        snprintf(buf, len, "a process failed%s%s", why[0] ? ": " : "", why);
        return;
    }
    if (rep_phase_fail_reason(r, r->must_complete,
                              ", and nothing may be lost (no node gone for good, no connection "
                              "broken)",
                              buf, len))
        return;
    if (!r->faults_fired) {
        /* slow_cpu was missing from the list (an outside tester). */
        int n = snprintf(buf, len,
                         "not every fault fired, see \"faults:\" above (a node already down "
                         "cannot crash, a NIC fault needs traffic in its window, slow_cpu rows "
                         "for its server to handle in its window, a restart needs time before "
                         "the run ends)");
        /* An after_phase crash fires when client 0 ends its phase: workers
         * stopped by an earlier crash (a barrier fails once a worker or
         * server 0 is gone for good) never end it, and the hint above did
         * not say so (an outside tester). */
        /* Only when such a crash is one that did not fire: a restart that
         * never came got this hint too (an outside tester). */
        int timed = 0;
        for (uint32_t i = 0; i < r->sc->n_faults; i++) {
            char unfired[96];
            snprintf(unfired, sizeof(unfired), "crash %s: did not fire", r->sc->faults[i].target);
            timed |= r->sc->faults[i].after_phase[0] != 0 && strstr(r->faults, unfired);
        }
        if (timed && r->stop_error[0] && n > 0 && (size_t)n < len)
            snprintf(buf + n, len - (size_t)n,
                     "; the workers stopped early (%s): a crash after a phase client 0 did not "
                     "finish never fires",
                     r->stop_error);
        return;
    }
    if (r->survivor_timeouts) {
        snprintf(buf, len,
                 "%u surviving worker%s ended on a timeout, where a crash's survivors end on a "
                 "named error (a peer gone, a client left): %s",
                 r->survivor_timeouts, r->survivor_timeouts == 1 ? "" : "s", r->timeout_error);
        return;
    }
    snprintf(buf, len, "%u surviving worker%s ended on a store error, and nothing may be lost",
             r->survivor_errors, r->survivor_errors == 1 ? "" : "s");
}

void rkv_report_fail_reason(const struct rkv_report *r, char *buf, size_t len)
{
    buf[0] = 0;
    if (rkv_report_passed(r))
        return;
    if (r->fault_run) {
        rep_fault_fail_reason(r, buf, len);
        return;
    }
    /* The first error, with its node, and how many workers stopped: a run
     * that failed on a store error said a bare "FAIL", its cause only on
     * stderr (tcp) or on a line of its own (the twin), and neither reached
     * report.md nor report.json (an outside tester). */
    /* A wrong value first: the worker that pulled it exits 1, and the
     * verdict said "a process failed (its error is on stderr)". */
    if (rep_phase_fail_reason(r, 0, "", buf, len))
        return;
    char count[96] = "";
    if (r->workers_stopped)
        snprintf(count, sizeof(count), "; %u of %u workers stopped on a store error",
                 r->workers_stopped, r->n_workers);
    if (!r->processes_ok || r->workers_stopped) {
        const char *why = r->node_error[0]   ? r->node_error
                          : r->stop_error[0] ? r->stop_error
                                             : "a process failed (its error is on stderr)";
        snprintf(buf, len, "%s%s", why, count);
        return;
    }
    (void)rep_phase_fail_reason(r, 1, "", buf, len);
}

static double rep_gbps(const struct rkv_wl_phase_stats *m)
{
    return m->wall_s > 0 ? (double)m->bytes / m->wall_s / 1e9 : 0;
}

/* The table's GB/s: "n/a" for bytes moved in no measured time (a phase
 * served from the worker's own machine in the twin costs no simulated
 * time; it printed 0.000 and its bound a miss). */
static void rep_gbps_text(const struct rkv_wl_phase_stats *m, char *buf, size_t len)
{
    if (m->bytes && !(m->wall_s > 0))
        snprintf(buf, len, "n/a");
    else
        snprintf(buf, len, "%.3f", rep_gbps(m));
}

static const char *rep_oracle(const struct rkv_report *r, uint32_t p)
{
    if (r->reported[p] != r->n_workers)
        return "INCOMPLETE";
    return r->phase[p].errors ? "FAIL" : "pass";
}

void rkv_report_print(const struct rkv_report *r, FILE *out, const char *backend)
{
    const struct rkv_scenario *sc = r->sc;
    /* cluster.workers places the workers itself: per machine was wrong. */
    if (sc->workers_total && sc->workers_total != sc->machines * sc->workers_per_machine)
        fprintf(out, "\n%s on %s: %u machines x %u servers, %u workers, seed %llu\n\n", sc->path,
                backend, sc->machines, sc->servers_per_machine, rkv_scenario_workers(sc),
                (unsigned long long)sc->seed);
    else
        fprintf(out, "\n%s on %s: %u machines x (%u servers + %u workers), seed %llu\n\n", sc->path,
                backend, sc->machines, sc->servers_per_machine, sc->workers_per_machine,
                (unsigned long long)sc->seed);
    fprintf(out, "| phase | pushes | pulls | MiB | GB/s | p50 us | p99 us | max us | checked | "
                 "deferred | oracle |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (uint32_t p = 0; p < sc->n_phases; p++) {
        const struct rkv_wl_phase_stats *m = &r->phase[p];
        char gbps[32];
        rep_gbps_text(m, gbps, sizeof(gbps));
        fprintf(out, "| %s | %llu | %llu | %.1f | %s | %.1f | %.1f | %.1f | %llu | %llu | %s |\n",
                sc->phases[p].name, (unsigned long long)m->pushes, (unsigned long long)m->pulls,
                m->bytes / 1048576.0, gbps, rkv_wl_percentile_us(m, 0.5),
                rkv_wl_percentile_us(m, 0.99), m->max_us, (unsigned long long)m->checks,
                (unsigned long long)m->skipped, rep_oracle(r, p));
    }
    if (r->sim_s > 0) {
        fprintf(out,
                "\nsimulated time %.6f s, wall time %.2f s, %llu network events (%.0f events/s "
                "of wall time); event trace hash %016llx.",
                r->sim_s, r->wall_s, (unsigned long long)r->sim_events,
                r->wall_s > 0 ? r->sim_events / r->wall_s : 0.0, (unsigned long long)r->sim_hash);
        /* It said "the rest the kernel's per message and per byte" of a run
         * whose CPU was all row_cost_ns (an outside tester). */
        if (r->sim_cpu_s > 0)
            fprintf(out,
                    "\nCPU charged in the twin: %.3f core-s, %.3f of it node code measured, the "
                    "rest modelled (row_cost_ns per row a handler touches, msg_cost_ns and "
                    "send_byte_ns/recv_byte_ns per message and byte).",
                    r->sim_cpu_s, r->sim_node_cpu_s);
        if (r->sim_sched_cores)
            fprintf(out, "\nThe cores were per-core run queues: %llu bursts found their core idle.",
                    (unsigned long long)r->sim_sched_wakes);
    } else if (r->wall_s > 0) {
        fprintf(out, "\nwall time %.2f s.", r->wall_s);
    }
    fprintf(out, "\n\"deferred\": pulled mid-phase while others wrote the row; every row is "
                 "checked again after the barrier.\n");
    for (uint32_t p = 0; p < sc->n_phases && sc->expect_min_gbps > 0; p++) {
        const struct rkv_wl_phase_stats *m = &r->phase[p];
        if (m->bytes && !(m->wall_s > 0)) {
            fprintf(out,
                    "bound %s: throughput not measured: the phase took no time (in the "
                    "twin, rows of the worker's own machine are read in shared memory at "
                    "no simulated cost)\n",
                    sc->phases[p].name);
            continue;
        }
        /* %g: a bound of 0.000001 printed as ">= 0.000" */
        fprintf(out, "bound %s: throughput %.3f GB/s >= %g: %s (reported, not asserted)\n",
                sc->phases[p].name, rep_gbps(m), sc->expect_min_gbps,
                rep_gbps(m) >= sc->expect_min_gbps ? "pass" : "miss");
    }
    for (uint32_t p = 0; p < sc->n_phases && sc->expect_max_p99_us > 0; p++) {
        double p99 = rkv_wl_percentile_us(&r->phase[p], 0.99);
        fprintf(out, "bound %s: p99 %.1f us <= %g: %s (reported, not asserted)\n",
                sc->phases[p].name, p99, sc->expect_max_p99_us,
                p99 <= sc->expect_max_p99_us ? "pass" : "miss");
    }
    if (r->first_error[0])
        fprintf(out, "\nfirst wrong value: %s\n", r->first_error);
    if (r->unresolved)
        fprintf(out,
                "\noracle: %llu checked rows (the first in phase \"%s\") matched only within "
                "rounding that reaches a quarter of what half of their pushes add up to: half "
                "of their pushes lost or doubled might have matched too (lr too small for that "
                "many pushes to one row); they prove little\n",
                (unsigned long long)r->unresolved, sc->phases[r->unresolved_phase].name);
    if (r->fault_run) {
        char timeouts[48] = "";
        if (r->survivor_timeouts)
            snprintf(timeouts, sizeof(timeouts), " (%u of them a timeout)", r->survivor_timeouts);
        fprintf(out, "\nfaults: %s; %u surviving worker(s) ended on a store error%s%s%s\n",
                r->faults[0] ? r->faults : "none fired", r->survivor_errors, timeouts,
                r->survivor_error[0] ? ", e.g. " : "", r->survivor_error);
        if (!rkv_report_passed(r)) {
            char why[1024];
            rep_fault_fail_reason(r, why, sizeof(why));
            fprintf(out, "\nverdict: FAIL (%s)\n", why);
            return;
        }
        fprintf(out, "\nverdict: %s\n",
                r->must_complete ? "PASS (the faults fired, every worker finished every "
                                   "phase, and no pulled value was wrong)"
                                 : "PASS (the faults fired, every survivor ended without "
                                   "hanging, and no pulled value was wrong)");
        return;
    }
    if (rkv_report_passed(r)) {
        fprintf(out, "\nverdict: PASS (every pulled value matched the oracle%s)\n",
                r->unresolved ? "; some matches prove little, see \"oracle:\" above" : "");
        return;
    }
    char why[1024];
    rkv_report_fail_reason(r, why, sizeof(why));
    fprintf(out, "\nverdict: FAIL (%s)\n", why);
}

/* A JSON integer for a uint64 that may not fit jansson's signed one. */
static json_t *rep_u64(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char buf[24];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    return json_string(buf);
}

/* The report as a JSON document (NULL if out of memory). Strings go
 * through jansson, so a phase name holding a quote or a backslash is
 * escaped, not written raw. */
static json_t *rep_json(const struct rkv_report *r, const char *backend)
{
    const struct rkv_scenario *sc = r->sc;
    json_t *root = json_object(), *phases = json_array();
    if (!root || !phases)
        goto fail;
    int bad = json_object_set_new(root, "scenario", json_string(sc->path)) |
              json_object_set_new(root, "backend", json_string(backend)) |
              json_object_set_new(root, "seed", rep_u64(sc->seed)) |
              json_object_set_new(root, "wall_s", json_real(r->wall_s)) |
              json_object_set_new(root, "passed", json_boolean(rkv_report_passed(r))) |
              json_object_set_new(root, "oracle_unresolved", rep_u64(r->unresolved));
    if (r->sim_s > 0) {
        char hash[24];
        snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)r->sim_hash);
        bad |= json_object_set_new(root, "sim_s", json_real(r->sim_s)) |
               json_object_set_new(root, "sim_events", rep_u64(r->sim_events)) |
               json_object_set_new(root, "sim_hash", json_string(hash));
    }
    for (uint32_t p = 0; p < sc->n_phases; p++) {
        const struct rkv_wl_phase_stats *m = &r->phase[p];
        json_t *ph = json_pack("{s:s, s:o, s:o, s:o, s:f, s:f, s:f, s:f, s:f, s:o, s:o, s:o}",
                               "name", sc->phases[p].name, "pushes", rep_u64(m->pushes), "pulls",
                               rep_u64(m->pulls), "bytes", rep_u64(m->bytes), "wall_s", m->wall_s,
                               "gbps", rep_gbps(m), "p50_us", rkv_wl_percentile_us(m, 0.5),
                               "p99_us", rkv_wl_percentile_us(m, 0.99), "max_us", m->max_us,
                               "checked", rep_u64(m->checks), "deferred", rep_u64(m->skipped),
                               "errors", rep_u64(m->errors));
        bad |= json_array_append_new(phases, ph);
    }
    bad |= json_object_set_new(root, "phases", phases);
    phases = NULL;
    /* A failed run says why: "passed": false was all it had. Absent from a
     * passing run's report, which keeps its fields as they were. */
    if (!rkv_report_passed(r)) {
        char why[1024];
        rkv_report_fail_reason(r, why, sizeof(why));
        bad |= json_object_set_new(root, "failure",
                                   json_pack("{s:s, s:I, s:I}", "reason", why, "workers_stopped",
                                             (json_int_t)r->workers_stopped, "workers",
                                             (json_int_t)r->n_workers));
    }
    /* A fault run's "faults:" line, which report.md had and report.json
     * not (an outside tester). */
    if (r->fault_run)
        bad |= json_object_set_new(
            root, "faults",
            json_pack("{s:s, s:b, s:I, s:I, s:s}", "fired", r->faults[0] ? r->faults : "",
                      "all_fired", r->faults_fired, "survivor_errors",
                      (json_int_t)r->survivor_errors, "survivor_timeouts",
                      (json_int_t)r->survivor_timeouts, "survivor_error", r->survivor_error));
    /* The clients' own counters: per operation and per server, summed over
     * workers, and each worker's. */
    if (r->stats)
        bad |= json_object_set_new(root, "stats", rkv_stats_report(r->stats));
    if (!bad)
        return root;
fail:
    json_decref(phases);
    json_decref(root);
    return NULL;
}

/* Closes f, 0 or -RKV_EIO (errno set) if any write to it failed: a full
 * disk left 0-byte files that were said to be written. */
static int rep_close(FILE *f)
{
    int bad = ferror(f), saved = errno;
    if (fclose(f) != 0)
        return -RKV_EIO;
    errno = bad ? (saved ? saved : EIO) : errno;
    return bad ? -RKV_EIO : 0;
}

int rkv_report_write(const struct rkv_report *r, const char *dir, const char *backend)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -RKV_EIO;
    char path[512];
    snprintf(path, sizeof(path), "%s/report.json", dir);
    json_t *doc = rep_json(r, backend);
    if (!doc)
        return -RKV_ENOMEM;
    int rc = json_dump_file(doc, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(doc);
    if (rc < 0)
        return -RKV_EIO;
    snprintf(path, sizeof(path), "%s/report.md", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -RKV_EIO;
    rkv_report_print(r, f, backend);
    return rep_close(f);
}

int rkv_report_read_phase_wall_s(const char *dir, double *s, uint32_t max)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/report.json", dir);
    json_t *doc = json_load_file(path, 0, NULL);
    json_t *phases = json_object_get(doc, "phases");
    int got = json_is_array(phases) ? 0 : -1;
    for (size_t i = 0; got >= 0 && i < json_array_size(phases) && (uint32_t)got < max; i++) {
        json_t *w = json_object_get(json_array_get(phases, i), "wall_s");
        if (!json_is_number(w)) {
            got = -1;
            break;
        }
        s[got++] = json_number_value(w);
    }
    json_decref(doc);
    return got;
}

/* A gnuplot string literal: single quotes ('' inside), control characters
 * as spaces (a newline would end the command). Whatever a phase name or a
 * directory holds, the script stays one valid command per line. */
static void rep_gp_str(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("''", f);
        else
            fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
    }
    fputc('\'', f);
}

/* A gnuplot file name: dir/name as a string literal. */
static void rep_gp_path(FILE *f, const char *dir, const char *name)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    rep_gp_str(f, path);
}

/* Latencies under this (only the twin's co-located calls, which take no
 * simulated time) cannot sit on a log axis: they are drawn at its left
 * edge, and the axis label says so. */
#define REP_INSTANT_US 0.05

/* The left edge of the CDF's axis: half the fastest latency at or above
 * REP_INSTANT_US in any phase (0 when no phase has one). */
static double rep_cdf_floor_us(const struct rkv_report *r, int *instant_p)
{
    double lo = 0;
    *instant_p = 0;
    for (uint32_t p = 0; p < r->sc->n_phases; p++) {
        const struct rkv_wl_phase_stats *m = &r->phase[p];
        for (uint32_t b = 0; b < RKV_WL_HIST; b++) {
            if (!m->hist[b])
                continue;
            double us = rkv_wl_bucket_us(b);
            us = us < m->max_us ? us : m->max_us;
            if (us < REP_INSTANT_US)
                *instant_p = 1;
            else if (lo == 0 || us < lo)
                lo = us;
        }
    }
    return lo / 2;
}

/* Data files for the plots: one CDF block per phase (gnuplot "index"),
 * one throughput line per phase; names stay in the script (rep_gp_str). */
static int rep_plot_data(const struct rkv_report *r, const char *dir, double floor_us)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/latency_cdf.dat", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -RKV_EIO;
    for (uint32_t p = 0; p < r->sc->n_phases; p++) {
        const struct rkv_wl_phase_stats *m = &r->phase[p];
        uint64_t total = 0, acc = 0;
        for (uint32_t b = 0; b < RKV_WL_HIST; b++)
            total += m->hist[b];
        fprintf(f, "# phase %u\n", p);
        /* Every line starts at 0 at the axis' left edge: a phase whose
         * requests all took one bucket still draws a visible step. */
        if (total)
            fprintf(f, "%.4f 0\n", floor_us > 0 ? floor_us : REP_INSTANT_US);
        for (uint32_t b = 0; b < RKV_WL_HIST && total; b++) {
            if (!m->hist[b])
                continue;
            acc += m->hist[b];
            double us = rkv_wl_bucket_us(b); /* as the percentiles: never past the max */
            us = us < m->max_us ? us : m->max_us;
            if (us < REP_INSTANT_US)
                us = floor_us > 0 ? floor_us : REP_INSTANT_US;
            fprintf(f, "%.4f %.6f\n", us, (double)acc / (double)total);
        }
        fprintf(f, "\n\n");
    }
    if (rep_close(f) < 0)
        return -RKV_EIO;
    snprintf(path, sizeof(path), "%s/throughput.dat", dir);
    if (!(f = fopen(path, "w")))
        return -RKV_EIO;
    for (uint32_t p = 0; p < r->sc->n_phases; p++)
        fprintf(f, "%u %.6f\n", p, rep_gbps(&r->phase[p]));
    return rep_close(f);
}

/* A plot's title: what it shows, then the scenario, the backend and what
 * the times are (the twin's are simulated). */
static void rep_gp_title(FILE *f, const struct rkv_report *r, const char *backend, const char *what)
{
    const char *path = r->sc->path[0] ? r->sc->path : "scenario";
    const char *base = strrchr(path, '/');
    char line[600];
    snprintf(line, sizeof(line), "%s: %s on %s, seed %llu", what, base ? base + 1 : path, backend,
             (unsigned long long)r->sc->seed);
    fprintf(f, "set title ");
    rep_gp_str(f, line);
    fprintf(f, " . \"\\n\" . ");
    rep_gp_str(f, r->sim_s > 0 ? "simulated time: the twin's modelled network and CPUs, not a "
                                 "measurement"
                               : "measured wall-clock time on this host");
    fprintf(f, "\n");
}

/* Distinct colours (a colour-blind-safe set) and dash patterns per phase,
 * and lines thinner for each later phase, drawn on top: two phases with the
 * same latencies show as a thin line inside a thick one, not as one line. */
static const char *const rep_colours[] = {"#1b9e77", "#d95f02", "#7570b3", "#e7298a",
                                          "#66a61e", "#e6ab02", "#a6761d", "#666666"};
#define REP_N_COLOURS (sizeof(rep_colours) / sizeof(rep_colours[0]))

static void rep_gp_cdf(FILE *f, const struct rkv_report *r, const char *dir, const char *backend,
                       double floor_us, int instant)
{
    uint32_t n = r->sc->n_phases;
    fprintf(f, "set output ");
    rep_gp_path(f, dir, "latency_cdf.png");
    fprintf(f, "\n");
    rep_gp_title(f, r, backend, "request latency CDF per phase");
    fprintf(f,
            "set logscale x\nset xlabel '%s'\nset ylabel 'fraction of requests'\n"
            "set yrange [0:1.02]\nset key bottom right box opaque\n",
            !instant       ? "latency (us, log scale)"
            : r->sim_s > 0 ? "latency (us, log scale; calls that took no simulated time at the "
                             "left edge)"
                           : "latency (us, log scale; calls under 0.05 us at the left edge)");
    if (floor_us > 0)
        fprintf(f, "set xrange [%.4f:*]\n", floor_us);
    /* Less than two decades (the twin's microseconds): base-2 tics, or the
     * axis would carry one label. */
    double hi_us = 0;
    for (uint32_t p = 0; p < n; p++)
        hi_us = r->phase[p].max_us > hi_us ? r->phase[p].max_us : hi_us;
    if (floor_us > 0 && hi_us < 100 * floor_us)
        fprintf(f, "set logscale x 2\nset format x '%%g'\n");
    uint64_t calls = 0;
    for (uint32_t p = 0; p < n; p++)
        for (uint32_t b = 0; b < RKV_WL_HIST; b++)
            calls += r->phase[p].hist[b];
    if (!calls) {
        /* Nothing to draw (every request failed, or none was made): an
         * empty axis that says so. gnuplot failed "x range is invalid",
         * and a passing run exited 3 with --plot. */
        fprintf(
            f,
            "unset key\nset xrange [1:1000]\nset label 1 'no call completed: no latencies to draw' "
            "at graph 0.5,0.5 center\nplot -1 notitle\nunset label 1\n"
            "unset logscale x\nset xrange [*:*]\nset yrange [*:*]\n");
        return;
    }
    fprintf(f, "plot");
    for (uint32_t p = 0; p < n; p++) {
        double lw = n > 1 ? 2.0 + 3.0 * (double)(n - 1 - p) / (double)(n - 1) : 2.5;
        fprintf(f, "%s ", p ? "," : "");
        rep_gp_path(f, dir, "latency_cdf.dat");
        /* Solid, dashed, dash-dot, dash-dot-dot: no dotted line, too faint. */
        static const unsigned dts[] = {1, 2, 4, 5};
        fprintf(f, " index %u using 1:2 with steps lw %.2f dt %u lc rgb '%s' title ", p, lw,
                dts[p % 4], rep_colours[p % REP_N_COLOURS]);
        rep_gp_str(f, r->sc->phases[p].name);
        /* A marker on each step, of the line's colour: visible where lines coincide. */
        fprintf(f, ", ");
        rep_gp_path(f, dir, "latency_cdf.dat");
        fprintf(f, " index %u using 1:2 with points pt %u ps 1.1 lc rgb '%s' notitle", p,
                4 + 2 * (p % 6), rep_colours[p % REP_N_COLOURS]);
    }
    fprintf(f, "\nunset logscale x\nset xrange [*:*]\nset yrange [*:*]\n");
}

int rkv_report_plot(const struct rkv_report *r, const char *dir, const char *backend, char *err,
                    size_t err_len)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return snprintf(err, err_len, "cannot create %s: %s", dir, strerror(errno)), -RKV_EIO;
    /* The script names its files by absolute path: with a relative --out
     * (report/) it ran only from where rkv run had been started. */
    char abs[PATH_MAX], short_abs[400];
    if (realpath(dir, abs) && strlen(abs) < sizeof(short_abs)) {
        memcpy(short_abs, abs, strlen(abs) + 1);
        dir = short_abs;
    }
    int instant;
    double floor_us = rep_cdf_floor_us(r, &instant);
    if (rep_plot_data(r, dir, floor_us) < 0)
        return snprintf(err, err_len, "cannot write the plot data into %s: %s", dir,
                        strerror(errno)),
               -RKV_EIO;
    char path[512];
    snprintf(path, sizeof(path), "%s/plots.gp", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return snprintf(err, err_len, "cannot write %s", path), -RKV_EIO;
    /* noenhanced: a name's _ or ^ is a character, not a subscript. Cairo
     * draws dash patterns; the plain png terminal (libgd) only widths and
     * markers, which still tell the lines apart. */
    fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "  set terminal pngcairo noenhanced size 1000,620 font ',10'\n"
               "} else {\n  set terminal png noenhanced size 1000,620\n}\nset grid\n");
    rep_gp_cdf(f, r, dir, backend, floor_us, instant);
    fprintf(f, "set output ");
    rep_gp_path(f, dir, "throughput.png");
    fprintf(f, "\n");
    rep_gp_title(f, r, backend, "throughput per phase");
    fprintf(f, "set ylabel 'GB/s (row bytes pushed and pulled / phase time)'\nset xlabel ''\n"
               "set key off\nset style fill solid 0.6\nset boxwidth 0.6\n"
               "set xtics rotate by -30 (");
    for (uint32_t p = 0; p < r->sc->n_phases; p++) {
        fprintf(f, "%s", p ? ", " : "");
        rep_gp_str(f, r->sc->phases[p].name);
        fprintf(f, " %u", p);
    }
    fprintf(f, ")\nset yrange [0:*]\nplot ");
    rep_gp_path(f, dir, "throughput.dat");
    fprintf(f, " using 1:2 with boxes lc rgb '%s' notitle\n", rep_colours[0]);
    if (rep_close(f) < 0)
        return snprintf(err, err_len, "cannot write %s: %s", path, strerror(errno)), -RKV_EIO;
    /* Last run's plots are not this run's: only what gnuplot makes now may
     * be found below. */
    static const char *const pngs[] = {"latency_cdf.png", "throughput.png"};
    char png[600];
    for (int i = 0; i < 2; i++) {
        snprintf(png, sizeof(png), "%s/%s", dir, pngs[i]);
        (void)unlink(png);
    }
    /* gnuplot gets the script's path as an argument, without a shell: no
     * quoting of the path, and no pipe that a missing gnuplot would close
     * under us (SIGPIPE killed the run when it was fed on stdin). */
    int st = -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(STDOUT_FILENO, STDERR_FILENO);
        execlp("gnuplot", "gnuplot", path, (char *)NULL);
        rkv_child_exit(127);
    }
    if (pid > 0) {
        int ws = 0;
        pid_t w;
        while ((w = waitpid(pid, &ws, 0)) < 0 && errno == EINTR)
            ;
        st = w == pid && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    }
    if (st == 127)
        return snprintf(err, err_len,
                        "gnuplot not found on PATH (exit 127); install it with: apt-get install "
                        "gnuplot-nox"),
               -RKV_EIO;
    if (st != 0)
        return snprintf(err, err_len, "gnuplot failed (exit %d), its complaint above", st),
               -RKV_EIO;
    /* gnuplot exits 0 when it cannot write a PNG (a full disk): the plots
     * were said to be there. */
    for (int i = 0; i < 2; i++) {
        struct stat sb;
        snprintf(png, sizeof(png), "%s/%s", dir, pngs[i]);
        if (stat(png, &sb) < 0 || sb.st_size == 0)
            return snprintf(err, err_len, "gnuplot did not write %s (a full disk?)", png), -RKV_EIO;
    }
    return 0;
}

int rkv_report_plot_and_say(const struct rkv_report *r, const char *dir, const char *backend)
{
    char err[700];
    const char *d = dir ? dir : ".";
    int rc = rkv_report_plot(r, d, backend, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "rkv run: --plot: no plots: %s\n", err);
        return rc;
    }
    /* --out report/ printed report//latency_cdf.png */
    int n = (int)strlen(d);
    while (n > 1 && d[n - 1] == '/')
        n--;
    printf("plots: %.*s/latency_cdf.png, %.*s/throughput.png\n", n, d, n, d);
    return 0;
}
