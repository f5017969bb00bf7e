/* rkv run --backend sim: the scenario in the twin, reported like a real run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "harness/launch.h"
#include "harness/report.h"
#include "harness/scenario.h"

#if RKV_WITH_SIM
#include "sim/twin/sim_plat.h"
#include "sim/twin/twin.h"

static int twin_report(const struct rkv_scenario *sc, const struct rkv_twin_result *res,
                       const char *out_dir, int plot)
{
    struct rkv_report r;
    if (rkv_twin_report(&r, sc, res) < 0)
        return RKV_EXIT_STORE;
    /* Why a node failed, into the verdict, report.md and report.json as on
     * every other path (rkv_twin_launch): `rkv run` said only "a process
     * failed" there, the cause (the --max-sim-s limit, naming the nodes)
     * on a line of its own (an outside tester). */
    if (!res->nodes_ok)
        snprintf(r.node_error, sizeof(r.node_error), "%s", res->error);
    rkv_report_print(&r, stdout, "sim");
    if (!res->nodes_ok)
        printf("node failure: %s\n", res->error);
    int unwritten = out_dir && rkv_report_write(&r, out_dir, "sim") < 0;
    if (unwritten)
        fprintf(stderr, "rkv run: cannot write the report into %s\n", out_dir);
    /* As a tcp run says it: without --out they land in this directory.
     * Plots asked for and not made fail the run as an unwritten report does. */
    if (plot && rkv_report_plot_and_say(&r, out_dir, "sim") < 0)
        unwritten = 1;
    int passed = rkv_report_passed(&r), wrong = 0;
    for (uint32_t p = 0; p < sc->n_phases; p++)
        wrong |= r.phase[p].errors > 0;
    rkv_report_free(&r);
    /* A run that passed but whose report was lost does not exit 0. */
    return passed && !unwritten ? RKV_EXIT_OK : wrong ? RKV_EXIT_CHECK : RKV_EXIT_STORE;
}

int cmd_run_twin(struct rkv_scenario *sc, const struct cmd_settings *s, const char *out_dir,
                 int plot, const struct cmd_twin_args *a)
{
    const char *trace = a->trace;
    uint64_t ll = 1;
    char err[256];
    if (rkv_cmd_get_u64(s, CMD_LOG_LEVEL, &ll, err, sizeof(err)) < 0) {
        fprintf(stderr, "rkv run: %s\n", err);
        return RKV_EXIT_USAGE;
    }
    /* The store's settings, as a tcp run of the file passes them to every
     * node; refused here, before the run, when bad or meaningless here. */
    struct rkv_config store;
    unsigned store_set;
    char serr[512];
    if (rkv_launch_twin_store(s, sc, 1, &store, &store_set, serr, sizeof(serr)) < 0) {
        fprintf(stderr, "rkv run: %s\n", serr);
        return RKV_EXIT_USAGE;
    }
    free(store.machines); /* the twin's machines are the scenario's */
    store.machines = NULL;
    printf("rkv run: %s: %u servers, %u workers in the twin (SimGrid, %s%s)\n", sc->path,
           rkv_scenario_servers(sc), rkv_scenario_workers(sc),
           sc->sim_platform_file[0] ? sc->sim_platform_file
           : sc->sim_platform[0]    ? sc->sim_platform
                                    : "star",
           sc->sim_payloadless ? ", payload-less" : "");
    char fabric[256];
    sim_plat_describe(sc, fabric, sizeof(fabric));
    if (fabric[0])
        printf("rkv run: %s: %s\n", sc->sim_platform, fabric);
    for (unsigned i = 0; i < a->n_cfg; i++)
        printf("%s%s%s", i ? " " : "rkv run: SimGrid configuration: ", a->cfg[i],
               i + 1 == a->n_cfg ? "\n" : "");
    fflush(stdout);
    struct rkv_twin_opts o = {.trace_path = trace,
                              .store = &store,
                              .store_set = store_set,
                              .log_level = (int)ll,
                              .test_corrupt_row = UINT64_MAX,
                              .progress_s = a->progress_s,
                              .max_sim_s = a->max_sim_s,
                              .mem_floor_mib = a->mem_floor_mib,
                              .cfg = a->cfg,
                              .n_cfg = a->n_cfg};
    const char *bad = getenv("RKV_TEST_CORRUPT_ROW"); /* the oracle self-test, as on tcp */
    if (bad && *bad)
        o.test_corrupt_row = strtoull(bad, NULL, 0);
    struct rkv_twin_result res;
    int rc = rkv_twin_run(sc, &o, &res);
    if (rc < 0) {
        fprintf(stderr, "rkv run: twin: %s\n", res.error[0] ? res.error : rkv_strerror(rc));
        rkv_twin_result_free(&res);
        return rc == -RKV_ECONFIG ? RKV_EXIT_USAGE : RKV_EXIT_STORE;
    }
    int code = twin_report(sc, &res, out_dir, plot);
    if (res.trace_error[0]) { /* as on tcp: the run's trace is part of what it was asked */
        fprintf(stderr, "rkv run: %s\n", res.trace_error);
        if (code == RKV_EXIT_OK)
            code = RKV_EXIT_STORE;
    } else if (trace) {
        printf("trace: %s (open in https://ui.perfetto.dev)\n", trace);
    }
    rkv_twin_result_free(&res);
    return code;
}
#else
int cmd_run_twin(struct rkv_scenario *sc, const struct cmd_settings *s, const char *out_dir,
                 int plot, const struct cmd_twin_args *a)
{
    (void)sc, (void)s, (void)out_dir, (void)plot, (void)a;
    fprintf(stderr, "rkv run: this rkv was built without the twin (cmake -DRKV_WITH_SIM=ON, "
                    "needs libsimgrid-dev)\n");
    return RKV_EXIT_USAGE;
}
#endif
