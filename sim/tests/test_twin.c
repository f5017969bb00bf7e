/* The twin end to end, through the rkv binary (each run is its own process:
 * SimGrid cannot be initialised twice): determinism of the event trace, seeds
 * and jitter that explore other interleavings, every platform, the Chrome
 * trace, a payload-less scale run, and clear errors for bad platforms. */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness/tests/rkv_run.h"
#include "impl/tests/mem_cgroup.h"

static int run(const char *args)
{
    return run_rkv("", args);
}

static void run_pass(const char *args)
{
    int rc = run(args);
    if (rc != 0 || !strstr(out, "verdict: PASS"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
}

/* The simulated time the last run's report printed. */
static double out_sim_s(void)
{
    double sim = -1;
    const char *t = strstr(out, "simulated time ");
    if (!t || sscanf(t, "simulated time %lf", &sim) != 1)
        fail_msg("no simulated time in:\n%s", out);
    return sim;
}

/* The event-trace hash printed by a twin run. */
static void hash_of(const char *args, char hash[17])
{
    run_pass(args);
    const char *h = strstr(out, "event trace hash ");
    assert_non_null(h);
    memcpy(hash, h + 17, 16);
    hash[16] = 0;
}

static void test_same_seed_same_trace(void **state)
{
    (void)state;
    char a[17], b[17], c[17];
    hash_of("run " SCEN_DIR "/quickstart.yaml", a);
    hash_of("run " SCEN_DIR "/quickstart.yaml", b);
    assert_string_equal(a, b);
    hash_of("run " SCEN_DIR "/quickstart.yaml --jitter 0.5 --seed 3", a);
    hash_of("run " SCEN_DIR "/quickstart.yaml --jitter 0.5 --seed 3", b);
    assert_string_equal(a, b);
    hash_of("run " SCEN_DIR "/quickstart.yaml --jitter 0.5 --seed 4", c);
    assert_string_not_equal(a, c);
    printf("# quickstart --jitter 0.5: seed 3 -> %s (twice), seed 4 -> %s\n", a, c);
}

static void test_other_seed_other_trace(void **state)
{
    (void)state;
    char a[17], b[17];
    hash_of("run " SCEN_DIR "/quickstart.yaml --seed 1", a);
    hash_of("run " SCEN_DIR "/quickstart.yaml --seed 2", b);
    assert_string_not_equal(a, b);
}

/* Real-payload scenarios under jitter and several seeds: the interleavings a
 * deterministic simulator would otherwise never show. */
static void test_scenarios_pass_under_jitter(void **state)
{
    (void)state;
    DIR *d = opendir(SCEN_DIR);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".yaml") || !strncmp(e->d_name, "sim-", 4) ||
            !strncmp(e->d_name, "faults-", 7))
            continue;
        for (int seed = 1; seed <= 3; seed++) {
            char args[512];
            snprintf(args, sizeof(args), "run %s/%.200s --jitter 1 --seed %d", SCEN_DIR, e->d_name,
                     seed);
            run_pass(args);
        }
        n++;
    }
    closedir(d);
    assert_true(n >= 9);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* quickstart.yaml with its sim block replaced by `sim`. */
static void quickstart_with(const char *path, const char *sim)
{
    FILE *in = fopen(SCEN_DIR "/quickstart.yaml", "r");
    FILE *o = fopen(path, "w");
    assert_non_null(in);
    assert_non_null(o);
    char line[512];
    while (fgets(line, sizeof(line), in))
        fputs(line, o);
    fprintf(o, "%s", sim);
    fclose(in);
    fclose(o);
}

static void test_every_platform(void **state)
{
    (void)state;
    static const char *const sims[] = {
        "sim: {platform: star, bandwidth_gbps: 25, latency_us: 2}\n",
        "sim: {platform: cluster, backbone_gbps: 40}\n",
        "sim: {platform: fattree}\n",
        "sim: {platform: star, solver: fairbottleneck, row_cost_ns: 100, msg_cost_ns: 50}\n",
        "sim: {platform_file: twin-platform.xml}\n",
    };
    write_file("twin-platform.xml",
               "<?xml version='1.0'?>\n"
               "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
               "<platform version=\"4.1\">\n"
               "  <cluster id=\"c\" prefix=\"m\" suffix=\"\" radical=\"0-1\" speed=\"1Gf\" "
               "bw=\"10Gbps\" lat=\"5us\"/>\n"
               "</platform>\n");
    for (size_t i = 0; i < sizeof(sims) / sizeof(sims[0]); i++) {
        quickstart_with("twin-platform.yaml", sims[i]);
        run_pass("run twin-platform.yaml");
    }
}

/* The CPU the twin charged is reported, and the cores could have done it:
 * no more than simulated time x the cores of 2 machines; none without costs. */
static void test_cpu_charged_is_reported(void **state)
{
    (void)state;
    quickstart_with("twin-cpu.yaml", "sim: {platform: star, cores: 2, msg_cost_ns: 20000}\n");
    run_pass("run twin-cpu.yaml");
    const char *c = strstr(out, "CPU charged in the twin: ");
    assert_non_null(c);
    double cpu = 0, node = -1, sim = out_sim_s();
    assert_int_equal(sscanf(c, "CPU charged in the twin: %lf core-s, %lf", &cpu, &node), 2);
    printf("# msg_cost_ns 20000: %.4f core-s charged (node code %.4f) in %.4f s\n", cpu, node, sim);
    assert_true(cpu > 0);
    assert_true(node == 0); /* no measured CPU without a calibration */
    assert_true(cpu <= sim * 2 * 2 * 1.0001);
    quickstart_with("twin-cpu.yaml", "sim: {platform: star}\n");
    run_pass("run twin-cpu.yaml");
    assert_null(strstr(out, "CPU charged in the twin"));
    assert_null(strstr(out, "\nwall time ")); /* a real run's line, once printed here too */
}

/* One twin run of quickstart with sim: SIM; its simulated time, CPU and
 * bursts that found their core idle (-1: no run-queue line). */
static void queue_run(const char *sim, double *t, double *cpu, long *wakes)
{
    quickstart_with("twin-queue.yaml", sim);
    run_pass("run twin-queue.yaml");
    const char *cs = strstr(out, "CPU charged in the twin: ");
    const char *qs = strstr(out, "The cores were per-core run queues: ");
    assert_non_null(cs);
    *t = out_sim_s();
    assert_int_equal(sscanf(cs, "CPU charged in the twin: %lf", cpu), 1);
    *wakes = -1;
    if (qs)
        assert_int_equal(sscanf(qs, "The cores were per-core run queues: %ld", wakes), 1);
}

/* scheduler: cores runs no more bursts at once than the cores (1 per
 * machine here), and a core that sat idle costs wake_us before a burst. */
static void test_per_core_queues(void **state)
{
    (void)state;
    double t0, c0, t1, c1;
    long w0, w1;
    queue_run("sim: {platform: star, cores: 1, msg_cost_ns: 20000}\n", &t0, &c0, &w0);
    assert_int_equal(w0, -1);
    queue_run("sim: {platform: star, cores: 1, msg_cost_ns: 20000, scheduler: cores}\n", &t0, &c0,
              &w0);
    queue_run(
        "sim: {platform: star, cores: 1, msg_cost_ns: 20000, scheduler: cores, wake_us: 50}\n", &t1,
        &c1, &w1);
    printf("# per-core run queues: %.4f s, %.4f core-s, %ld idle cores taken; wake_us 50: %.4f s, "
           "%ld\n",
           t0, c0, w0, t1, w1);
    assert_true(c0 <= t0 * 2 * 1.0001);
    assert_true(c1 <= t1 * 2 * 1.0001);
    assert_true(w0 > 0);
    assert_true(w1 > 0);
    assert_true(t1 > t0 + w1 * 50e-6 / 2 * 0.5); /* wake-ups on the path cost their time */
}

static void test_platform_without_the_hosts_is_an_error(void **state)
{
    (void)state;
    write_file("twin-small.xml",
               "<?xml version='1.0'?>\n"
               "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
               "<platform version=\"4.1\">\n"
               "  <cluster id=\"c\" prefix=\"m\" suffix=\"\" radical=\"0-0\" speed=\"1Gf\" "
               "bw=\"10Gbps\" lat=\"5us\"/>\n"
               "</platform>\n");
    quickstart_with("twin-small.yaml", "sim: {platform_file: twin-small.xml}\n");
    assert_int_equal(run("run twin-small.yaml"), 2);
    assert_non_null(strstr(out, "no host named m1"));
    quickstart_with("twin-bad.yaml", "sim: {platform: ring}\n");
    assert_int_equal(run("run twin-bad.yaml"), 2);
    assert_non_null(strstr(out, "twin-bad.yaml:"));
    assert_non_null(strstr(out, "platform: expected one of star, cluster, fattree"));
    /* A file SimGrid cannot parse aborted the run (exit 134, no word); an
     * empty one or /dev/null did too, and a directory said only "input in
     * flex scanner failed". */
    write_file("twin-junk.xml", "not xml <<<\n");
    quickstart_with("twin-junk.yaml", "sim: {platform_file: twin-junk.xml}\n");
    assert_int_equal(run("run twin-junk.yaml"), 2);
    assert_non_null(strstr(out, "twin-junk.yaml:"));
    assert_non_null(strstr(out, "platform_file twin-junk.xml: SimGrid ended the process"));
    static const char *const not_files[][2] = {{"/dev/null", "not a regular file"},
                                               {"/tmp", "a directory"}};
    for (int i = 0; i < 2; i++) {
        char sim[128];
        snprintf(sim, sizeof(sim), "sim: {platform_file: %s}\n", not_files[i][0]);
        quickstart_with("twin-junk.yaml", sim);
        assert_int_equal(run("run twin-junk.yaml"), 2);
        assert_non_null(strstr(out, "twin-junk.yaml:"));
        assert_non_null(strstr(out, not_files[i][1]));
    }
}

/* What SimGrid meets only mid-run, and aborted on (exit 134, a backtrace),
 * is found before the run: a link of no bandwidth or a negative latency,
 * two machines with no route between them (SimGrid crashed looking it up;
 * with messages of 1 KiB or less, which the twin charges itself, the run
 * passed as if they cost nothing), and a model setting that fails only
 * with a transfer. Each is exit 2 naming it (an outside tester's files). */
static void test_platform_checked_before_the_run(void **state)
{
    (void)state;
    static const struct {
        const char *zone, *want;
    } cases[] = {
        {"<link id=\"l\" bandwidth=\"0Bps\" latency=\"1us\"/>\n"
         "<route src=\"m0\" dst=\"m1\"><link_ctn id=\"l\"/></route>\n",
         "link l has bandwidth 0 B/s"},
        {"<link id=\"l\" bandwidth=\"10GBps\" latency=\"-1us\"/>\n"
         "<route src=\"m0\" dst=\"m1\"><link_ctn id=\"l\"/></route>\n",
         "latency -1e-06 s"},
        {"<link id=\"l\" bandwidth=\"10GBps\" latency=\"1us\"/>\n", "no route from m0 to m1"},
    };
    for (int i = 0; i < 3; i++) {
        char xml[1024];
        snprintf(xml, sizeof(xml),
                 "<?xml version='1.0'?>\n"
                 "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
                 "<platform version=\"4.1\"><zone id=\"z\" routing=\"Full\">\n"
                 "<host id=\"m0\" speed=\"1Gf\" core=\"4\"/><host id=\"m1\" speed=\"1Gf\" "
                 "core=\"4\"/>\n%s</zone></platform>\n",
                 cases[i].zone);
        write_file("twin-probe.xml", xml);
        quickstart_with("twin-probe.yaml", "sim: {platform_file: twin-probe.xml}\n");
        int rc = run("run twin-probe.yaml");
        if (rc != 2 || !strstr(out, "platform_file twin-probe.xml: ") ||
            !strstr(out, cases[i].want))
            fail_msg("case %d: exit %d\n%s", i, rc, out);
    }
    /* Three machines, m1 -> m2 the one route missing: the check of up to 64
     * machines took m0 -> m2 for it (the sample of larger clusters), and
     * SimGrid aborted mid-run (an outside tester's one-way platform). */
    write_file("twin-probe.xml",
               "<?xml version='1.0'?>\n"
               "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
               "<platform version=\"4.1\"><zone id=\"z\" routing=\"Full\">\n"
               "<host id=\"m0\" speed=\"1Gf\" core=\"4\"/><host id=\"m1\" speed=\"1Gf\" "
               "core=\"4\"/><host id=\"m2\" speed=\"1Gf\" core=\"4\"/>\n"
               "<link id=\"l\" bandwidth=\"10GBps\" latency=\"1us\"/>\n"
               "<route src=\"m0\" dst=\"m1\"><link_ctn id=\"l\"/></route>\n"
               "<route src=\"m0\" dst=\"m2\"><link_ctn id=\"l\"/></route>\n"
               "<route src=\"m2\" dst=\"m1\" symmetrical=\"NO\"><link_ctn id=\"l\"/></route>\n"
               "</zone></platform>\n");
    quickstart_with("twin-probe.yaml", "sim: {platform_file: twin-probe.xml}\n");
    assert_int_equal(system("sed -i 's/^  machines: 2$/  machines: 3/' twin-probe.yaml"), 0);
    int rc = run("run twin-probe.yaml");
    if (rc != 2 || !strstr(out, "no route from m1 to m2"))
        fail_msg("one-way route: exit %d\n%s", rc, out);
    /* A host of speed 0: SimGrid aborted at the first burst of CPU (an
     * outside tester's file, with row_cost_ns). */
    write_file("twin-probe.xml",
               "<?xml version='1.0'?>\n"
               "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
               "<platform version=\"4.1\"><zone id=\"z\" routing=\"Full\">\n"
               "<host id=\"m0\" speed=\"0f\" core=\"4\"/><host id=\"m1\" speed=\"1Gf\" "
               "core=\"4\"/>\n"
               "<link id=\"l\" bandwidth=\"10GBps\" latency=\"1us\"/>\n"
               "<route src=\"m0\" dst=\"m1\"><link_ctn id=\"l\"/></route>\n"
               "</zone></platform>\n");
    quickstart_with("twin-probe.yaml", "sim: {platform_file: twin-probe.xml, row_cost_ns: 100}\n");
    rc = run("run twin-probe.yaml");
    if (rc != 2 || !strstr(out, "host m0 has speed 0 flop/s"))
        fail_msg("host of speed 0: exit %d\n%s", rc, out);
    /* A plugin ended a passing run with SIGSEGV (plugin:link_energy). */
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg plugin:link_energy"), 2);
    assert_non_null(strstr(out, "SimGrid plugins are not supported in the twin"));
    /* model-check/replay:1 aborted the run (SIGABRT) with no message. */
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg model-check/replay:1"), 2);
    assert_non_null(strstr(out, "does not run under SimGrid's model checker"));
    unlink("twin-probe.xml");
    unlink("twin-probe.yaml");
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg network/bandwidth-factor:0"), 2);
    assert_non_null(strstr(out, "Bandwidth factor cannot be 0"));
    run_pass("run " SCEN_DIR "/quickstart.yaml --cfg network/latency-factor:2");
    /* SimGrid takes it, and pulls came faster than their bandwidth allows. */
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg network/latency-factor:-1"), 2);
    assert_non_null(strstr(out, "network/latency-factor:-1: expected 0 or more"));
    /* A looser precision ended transfers early: 1,018 GB/s out of 200 GB/s
     * of links, PASS (an outside tester). */
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg surf/precision:1e-3"), 2);
    assert_non_null(strstr(out, "--cfg surf/precision:0.001: expected above 0 and at most 1e-09"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg maxmin/precision:1e-3"), 2);
    assert_non_null(
        strstr(out, "--cfg maxmin/precision:0.001: expected above 0 and at most 1e-05"));
    /* SimGrid's keys with capitals were "expected KEY:VALUE". */
    run_pass("run " SCEN_DIR "/quickstart.yaml --cfg network/TCP-gamma:4194304");
}

static void test_chrome_trace(void **state)
{
    (void)state;
    unlink("twin-trace.json");
    run_pass("run " SCEN_DIR "/quickstart.yaml --trace twin-trace.json");
    FILE *f = fopen("twin-trace.json", "r");
    assert_non_null(f);
    static char buf[1 << 22];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    fclose(f);
    assert_true(n > 1000);
    assert_int_equal(strncmp(buf, "{\"displayTimeUnit\"", 18), 0);
    assert_non_null(strstr(buf, "\"name\":\"write_imm\""));
    assert_non_null(strstr(buf, "\"name\":\"thread_name\""));
    /* Each machine named, as a tcp trace names each process. */
    assert_non_null(strstr(buf, "\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,"
                                "\"args\":{\"name\":\"machine 1\"}"));
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    assert_true(n > 2 && buf[n - 1] == '}' && buf[n - 2] == ']');
}

/* AddressSanitizer's shadow memory and quarantine put a run's RSS past
 * any budget set for the run itself (211 MB here against 75 MB): under it
 * the run is checked, its memory is not. */
#if defined(__SANITIZE_ADDRESS__)
#define TWIN_RSS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TWIN_RSS_MEANINGFUL 0
#endif
#endif
#ifndef TWIN_RSS_MEANINGFUL
#define TWIN_RSS_MEANINGFUL 1
#endif

/* A run with payload takes its receive buffers from the node's shared pool,
 * not rx_depth x ctrl_buf_bytes (512 KiB) per connection side, of which
 * the sim NIC wrote a fresh buffer (a new resident page) with every
 * message. 8 machines of 1 server + 7 workers, 60 rounds of one request
 * per worker to every server: 218 MB peak with receives per connection,
 * 75 MB from the pool (the same trace hash). The run is measured in a
 * child of its own, whose RUSAGE_CHILDREN sees only it. */
static void test_payload_receives_from_the_pool(void **state)
{
    (void)state;
    FILE *f = fopen("twin-many-msgs.yaml", "w");
    assert_non_null(f);
    fputs("seed: 5\n"
          "cluster: {machines: 8, servers_per_machine: 1, workers_per_machine: 7}\n"
          "tensors:\n"
          "  - {name: emb, dtype: f32, rows: 4096, shape: [16], partition: range}\n"
          "workload:\n"
          "  - {name: r0, tensor: emb, push: 0.5, push_op: sum, ids_per_request: 64, "
          "keys: uniform, rounds: 60, barrier_after: true}\n",
          f);
    assert_int_equal(fclose(f), 0);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        int rc = run("run twin-many-msgs.yaml");
        struct rusage ru;
        getrusage(RUSAGE_CHILDREN, &ru);
        long v[2] = {rc == 0 && strstr(out, "verdict: PASS") ? 1 : 0, ru.ru_maxrss};
        ssize_t n = write(fds[1], v, sizeof(v));
        _exit(n == (ssize_t)sizeof(v) ? 0 : 1);
    }
    close(fds[1]);
    long v[2] = {0, 0};
    ssize_t n = read(fds[0], v, sizeof(v));
    close(fds[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(n, (ssize_t)sizeof(v));
    assert_int_equal(v[0], 1);
    if (TWIN_RSS_MEANINGFUL && v[1] > 150 * 1024)
        fail_msg("peak RSS %ld KiB, over the 150 MiB budget", v[1]);
}

/* sim-4096.yaml shrunk to 64 machines (256 nodes): the payload-less path
 * (thin rows, modelled sizes, handler cost) end to end with the oracle,
 * twice with the same trace hash. */
static void test_payloadless_scale_run(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "sed 's/machines: 1024/machines: 64/; s/rows: 16384$/rows: 1024/' %s/sim-4096.yaml "
             "> twin-256.yaml",
             SCEN_DIR);
    assert_int_equal(system(cmd), 0);
    char a[17], b[17];
    hash_of("run twin-256.yaml", a);
    assert_non_null(strstr(out, "64 servers, 192 workers"));
    assert_non_null(strstr(out, "payload-less"));
    /* Determinism at scale: the same seed gives the same trace. */
    hash_of("run twin-256.yaml", b);
    assert_string_equal(a, b);
}

/* The 65,536-node scenario loads (the machine cap is the wire format's,
 * not a 1,024-entry table's): its launch line names every node. */
static void test_large_cluster_loads(void **state)
{
    (void)state;
    assert_int_equal(run("run " SCEN_DIR "/sim-65536.yaml --launcher srun"), 0);
    assert_non_null(strstr(out, "srun --ntasks 65536 "));
    assert_non_null(strstr(out, "ranks 0..16383 are servers"));
}

/* --cfg passes SimGrid configuration through and the report names it; a
 * key SimGrid does not know is a clear error, not an abort. --progress
 * prints progress lines. */
static void test_cfg_and_progress(void **state)
{
    (void)state;
    run_pass("run " SCEN_DIR "/quickstart.yaml --cfg contexts/stack-size:64 --progress 0.000001");
    assert_non_null(strstr(out, "SimGrid configuration: contexts/stack-size:64"));
    assert_non_null(strstr(out, "rkv: twin: simulated "));
    assert_non_null(strstr(out, " nodes finished"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg no/such-key:1"), 2);
    assert_non_null(strstr(out, "SimGrid rejected the configuration"));
    assert_non_null(strstr(out, "Bad config key: no/such-key"));
    /* Stacks too small overflowed into their neighbours (SIGSEGV). */
    const char *stacks[] = {"0", "16", "-5", "65537"};
    for (int i = 0; i < 4; i++) {
        char args[256];
        snprintf(args, sizeof(args), "run %s/quickstart.yaml --cfg contexts/stack-size:%s",
                 SCEN_DIR, stacks[i]);
        assert_int_equal(run(args), 2);
        assert_non_null(strstr(out, "expected 64..65536 (KiB)"));
    }
    /* Parallel contexts: wrong values, then SIGSEGV. */
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg contexts/nthreads:2"), 2);
    assert_non_null(strstr(out, "only contexts/nthreads:1 is supported"));
    run_pass("run " SCEN_DIR "/quickstart.yaml --cfg contexts/nthreads:1");
    /* Models that end the process on meeting the platform: the Constant
     * model aborts on a link, ns-3 divided by zero (SIGFPE). */
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg network/model:Constant"), 2);
    assert_non_null(strstr(out, "there is no link in the Constant network model"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg network/model:ns-3"), 2);
    assert_non_null(strstr(out, "--cfg: SimGrid"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --cfg novalue"), 2);
    assert_non_null(strstr(out, "expected KEY:VALUE"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --progress soon"), 2);
    assert_non_null(strstr(out, "--progress: expected seconds"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --backend tcp --cfg network/model:CM02"),
                     2);
    assert_non_null(strstr(out, "are twin options"));
}

/* 1 kbit/s links: each request's 8 KiB of rows takes over a minute, so the
 * store's settings decide how a run ends. */
static const char slow_links_yaml[] = "seed: 1\n"
                                      "cluster:\n"
                                      "  machines: 2\n"
                                      "  servers_per_machine: 1\n"
                                      "  workers_per_machine: 1\n"
                                      "tensors:\n"
                                      "  - name: t\n"
                                      "    dtype: f32\n"
                                      "    rows: 64\n"
                                      "    shape: [256]\n"
                                      "workload:\n"
                                      "  - name: slow\n"
                                      "    tensor: t\n"
                                      "    push: 0.5\n"
                                      "    push_op: sum\n"
                                      "    ids_per_request: 8\n"
                                      "    rounds: 20\n"
                                      "    barrier_after: true\n"
                                      "sim:\n"
                                      "  bandwidth_gbps: 0.000001\n";

static void write_slow_links(char path[64])
{
    snprintf(path, 64, "/tmp/rkv-slow-links-%d.yaml", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(slow_links_yaml, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* The settings a tcp run passes to every node reach the twin's nodes too:
 * they were checked and then dropped, so a run with --timeout-ms (or
 * RKV_TIMEOUT_MS) timed out after the default 30 s all the same. Flags
 * for what the twin owns are refused, not ignored. */
static void test_settings_reach_the_twin(void **state)
{
    (void)state;
    char path[64], args[256];
    write_slow_links(path);
    snprintf(args, sizeof(args), "run %s", path);
    assert_int_not_equal(run(args), 0);
    assert_non_null(strstr(out, "request timed out after 30000 ms"));
    snprintf(args, sizeof(args), "run %s --timeout-ms 86400000", path);
    run_pass(args);
    snprintf(args, sizeof(args), "run %s", path);
    int rc = run_rkv("RKV_TIMEOUT_MS=86400000", args);
    if (rc != 0 || !strstr(out, "verdict: PASS"))
        fail_msg("RKV_TIMEOUT_MS=86400000 rkv %s: exit %d\n%s", args, rc, out);
    snprintf(args, sizeof(args), "run %s --timeout-ms 7000", path);
    assert_int_not_equal(run(args), 0);
    assert_non_null(strstr(out, "request timed out after 7000 ms"));
    unlink(path);
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --base-port 5000"), 2);
    assert_non_null(strstr(out, "--base-port has no meaning in the twin"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --verbs-dev rxe0"), 2);
    assert_non_null(strstr(out, "--verbs-dev has no meaning in the twin"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --rows 5"), 2);
    assert_non_null(strstr(out, "--rows: the scenario file decides"));
    /* A payload-less run keeps an rx_depth the user chose (its own is 8). */
    run_pass("run " SCEN_DIR "/quickstart.yaml --rx-depth 4");
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --rx-depth 2"), 2);
}

/* Eight servers each say they stopped: at the default log level three
 * lines show and one counts the other five (at 65,536 nodes it was 16,384
 * lines); at --log-level 2 each shows, and nothing is counted. */
/* The faults line names every fault a run may have (32, each with its
 * restart): it was cut at 1,024 characters, after the 20th. */
static void test_faults_line_whole(void **state)
{
    (void)state;
    char path[64], text[8192];
    snprintf(path, sizeof(path), "/tmp/rkv-twin-faults-%d.yaml", (int)getpid());
    int n = snprintf(text, sizeof(text),
                     "seed: 7\ncluster:\n  machines: 2\n  servers_per_machine: 2\n"
                     "  workers_per_machine: 1\n  workers: 1\n  durable: true\n"
                     "  retry_ms: 30000\ntensors:\n  - name: emb\n    dtype: f32\n"
                     "    rows: 256\n    shape: [2]\nworkload:\n  - name: p\n    tensor: emb\n"
                     "    push: 1.0\n    push_op: sum\n    ids_per_request: 8\n"
                     "    keys: remote-only\n    rounds: 6000\nfaults:\n");
    for (int i = 0; i < 32; i++)
        n += snprintf(text + n, sizeof(text) - (size_t)n,
                      "  - kind: crash\n    target: s1.%d\n    at_s: %.3f\n"
                      "    restart_after_s: 0.001\n",
                      i % 2, 0.002 + i * 0.004);
    assert_true(n < (int)sizeof(text));
    write_file(path, text);
    char args[128];
    snprintf(args, sizeof(args), "run %s", path);
    run_pass(args);
    unlink(path);
    const char *line = strstr(out, "\nfaults: ");
    assert_non_null(line);
    const char *end = strchr(line + 1, '\n');
    int crashes = 0;
    for (const char *p = line + 1; (p = strstr(p, " crashed at ")) && (!end || p < end); p++)
        crashes++;
    assert_int_equal(crashes, 32);
    assert_non_null(
        strstr(line, "s1.1 crashed at 0.126000 s, restarted at 0.127000 s; 0 surviving"));
}

static void test_log_lines_folded(void **state)
{
    (void)state;
    write_file("twin-fold.yaml", "seed: 1\n"
                                 "cluster: {machines: 8, servers_per_machine: 1, "
                                 "workers_per_machine: 1}\n"
                                 "tensors:\n"
                                 "  - {name: t, dtype: f32, rows: 64, shape: [4]}\n"
                                 "workload:\n"
                                 "  - {name: p, tensor: t, push: 0.5, rounds: 2}\n"
                                 "sim: {platform: star}\n");
    run_pass("run twin-fold.yaml");
    /* Server 0's line is its own (it checks ids), the other seven alike. */
    assert_int_equal(out_count(": stopping: SHUTDOWN from client 0"), 4);
    assert_non_null(strstr(out, "WARN twin: 4 more lines like \"server #: stopping: SHUTDOWN "
                                "from client # (as its connection says: only server # checks "
                                "ids)\" (the last from s"));
    run_pass("run twin-fold.yaml --log-level 2");
    assert_int_equal(out_count(": stopping: SHUTDOWN from client 0"), 8);
    assert_null(strstr(out, "more lines like"));
}

/* A run still going at its simulated-time limit ends as a FAIL naming the
 * nodes still running; SimGrid aborted the process tearing the world down
 * ("Cannot destroy semaphore since someone is still using it"). Here with
 * the limit lowered, and at the default 3,600 s with a server that no
 * shutdown reaches (its workers timed out over 1 kbit/s links). The nodes
 * stopped are abandoned as a crash's are: leaks are not counted. */
/* Workers that never join (a round trip longer than the connect time):
 * no SHUTDOWN could come, and the servers waited for one until
 * --max-sim-s (3,600 simulated seconds, 35 s of wall time at 1e6), with a
 * verdict that named no limit. The twin stops them a second after the
 * last worker ended on its error (an outside tester's file). */
static void test_workers_that_never_join_end_the_run(void **state)
{
    (void)state;
    quickstart_with("twin-far.yaml", "sim: {latency_us: 2e7}\n");
    int rc = run("run twin-far.yaml --max-sim-s 1000000");
    unlink("twin-far.yaml");
    if (rc != 3 || !strstr(out, "verdict: FAIL") || !strstr(out, "cannot connect to server 0"))
        fail_msg("exit %d\n%s", rc, out);
    double sim_s = out_sim_s();
    if (!(sim_s < 100))
        fail_msg("simulated %g s\n%s", sim_s, out);
    assert_null(strstr(out, "reached its limit"));
}

static void test_simulated_time_limit(void **state)
{
    (void)state;
    const char *asan = "ASAN_OPTIONS=detect_leaks=0";
    int rc = run_rkv(asan, "run " SCEN_DIR "/quickstart.yaml --max-sim-s 0.0002");
    if (rc != 3 || !strstr(out, "verdict: FAIL"))
        fail_msg("exit %d\n%s", rc, out);
    assert_non_null(strstr(out, "reached its limit of 0.0002 simulated seconds (--max-sim-s) "
                                "with 8 of 8 nodes still running (s0.0, s0.1,"));
    /* In the verdict itself, not only on a line of its own (it said "a
     * process failed (its error is on stderr)"). */
    assert_non_null(strstr(out, "verdict: FAIL (the simulation reached its limit"));
    /* The clock's end, not the last node's (none had ended: the line and
     * the trace hash were missing). */
    assert_non_null(strstr(out, "simulated time 0.000200 s"));
    /* The limit past the work's end changes nothing: same trace as without
     * (compared, not pinned: a message's size moves every hash). */
    char without[17], with[17];
    hash_of("run " SCEN_DIR "/quickstart.yaml", without);
    hash_of("run " SCEN_DIR "/quickstart.yaml --max-sim-s 1", with);
    assert_string_equal(without, with);
    /* The run ends with its work (about 1.4 ms): a node's stop does not
     * sit out its progress task's 50 ms poll (nic.h poll_wake), which
     * made every run's simulated time 50 ms at least. */
    double sim = out_sim_s();
    if (sim > 0.005)
        fail_msg("simulated time %.6f s: the stop waited out a poll timeout\n%s", sim, out);
    char path[64], args[256];
    write_slow_links(path);
    snprintf(args, sizeof(args), "run %s --timeout-ms 5000", path);
    rc = run_rkv(asan, args);
    unlink(path);
    if (rc != 3 || !strstr(out, "verdict: FAIL"))
        fail_msg("exit %d\n%s", rc, out);
    /* The workers' own error is the cause named, not the server left waiting. */
    assert_non_null(strstr(out, "node failure: w0: push: server 1: request timed out after 5000"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --max-sim-s 0"), 2);
    assert_non_null(strstr(out, "--max-sim-s: expected simulated seconds"));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --backend tcp --max-sim-s 5"), 2);
    assert_non_null(strstr(out, "are twin options"));
}

/* A twin past the host's memory was ended by the kernel's OOM killer
 * (SIGKILL: "Killed" and nothing else; 33,000 machines of 1 server and 1
 * worker each, whose workers all reach the same 100 servers, at 23 GB).
 * Below the floor of available memory it stops with a line saying so and
 * exit 3. Here the floor is set above any host's memory. */
static void test_memory_floor(void **state)
{
    (void)state;
    const char *asan = "ASAN_OPTIONS=detect_leaks=0";
    unlink("twin-floor.json");
    int rc = run_rkv(asan, "run " SCEN_DIR
                           "/quickstart.yaml --mem-floor-mib 1073741824 --trace twin-floor.json");
    if (rc != 3 || !strstr(out, "rkv: twin: stopped: the host has "))
        fail_msg("exit %d\n%s", rc, out);
    assert_non_null(strstr(out, "below the floor of 1073741824 MiB (--mem-floor-mib)"));
    assert_non_null(strstr(out, "need more memory than the host has"));
    /* Its trace is whole, as a stopping signal's is: it was cut at 4,096
     * bytes, mid-record (an outside tester). */
    assert_non_null(strstr(out, "the trace twin-floor.json holds what ran until then"));
    assert_int_equal(sh("tail -c 4 twin-floor.json | od -An -c | tr -d ' '"), 0);
    if (!strstr(out, "]}\\n"))
        fail_msg("the trace ends with %s", out);
    unlink("twin-floor.json");
    /* The default floor (2 % of the host's memory) leaves a run alone. */
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml"), 0);
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --mem-floor-mib 0"), 2);
    assert_non_null(strstr(out, "--mem-floor-mib: expected MiB in 1.."));
    assert_int_equal(run("run " SCEN_DIR "/quickstart.yaml --backend tcp --mem-floor-mib 5"), 2);
    assert_non_null(strstr(out, "are twin options"));
}

/* A run in a memory cgroup smaller than it needs (a CI container's limit
 * on a host with memory to spare): the cgroup's OOM killer ended it with
 * SIGKILL and no word while the host's MemAvailable stayed far above the
 * floor. Now the floor reads the cgroup's headroom too. sim-4096 peaks at
 * ~380 MiB; the cgroup allows 256. */
static void test_memory_floor_in_a_cgroup(void **state)
{
    (void)state;
    char dir[1100];
    if (mem_cgroup_make(256, dir, sizeof(dir)) < 0)
        skip();
    char cmd[2600];
    snprintf(cmd, sizeof(cmd),
             "sh -c 'echo $$ > %s/cgroup.procs && exec env ASAN_OPTIONS=detect_leaks=0 %s run "
             "%s/sim-4096.yaml' 2>&1",
             dir, RKV_BIN, SCEN_DIR);
    int rc = sh(cmd);
    rmdir(dir);
    if (rc != 3 || !strstr(out, "rkv: twin: stopped: the memory cgroup this run is in (limit "
                                "256 MiB) has "))
        fail_msg("exit %d\n%s", rc, out);
    assert_non_null(strstr(out, "need more memory than the cgroup allows"));
}

/* The MiB of a phase's row: column 4 of its table row. */
static double phase_mib(const char *phase)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\n| %s | ", phase);
    const char *r = strstr(out, pat);
    assert_non_null(r);
    unsigned pushes, pulls;
    double mib;
    assert_int_equal(sscanf(r + strlen(pat), "%u | %u | %lf", &pushes, &pulls, &mib), 3);
    return mib;
}

/* Payload-less runs report the declared rows' bytes: MiB and GB/s counted
 * the thin rows the store carried (0.0 MiB and 0.001 GB/s where the same
 * run with payloads moved 10 MiB at 17 GB/s). */
static void test_payloadless_reports_declared_bytes(void **state)
{
    (void)state;
    const char *body = "seed: 1\n"
                       "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
                       "tensors:\n"
                       "  - {name: t, dtype: f32, rows: 64, shape: [16384]}\n"
                       "workload:\n"
                       "  - {name: p, tensor: t, push: 0.5, ids_per_request: 4, keys: "
                       "remote-only, rounds: 20}\n";
    double mib[2];
    for (int thin = 0; thin < 2; thin++) {
        char path[64], args[128];
        snprintf(path, sizeof(path), "/tmp/rkv-thin-%d-%d.yaml", (int)getpid(), thin);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fprintf(f, "%s%s", body, thin ? "sim:\n  payloadless: true\n" : "");
        assert_int_equal(fclose(f), 0);
        snprintf(args, sizeof(args), "run %s", path);
        run_pass(args);
        unlink(path);
        mib[thin] = phase_mib("p");
    }
    if (!(mib[0] > 9.0) || mib[1] != mib[0])
        fail_msg("MiB with payloads %.1f, payload-less %.1f", mib[0], mib[1]);
}

/* A run with payload ends when its work does: each server lingered in
 * 1 ms naps until its SHUTDOWN ack had gone, so a run whose last SHUTDOWN
 * came at 35 us said "simulated time 0.001035 s" (an outside tester). */
static void test_run_ends_with_the_last_ack(void **state)
{
    (void)state;
    char path[64], args[128];
    tmp_scenario(path, sizeof(path), "linger",
                 "seed: 1\n"
                 "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1}\n"
                 "tensors:\n  - {name: t, rows: 64, shape: [4]}\n"
                 "workload:\n  - {name: p, tensor: t, push: 0.5, rounds: 4}\n");
    snprintf(args, sizeof(args), "run %s --log-level 2", path);
    run_pass(args);
    unlink(path);
    const char *stop = strstr(out, "stopping: SHUTDOWN from client 0");
    assert_non_null(stop);
    while (stop > out && strncmp(stop, "[sim ", 5) != 0)
        stop--;
    double stop_s = -1, sim = out_sim_s();
    assert_int_equal(sscanf(stop, "[sim %lf]", &stop_s), 1);
    if (!(sim >= stop_s && sim - stop_s < 50e-6))
        fail_msg("the last SHUTDOWN at %.6f s, the run ended at %.6f s\n%s", stop_s, sim, out);
}

/* Crash faults: the named node dies mid-run, every survivor ends on a named
 * error (no hang, no timeout), nothing pulled was wrong; under three seeds
 * of jitter. A crashed node's memory is abandoned like a killed process's,
 * so LeakSanitizer is told not to count it. */
static void test_crash_faults(void **state)
{
    (void)state;
    static const char *const files[] = {"faults-crash-server.yaml", "faults-crash-worker.yaml"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        for (int seed = 1; seed <= 3; seed++) {
            char args[512], dir[64] = "";
            /* One seed writes report.json: its "stats" were left out of fault
             * runs (the survivors ended on an error), where tcp keeps them. */
            if (seed == 1)
                snprintf(dir, sizeof(dir), "/tmp/rkv-twin-crash-%d-%zu", (int)getpid(), i);
            snprintf(args, sizeof(args), "run %s/%s --jitter 1 --seed %d%s%s", SCEN_DIR, files[i],
                     seed, *dir ? " --out " : "", dir);
            int rc = run_rkv("ASAN_OPTIONS=detect_leaks=0", args);
            if (rc != 0 || !strstr(out, "verdict: PASS"))
                fail_msg("rkv %s: exit %d\n%s", args, rc, out);
            assert_non_null(strstr(out, "crashed at"));
            assert_non_null(strstr(out, "surviving worker(s) ended on a store error"));
            assert_null(strstr(out, "timed out"));
            if (*dir) {
                char cmd[160];
                snprintf(cmd, sizeof(cmd), "grep -q '\"stats\"' %s/report.json", dir);
                int has = system(cmd) == 0;
                snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
                assert_int_equal(system(cmd), 0);
                if (!has)
                    fail_msg("%s: report.json has no \"stats\"", files[i]);
            }
        }
    }
}

/* A crash due after client 0's first phase, in a run where a worker's link
 * broke before it joined, so the others wait out the 60 s hello timeout
 * (found by rkv swarm). The fault actor used to poll every simulated
 * microsecond, 6e7 wake-ups, then every millisecond, 60,000; it now wakes
 * for client 0's phase ends and the workers' ends only. Counted, not timed.
 * Client 0 never finishes phase a, so the crash never fires, as on tcp:
 * the twin fired it at the run's end and the run passed (an outside
 * tester; once in scenarios/regress, which must pass). */
static void test_step_triggered_crash_wakes_only_for_events(void **state)
{
    (void)state;
    char path[64], args[128];
    tmp_scenario(path, sizeof(path), "step",
                 "seed: 1\n"
                 "cluster: {machines: 1, servers_per_machine: 2, workers_per_machine: 2}\n"
                 "tensors:\n  - {name: t, rows: 8}\n"
                 "workload:\n  - {name: a, tensor: t, rounds: 2}\n"
                 "  - {name: b, tensor: t, rounds: 2}\n"
                 "faults:\n"
                 "  - {kind: link_down, target: w1, at_s: 0, duration_s: 0.01, retransmit_ms: 1}\n"
                 "  - {kind: crash, target: s0.1, after_phase: a}\n");
    snprintf(args, sizeof(args), "run %s", path);
    int rc = run_rkv("ASAN_OPTIONS=detect_leaks=0", args);
    unlink(path);
    if (rc != 3 || !strstr(out, "verdict: FAIL (not every fault fired") ||
        strstr(out, "s0.1 crashed"))
        fail_msg("rkv %s: exit %d\n%s", args, rc, out);
    double sim = out_sim_s();
    if (sim < 60)
        fail_msg("simulated time %.6f s: the workers did not wait out the hello timeout\n%s", sim,
                 out);
    unsigned long long wakes = ~0ull;
    const char *t = strstr(out, "the fault actor woke ");
    assert_non_null(t);
    assert_int_equal(sscanf(t, "the fault actor woke %llu", &wakes), 1);
    /* Two workers, two phases: a wake-up for each end at most. */
    if (wakes > 4)
        fail_msg("the fault actor woke %llu times in %.0f simulated s\n%s", wakes, sim, out);
}

/* Drop, delay, link_down and slow_cpu lose nothing: every worker finishes
 * every phase with every value right, under three seeds of jitter, and the
 * report counts what each fault did (one that touched nothing fails). */
static void test_nic_and_cpu_faults(void **state)
{
    (void)state;
    static const char *const files[] = {"faults-drop.yaml", "faults-link-down.yaml",
                                        "sim-slow-cpu.yaml"};
    static const char *const counted[] = {"transmissions lost", "held by the link",
                                          "rows handled 8x slower"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        for (int seed = 1; seed <= 3; seed++) {
            char args[512];
            snprintf(args, sizeof(args), "run %s/%s --jitter 1 --seed %d", SCEN_DIR, files[i],
                     seed);
            int rc = run_rkv("", args);
            if (rc != 0 || !strstr(out, "verdict: PASS (the faults fired, every worker finished"))
                fail_msg("rkv %s: exit %d\n%s", args, rc, out);
            assert_non_null(strstr(out, counted[i]));
            assert_non_null(strstr(out, "0 surviving worker(s)"));
        }
    }
    /* slow_cpu is the twin's: the real backends refuse it by name. */
    char args[512];
    snprintf(args, sizeof(args), "run %s/sim-slow-cpu.yaml --backend tcp", SCEN_DIR);
    assert_int_equal(run_rkv("", args), 2);
    assert_non_null(strstr(out, "slow_cpu is modelled by the twin only"));
}

/* A durable server crashed and restarted twice: each crash counts. The
 * twin kept one crash per node, and its second made "not every fault
 * fired", FAIL, where tcp passed (an outside tester's file). */
static void test_restart_twice(void **state)
{
    (void)state;
    char yaml[64], args[256];
    tmp_scenario(yaml, sizeof(yaml), "restart-twice",
                 "seed: 4\n"
                 "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 2, "
                 "durable: true, retry_ms: 30000}\n"
                 "tensors:\n"
                 "  - {name: t, rows: 64, shape: [4]}\n"
                 "workload:\n"
                 "  - {name: a, tensor: t, push: 0.5, push_op: sum, ids_per_request: 8, "
                 "rounds: 3000}\n"
                 "  - {name: b, tensor: t, push: 0.5, push_op: sum, ids_per_request: 8, "
                 "rounds: 3000}\n"
                 "faults:\n"
                 "  - {kind: crash, target: s1.0, at_s: 0.06, restart_after_s: 0.01}\n"
                 "  - {kind: crash, target: s1.0, at_s: 0.09, restart_after_s: 0.01}\n");
    snprintf(args, sizeof(args), "run %s", yaml);
    int rc = run_rkv("ASAN_OPTIONS=detect_leaks=0", args);
    unlink(yaml);
    if (rc != 0 || !strstr(out, "verdict: PASS (the faults fired"))
        fail_msg("exit %d\n%s", rc, out);
    assert_non_null(strstr(out, "faults: s1.0 crashed at 0.060000 s, restarted at 0.070000 s; "
                                "s1.0 crashed at 0.090000 s, restarted at 0.100000 s"));
}

/* Durable restart: a server lost with its machine's memory comes back from
 * its snapshot; workers retry and finish every phase with every value
 * exact (no acknowledged push lost, none applied twice), under three seeds
 * of jitter; one seed twice gives one trace (snapshot I/O takes no
 * simulated time). */
static void test_restart_durable(void **state)
{
    (void)state;
    char first[64] = "";
    for (int seed = 1; seed <= 3; seed++) {
        for (int again = 0; again < (seed == 1 ? 2 : 1); again++) {
            char args[512];
            snprintf(args, sizeof(args), "run %s/faults-restart-durable.yaml --jitter 1 --seed %d",
                     SCEN_DIR, seed);
            int rc = run_rkv("ASAN_OPTIONS=detect_leaks=0", args);
            if (rc != 0 || !strstr(out, "verdict: PASS (the faults fired, every worker finished"))
                fail_msg("rkv %s: exit %d\n%s", args, rc, out);
            assert_non_null(strstr(out, "with its machine's memory, restarted at"));
            const char *h = strstr(out, "event trace hash ");
            assert_non_null(h);
            if (seed == 1 && again == 0)
                snprintf(first, sizeof(first), "%.33s", h);
            else if (seed == 1)
                assert_memory_equal(first, h, strlen(first));
        }
    }
    /* Server 0 too: its client ids and barriers survive in its record. */
    for (int seed = 1; seed <= 3; seed++) {
        char args[512];
        snprintf(args, sizeof(args), "run %s/faults-restart-server0.yaml --jitter 1 --seed %d",
                 SCEN_DIR, seed);
        int rc = run_rkv("ASAN_OPTIONS=detect_leaks=0", args);
        if (rc != 0 || !strstr(out, "verdict: PASS (the faults fired, every worker finished"))
            fail_msg("rkv %s: exit %d\n%s", args, rc, out);
        assert_non_null(strstr(out, "s0.0 crashed at"));
    }
    /* A restart due after the run's end (here --max-sim-s 50; the workers
     * end on their requests' timeouts by about 31 s) never
     * happened: the run used to pass as one with a server gone for good
     * ("the faults fired"),
     * without the check the restart was for; tcp counts it unfired too. */
    write_file("twin-late-restart.yaml",
               "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1,\n"
               "          durable: true, retry_ms: 100}\n"
               "tensors:\n"
               "  - {name: t, rows: 64, shape: [4]}\n"
               "workload:\n"
               "  - {name: a, tensor: t, rounds: 5}\n"
               "  - {name: b, tensor: t, rounds: 5}\n"
               "faults:\n"
               "  - {kind: crash, target: s1.0, after_phase: a, restart_after_s: 100}\n");
    int rc = run_rkv("ASAN_OPTIONS=detect_leaks=0", "run twin-late-restart.yaml --max-sim-s 50");
    if (rc != 3 || !strstr(out, "verdict: FAIL (not every fault fired"))
        fail_msg("late restart: exit %d\n%s", rc, out);
    assert_non_null(strstr(out, "not restarted (restart_after_s 100: the run ended first)"));
    /* Without the limit the restart came at 100 s, after the workers had
     * gone and the other server was stopped: the server then waited for a
     * SHUTDOWN until the 3600 s limit and the verdict named a live lock. */
    rc = run_rkv("ASAN_OPTIONS=detect_leaks=0", "run twin-late-restart.yaml");
    if (rc != 3 || !strstr(out, "verdict: FAIL (not every fault fired"))
        fail_msg("late restart, no limit: exit %d\n%s", rc, out);
    assert_non_null(strstr(out, "not restarted (restart_after_s 100: the run ended first)"));
    assert_null(strstr(out, "--max-sim-s"));
}

/* The durable run's directory in /tmp of process pid, or "" (it names its
 * pid: tests running at once do not see each other's). */
static void durable_dir_of(pid_t pid, char *dir, size_t len)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "rkv-twin-durable.%d.", (int)pid);
    dir[0] = 0;
    DIR *d = opendir("/tmp");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (!strncmp(e->d_name, prefix, strlen(prefix)))
            snprintf(dir, len, "/tmp/%s", e->d_name);
    closedir(d);
}

/* The durable directory of the twin run pid, waited for (its nodes are
 * up); the run is killed and the test fails if none comes in 60 s. */
static void wait_durable_dir(pid_t pid, char *dir, size_t len)
{
    dir[0] = 0;
    for (int ms = 0; !dir[0] && ms < 60000; ms += 5) {
        durable_dir_of(pid, dir, len);
        if (!dir[0])
            usleep(5000);
    }
    if (!dir[0]) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("no /tmp/rkv-twin-durable.%d.* within 60 s", (int)pid);
    }
}

/* A durable run ended by Ctrl-C or SIGKILL (the swarm's timeout, a
 * launcher) left its snapshots in /tmp, ~2 MB a run: the twin removed
 * them only on its way out. */
static void test_durable_dir_removed_when_killed(void **state)
{
    (void)state;
    write_file("twin-durable-long.yaml",
               "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1,\n"
               "          durable: true}\n"
               "tensors:\n"
               "  - {name: t, rows: 64, shape: [4]}\n"
               "workload:\n"
               "  - {name: long, tensor: t, push: 0.5, push_op: sum, ids_per_request: 4,\n"
               "     rounds: 100000}\n");
    /* The third: SIGKILL to the run's whole process group, as `timeout -s
     * KILL` or a CI job's end sends it; the reaper was in that group and
     * died too, leaving the directory (an outside tester). */
    const int sigs[] = {SIGINT, SIGKILL, SIGKILL};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        int group = i == 2;
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (group)
                setpgid(0, 0);
            freopen("/dev/null", "w", stdout);
            freopen("/dev/null", "w", stderr);
            execl(RKV_BIN, "rkv", "run", "twin-durable-long.yaml", (char *)NULL);
            _exit(127);
        }
        char dir[300];
        wait_durable_dir(pid, dir, sizeof(dir));
        usleep(200 * 1000); /* its snapshots being written */
        int st = 0;
        assert_int_equal(kill(group ? -pid : pid, sigs[i]), 0);
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0));
        int gone = 0;
        for (int ms = 0; !gone && ms < 10000; ms += 10) {
            gone = access(dir, F_OK) != 0;
            if (!gone)
                usleep(10 * 1000);
        }
        if (!gone)
            fail_msg("signal %d%s: %s still there 10 s after the run ended", sigs[i],
                     group ? " to the process group" : "", dir);
    }
    unlink("twin-durable-long.yaml");
}

/* Ctrl-C on a twin run ended it with exit 1 ("a value differed") and no
 * word, SimGrid's own SIGINT handler calling exit(1), its --trace cut
 * mid-record; SIGTERM killed it (143) with the same trace (an outside
 * tester). Now either stops the run with a line on stderr, the durable
 * directory removed by the run itself, the trace closed whole, and the
 * process ended by the signal, as a tcp run ends. */
static void test_stopping_signal_ends_the_run_by_it(void **state)
{
    (void)state;
    write_file("twin-stop-long.yaml",
               "cluster: {machines: 2, servers_per_machine: 1, workers_per_machine: 1,\n"
               "          durable: true}\n"
               "tensors:\n"
               "  - {name: t, rows: 64, shape: [4]}\n"
               "workload:\n"
               "  - {name: long, tensor: t, push: 0.5, push_op: sum, ids_per_request: 4,\n"
               "     rounds: 100000}\n");
    const int sigs[] = {SIGINT, SIGTERM};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            freopen("/dev/null", "w", stdout);
            freopen("twin-stop.err", "w", stderr);
            execl(RKV_BIN, "rkv", "run", "twin-stop-long.yaml", "--trace", "twin-stop.json",
                  (char *)NULL);
            _exit(127);
        }
        char dir[300];
        wait_durable_dir(pid, dir, sizeof(dir));
        usleep(300 * 1000); /* well into the simulation */
        int st = 0;
        assert_int_equal(kill(pid, sigs[i]), 0);
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (!WIFSIGNALED(st) || WTERMSIG(st) != sigs[i])
            fail_msg("signal %d: the run ended with %s %d", sigs[i],
                     WIFSIGNALED(st) ? "signal" : "exit",
                     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        /* Removed by the run before it ended, not later by its reaper. */
        assert_int_not_equal(access(dir, F_OK), 0);
        assert_int_equal(sh("cat twin-stop.err"), 0);
        char said[96];
        snprintf(said, sizeof(said), "rkv run: stopped by %s at simulated ", strsignal(sigs[i]));
        if (!strstr(out, said) || !strstr(out, "durable directory was removed"))
            fail_msg("signal %d: stderr:\n%s", sigs[i], out);
        /* A whole JSON document: the closing of traceEvents is there. */
        assert_int_equal(sh("tail -c 4 twin-stop.json | od -An -c | tr -d ' '"), 0);
        if (!strstr(out, "]}\\n"))
            fail_msg("signal %d: the trace ends with %s", sigs[i], out);
        assert_int_equal(sh("head -c 40 twin-stop.json"), 0);
        assert_non_null(strstr(out, "{\"displayTimeUnit\""));
    }
    unlink("twin-stop-long.yaml");
    unlink("twin-stop.err");
    unlink("twin-stop.json");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_same_trace),
        cmocka_unit_test(test_cpu_charged_is_reported),
        cmocka_unit_test(test_per_core_queues),
        cmocka_unit_test(test_other_seed_other_trace),
        cmocka_unit_test(test_scenarios_pass_under_jitter),
        cmocka_unit_test(test_every_platform),
        cmocka_unit_test(test_platform_without_the_hosts_is_an_error),
        cmocka_unit_test(test_platform_checked_before_the_run),
        cmocka_unit_test(test_chrome_trace),
        cmocka_unit_test(test_payloadless_scale_run),
        cmocka_unit_test(test_large_cluster_loads),
        cmocka_unit_test(test_cfg_and_progress),
        cmocka_unit_test(test_settings_reach_the_twin),
        cmocka_unit_test(test_payloadless_reports_declared_bytes),
        cmocka_unit_test(test_simulated_time_limit),
        cmocka_unit_test(test_workers_that_never_join_end_the_run),
        cmocka_unit_test(test_memory_floor),
        cmocka_unit_test(test_memory_floor_in_a_cgroup),
        cmocka_unit_test(test_log_lines_folded),
        cmocka_unit_test(test_faults_line_whole),
        cmocka_unit_test(test_crash_faults),
        cmocka_unit_test(test_run_ends_with_the_last_ack),
        cmocka_unit_test(test_step_triggered_crash_wakes_only_for_events),
        cmocka_unit_test(test_payload_receives_from_the_pool),
        cmocka_unit_test(test_nic_and_cpu_faults),
        cmocka_unit_test(test_restart_durable),
        cmocka_unit_test(test_restart_twice),
        cmocka_unit_test(test_durable_dir_removed_when_killed),
        cmocka_unit_test(test_stopping_signal_ends_the_run_by_it),
    };
    /* RKV_TEST_FILTER=test_crash_* (a glob) runs only what it names. */
    const char *filter = getenv("RKV_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
