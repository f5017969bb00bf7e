/* The verdict of a launcher-started run (verdict.h). */
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "harness/launch.h"
#include "harness/verdict.h"
#include "harness/report.h"
#include "harness/report_gather.h"
#include "harness/timed.h"

/* Why the verdict may fail beyond the table's columns, one line each: the
 * workers that never reported and why, a refused block, a worker stopped
 * by a store error, pins that did not fit, a failed shutdown. */
static void verdict_notes(FILE *f, const struct rkv_report_gathered *g, uint32_t wait_ms,
                          const char *gather_err, const char *shutdown_err)
{
    uint32_t never = 0;
    for (uint32_t w = 0; w < g->n_workers; w++)
        never += !g->blk[w].text;
    if (never) {
        fprintf(f, "\nnever reported (waited %u ms):", wait_ms);
        for (uint32_t w = 0, k = 0; w < g->n_workers; w++)
            if (!g->blk[w].text)
                fprintf(f, "%s worker %u (%s)", k++ ? "," : "", w, g->why[w]);
        fprintf(f, "\n");
    }
    for (uint32_t w = 0; w < g->n_workers; w++) {
        const struct rkv_report_block *b = &g->blk[w];
        if (!b->text)
            continue;
        if (b->flags & RKV_REPORT_TOO_LARGE)
            fprintf(f, "worker %u: its report (%u bytes) did not fit its block\n", w,
                    b->wanted_bytes);
        if (b->status)
            fprintf(f, "worker %u stopped on a store error: %s\n", w, rkv_strerror(b->status));
        if (b->pins_dropped)
            fprintf(f,
                    "worker %u: %u pinned assign winners did not fit its report and were not "
                    "compared across workers\n",
                    w, b->pins_dropped);
    }
    if (gather_err)
        fprintf(f, "gathering the reports: %s\n", gather_err);
    if (shutdown_err)
        fprintf(f, "shutting the servers down: %s\n", shutdown_err);
}

/* Worker 0's part, once the servers are down: the table, the notes, the
 * files; returns the verdict's exit code. */
static int verdict_print(const struct rkv_config *cfg, const struct rkv_scenario *sc,
                         const struct rkv_report_gathered *g, const struct rkv_verdict_opts *v,
                         const char *gather_err, const char *shutdown_err)
{
    char **outs = calloc(g->n_workers ? g->n_workers : 1, sizeof(*outs));
    struct rkv_report r;
    if (!outs) {
        fprintf(stderr, "rkv worker: out of memory for the verdict\n");
        return RKV_EXIT_STORE;
    }
    int procs_ok = !gather_err && !shutdown_err;
    for (uint32_t w = 0; w < g->n_workers; w++) {
        outs[w] = g->blk[w].text;
        procs_ok &= outs[w] && !g->blk[w].status && !(g->blk[w].flags & RKV_REPORT_TOO_LARGE);
    }
    if (rkv_report_collect(&r, sc, outs, g->n_workers) < 0) {
        rkv_report_free(&r);
        free(outs);
        fprintf(stderr, "rkv worker: out of memory for the verdict\n");
        return RKV_EXIT_STORE;
    }
    r.processes_ok = procs_ok;
    r.wall_s = rkv_timed_now_s() - v->t0_s;
    verdict_notes(stdout, g, cfg->timeout_ms, gather_err, shutdown_err);
    rkv_report_print(&r, stdout, cfg->backend);
    fflush(stdout);
    int unwritten = v->out_dir && rkv_report_write(&r, v->out_dir, cfg->backend) < 0;
    if (unwritten) {
        fprintf(stderr, "rkv worker: cannot write the report into %s\n", v->out_dir);
    } else if (v->out_dir) {
        char path[600];
        snprintf(path, sizeof(path), "%s/report.md", v->out_dir);
        FILE *f = fopen(path, "a");
        if (f) {
            verdict_notes(f, g, cfg->timeout_ms, gather_err, shutdown_err);
            fclose(f);
        }
    }
    int passed = rkv_report_passed(&r), wrong = 0;
    for (uint32_t p = 0; p < sc->n_phases; p++)
        wrong |= r.phase[p].errors > 0;
    rkv_report_free(&r);
    free(outs);
    /* A run that passed but whose report was lost does not exit 0. */
    return passed && !unwritten ? RKV_EXIT_OK : wrong ? RKV_EXIT_CHECK : RKV_EXIT_STORE;
}

/* How often a worker that stopped on an error looks whether worker 0 has
 * ended the run (stopped the servers). */
#define VERDICT_AWAIT_LOOK_MS 200u

/* A worker other than 0 that stopped on a store error: worker 0 judges
 * the run and then stops the servers; if worker 0 is gone too (the failed
 * barrier that stopped this one said "client 0 left"), nobody would. Every
 * survivor exited 0 and the servers ran on for ever, the launcher's job
 * never ending (an outside tester, launched by rank). So it waits for the
 * servers to go, as long as worker 0's gathering may take (timeout_ms
 * each way), then stops them itself and fails. */
static int verdict_await_worker0(struct rkv_client *cli, const struct rkv_config *cfg, uint32_t me)
{
    uint64_t waited = 0, limit = 2ull * cfg->timeout_ms + 1000;
    size_t n = 0;
    for (; waited < limit; waited += VERDICT_AWAIT_LOOK_MS) {
        if (rkv_client_list(cli, NULL, 0, &n) < 0)
            return RKV_EXIT_OK; /* worker 0 ended the run: its verdict */
        struct timespec ts = {0, (long)VERDICT_AWAIT_LOOK_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr,
            "rkv worker %u: worker 0 has not ended the run %llu ms after this worker stopped "
            "(gone?): no verdict; stopping the servers\n",
            me, (unsigned long long)limit);
    (void)rkv_client_shutdown_servers(cli); /* another survivor may have */
    return RKV_EXIT_STORE;
}

int rkv_verdict_node(struct rkv_client *cli, const struct rkv_config *cfg,
                     const struct rkv_scenario *sc, const char *text, size_t len, int wl_rc,
                     int code, const struct rkv_verdict_opts *v)
{
    char err[512], gerr[512], serr[512];
    uint32_t me = rkv_client_id(cli);
    /* A worker whose report cannot go out still ends: worker 0 names it. */
    if (rkv_report_send(cli, sc, me, wl_rc, text, len, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv worker: report: %s\n", err);
        return code == RKV_EXIT_OK ? RKV_EXIT_STORE : code;
    }
    /* Its report out, another worker's failure is worker 0's to judge and
     * exit with: mpirun ends the whole job at the first rank that exits
     * non-zero, which killed worker 0 before its verdict about as often as
     * not (test_launch test_real_mpirun with a corrupted row). */
    if (me != 0)
        return wl_rc < 0 ? verdict_await_worker0(cli, cfg, me) : RKV_EXIT_OK;
    struct rkv_report_gathered g;
    int grc =
        rkv_report_gather(cli, sc, (uint64_t)cfg->timeout_ms * 1000000, &g, gerr, sizeof(gerr));
    int src = rkv_client_shutdown_servers(cli);
    if (src < 0)
        snprintf(serr, sizeof(serr), "%s", rkv_client_errmsg(cli));
    int verdict = RKV_EXIT_STORE;
    if (g.blk && g.why)
        verdict = verdict_print(cfg, sc, &g, v, grc < 0 ? gerr : NULL, src < 0 ? serr : NULL);
    else
        fprintf(stderr, "rkv worker: report: %s\n", gerr);
    rkv_report_gathered_free(&g);
    return code != RKV_EXIT_OK ? code : verdict;
}
