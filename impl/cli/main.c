/* rkv: the command-line entry point. */
#include <stdio.h>
#include <string.h>

#include "harness/calib.h"
#include "cli/cli.h"

static void usage(FILE *out)
{
    fprintf(out,
            "rkv %d.%d: distributed tensor key-value store for ML training\n\n"
            "usage: rkv COMMAND [--help] [settings]\n"
            "  run      FILE: run a scenario on this host, check every value, print the verdict\n"
            "  demo     start servers and workers on this host, run the checked workload,\n"
            "           print the verdict and throughput\n"
            "  server   run one server of a cluster\n"
            "  worker   run one worker: the checked workload, then (worker 0) shutdown\n"
            "  node     server or worker, as --role / RKV_ROLE / DMLC_ROLE / DGL_ROLE says\n"
            "  ls       the tensors of a running store (name, dtype, shape, policy)\n"
            "  config   --dump: every setting, its env var, default and source\n"
            "  doctor   can a verbs run work on this host? each problem with its fix\n"
            "  calibrate  measure this host's backend for the twin (rkv run --predict)\n"
            "  bench    tcp|shm|verbs: throughput and latency as ratios to this host's limits\n"
            "  swarm    generated scenarios with faults, by seed, in the twin; shrinks failures\n\n"
            "exit codes: 0 ok, 1 a value differed from the reference, 2 usage or\n"
            "configuration error, 3 store error (timeout, dead peer, I/O)\n",
            RKV_VERSION_MAJOR, RKV_VERSION_MINOR);
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? RKV_EXIT_USAGE : RKV_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("rkv %s\n", rkv_version());
        return RKV_EXIT_OK;
    }
    if (strcmp(argv[1], "server") == 0)
        return cmd_server(argc - 2, argv + 2);
    if (strcmp(argv[1], "worker") == 0)
        return cmd_worker(argc - 2, argv + 2);
    if (strcmp(argv[1], "config") == 0)
        return cmd_config(argc - 2, argv + 2);
    if (strcmp(argv[1], "node") == 0)
        return cmd_node(argc - 2, argv + 2);
    if (strcmp(argv[1], "run") == 0)
        return cmd_run(argc - 2, argv + 2, argv[0]);
    if (strcmp(argv[1], "demo") == 0)
        return cmd_demo(argc - 2, argv + 2, argv[0]);
    if (strcmp(argv[1], "bench") == 0)
        return cmd_bench(argc - 2, argv + 2, argv[0]);
    if (strcmp(argv[1], "ls") == 0)
        return cmd_ls(argc - 2, argv + 2);
    if (strcmp(argv[1], "doctor") == 0)
        return cmd_doctor(argc - 2, argv + 2);
    if (strcmp(argv[1], "swarm") == 0)
        return cmd_swarm(argc - 2, argv + 2);
    if (strcmp(argv[1], "calibrate") == 0)
        return cmd_calibrate(argc - 2, argv + 2, argv[0]);
    fprintf(stderr, "rkv: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return RKV_EXIT_USAGE;
}
