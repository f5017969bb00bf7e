/* `rkv run --trace` on a real backend: the launcher merges every process's
 * spans into one Perfetto file on its own clock. The merge on files made
 * here (clock offsets applied, processes named, torn lines and nodes that
 * never synced left out), and a whole tcp run with one node's clock 5 s
 * off: every node's spans, process names, and every message arrow from a
 * send to a later receipt. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "harness/trace_merge.h"
#include "port/trace.h"
#include "rkv.h"
#include "rkv_run.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static json_t *load_events(const char *path)
{
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc)
        fail_msg("%s: %s (line %d)", path, je.text, je.line);
    assert_string_equal(json_string_value(json_object_get(doc, "displayTimeUnit")), "ns");
    json_t *ev = json_object_get(doc, "traceEvents");
    assert_true(json_is_array(ev));
    json_incref(ev);
    json_decref(doc);
    return ev;
}

/* The event of phase ph named name (NULL: any) in process pid. */
static json_t *find(json_t *evs, const char *ph, int pid, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "ph")), ph) == 0 &&
            json_integer_value(json_object_get(e, "pid")) == pid &&
            (!name || (json_object_get(e, "name") &&
                       !strcmp(json_string_value(json_object_get(e, "name")), name))))
            return e;
    }
    return NULL;
}

static double ts_of(json_t *e)
{
    return json_number_value(json_object_get(e, "ts"));
}

/* w0's clock reads 5 s more than the launcher's, s0.0's the same: merged,
 * both are on the launcher's clock from the earliest event. */
static void test_merge_applies_offsets(void **state)
{
    (void)state;
    char dir[] = "/tmp/rkv-test-trace.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char a[128], b[128], c[128], outp[128];
    snprintf(a, sizeof(a), "%s/s0.0.jsonl", dir);
    snprintf(b, sizeof(b), "%s/w0.jsonl", dir);
    snprintf(c, sizeof(c), "%s/w1.jsonl", dir);
    snprintf(outp, sizeof(outp), "%s/t.json", dir);
    write_file(a, "{\"ph\":\"clock\",\"node\":\"s0.0\",\"pid\":10,\"offset_ns\":0,\"rtt_ns\":"
                  "20000,\"samples\":16,\"measured\":true}\n"
                  "{\"ph\":\"X\",\"name\":\"recv PUSH\",\"cat\":\"net\",\"tid\":11,\"t\":1000000,"
                  "\"d\":2000,\"args\":{\"peer\":65536}}\n"
                  "{\"ph\":\"f\",\"tid\":11,\"t\":1000000,\"id\":7}\n"
                  "{\"ph\":\"X\",\"name\":\"recv PU"); /* torn by a kill */
    write_file(b, "{\"ph\":\"clock\",\"node\":\"w0\",\"pid\":20,\"offset_ns\":-5000000000,"
                  "\"rtt_ns\":10000,\"samples\":16,\"measured\":true}\n"
                  "{\"ph\":\"X\",\"name\":\"push\",\"cat\":\"op\",\"tid\":20,\"t\":5000500000,"
                  "\"d\":1000000,\"args\":{\"rows\":3,\"bytes\":48}}\n"
                  "{\"ph\":\"s\",\"tid\":20,\"t\":5000600000,\"id\":7}\n"
                  "{\"ph\":\"cut\",\"after_lines\":2}\n"); /* its limit */
    write_file(c, "{\"ph\":\"X\",\"name\":\"push\",\"cat\":\"op\",\"tid\":30,\"t\":1,\"d\":1,"
                  "\"args\":{}}\n"); /* killed before its clock line */
    char *files[] = {a, b, c};
    struct rkv_trace_merge_stats st;
    char err[256] = "";
    if (rkv_trace_merge(files, 3, outp, &st, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(st.nodes, 2);
    assert_int_equal(st.unclocked, 1);
    assert_int_equal(st.cut, 1);
    assert_int_equal(st.bad_lines, 1);
    assert_int_equal(st.spans, 2);
    assert_int_equal(st.flow_starts, 1);
    assert_int_equal(st.flow_ends, 1);
    assert_int_equal(st.matched, 1);
    assert_true(st.max_rtt_us == 20.0);
    json_t *evs = load_events(outp);
    json_t *pn = find(evs, "M", 1, "process_name"), *pn2 = find(evs, "M", 2, "process_name");
    assert_non_null(pn);
    assert_non_null(pn2);
    assert_string_equal(json_string_value(json_object_get(json_object_get(pn, "args"), "name")),
                        "s0.0");
    assert_string_equal(json_string_value(json_object_get(json_object_get(pn2, "args"), "name")),
                        "w0");
    json_t *tn = find(evs, "M", 2, "thread_name");
    assert_string_equal(json_string_value(json_object_get(json_object_get(tn, "args"), "name")),
                        "w0 app");
    /* The earliest event is w0's push at launcher time 0.5 ms: time 0. */
    assert_true(ts_of(find(evs, "X", 2, "push")) == 0.0);
    assert_true(json_number_value(json_object_get(find(evs, "X", 2, "push"), "dur")) == 1000.0);
    assert_true(ts_of(find(evs, "s", 2, "msg")) == 100.0);
    assert_true(ts_of(find(evs, "X", 1, "recv PUSH")) == 500.0);
    json_t *f = find(evs, "f", 1, "msg");
    assert_true(ts_of(f) == 500.0);
    assert_string_equal(json_string_value(json_object_get(f, "bp")), "e");
    assert_int_equal(json_integer_value(json_object_get(f, "id")), 7);
    assert_null(find(evs, "X", 3, NULL)); /* w1 is not placed anywhere */
    json_decref(evs);
    unlink(a), unlink(b), unlink(c), unlink(outp);
    rmdir(dir);
}

static json_int_t ival(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("no integer \"%s\"", key);
    return json_integer_value(v);
}

/* Every histogram holds its timed calls (of count: rkv.h, rkv_op_stats),
 * and p50 <= p99 <= max. */
static void check_counters(json_t *one)
{
    assert_non_null(one);
    json_int_t sum = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(one, "hist"), i, e) sum +=
        json_integer_value(json_array_get(e, 1));
    assert_int_equal(sum, ival(one, "timed"));
    assert_true(ival(one, "timed") > 0 && ival(one, "timed") <= ival(one, "count"));
    double p50 = json_number_value(json_object_get(one, "p50_us")),
           p99 = json_number_value(json_object_get(one, "p99_us")),
           mx = json_number_value(json_object_get(one, "max_us"));
    assert_true(p50 > 0 && p50 <= p99 && p99 <= mx);
}

/* report.json's "stats" of the same run: the clients counted every push
 * the workload made, per call and per server, and every worker reported. */
static void check_report_stats(const char *dir)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/report.json", dir);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc)
        fail_msg("%s: %s", path, je.text);
    json_int_t pushes = 0, pulls = 0;
    size_t i;
    json_t *ph;
    json_array_foreach(json_object_get(doc, "phases"), i, ph)
    {
        pushes += ival(ph, "pushes");
        pulls += ival(ph, "pulls");
    }
    json_t *stats = json_object_get(doc, "stats"), *ops = json_object_get(stats, "ops");
    assert_non_null(ops);
    json_t *push = json_object_get(ops, "push"), *pull = json_object_get(ops, "pull");
    assert_int_equal(ival(push, "count"), pushes);
    assert_int_equal(ival(push, "errors"), 0);
    assert_true(ival(pull, "count") >= pulls); /* and the checks after barriers */
    assert_true(ival(push, "bytes") > 0 && ival(pull, "rows") > 0);
    check_counters(push);
    check_counters(pull);
    check_counters(json_object_get(ops, "barrier"));
    json_t *servers = json_object_get(stats, "servers"), *s;
    assert_int_equal(json_array_size(servers), 4);
    json_int_t to_servers = 0;
    json_array_foreach(servers, i, s)
    {
        assert_int_equal(ival(s, "server"), (json_int_t)i);
        check_counters(json_object_get(s, "push"));
        to_servers += ival(json_object_get(s, "push"), "count");
    }
    /* A push's rows of the worker's own machine go to no server. */
    assert_true(to_servers > 0 && to_servers <= 2 * pushes);
    assert_int_equal(json_array_size(json_object_get(stats, "workers")), 4);
    json_decref(doc);
    unlink(path);
    snprintf(path, sizeof(path), "%s/report.md", dir);
    unlink(path);
}

/* A node's file: its clock line (unmeasured without a clock server), then
 * spans and arrow ends up to its limit of lines, then the cut's notice;
 * merged, the cut is reported. */
static void test_writer_limit_and_unsynced_clock(void **state)
{
    (void)state;
    char dir[] = "/tmp/rkv-test-trace.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], outp[128], err[256] = "";
    snprintf(path, sizeof(path), "%s/w0.jsonl", dir);
    snprintf(outp, sizeof(outp), "%s/t.json", dir);
    struct rkv_trace *tr;
    assert_int_equal(rkv_trace_open(path, "bad name", 0, &tr, err, sizeof(err)), -RKV_EINVAL);
    assert_int_equal(rkv_trace_open(path, "w0", 0, &tr, err, sizeof(err)), 0);
    assert_int_equal(rkv_trace_sync(tr, "", 0, err, sizeof(err)), 0);
    rkv_trace_limit(tr, 3);
    uint64_t t = rkv_trace_now_ns(tr);
    rkv_trace_span(tr, "push", "op", t, t + 1000, -1, 2, 32);
    rkv_trace_flow(tr, 1, 42, t + 10);
    for (int i = 0; i < 5; i++)
        rkv_trace_span(tr, "pull", "op", t + 2000, t + 3000, 3, 0, 0);
    rkv_trace_close(tr);
    char *files[] = {path};
    struct rkv_trace_merge_stats st;
    if (rkv_trace_merge(files, 1, outp, &st, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(st.spans, 2);
    assert_int_equal(st.flow_starts, 1);
    assert_int_equal(st.cut, 1);
    assert_int_equal(st.bad_lines, 0);
    json_t *evs = load_events(outp);
    json_t *push = find(evs, "X", 1, "push");
    assert_non_null(push);
    json_t *args = json_object_get(push, "args");
    assert_int_equal(json_integer_value(json_object_get(args, "rows")), 2);
    assert_int_equal(json_integer_value(json_object_get(args, "bytes")), 32);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(find(evs, "X", 1, "pull"), "args"), "peer")),
                     3);
    json_decref(evs);
    unlink(path), unlink(outp);
    rmdir(dir);
}

/* A node started again (a crash fault's restart) is a process of its own,
 * named after the first; the launcher merges by node name. */
static void test_restarted_node_named_and_ordered(void **state)
{
    (void)state;
    struct rkv_trace_run run;
    char err[256] = "", outp[] = "/tmp/rkv-test-trace-run.json";
    assert_int_equal(rkv_trace_run_start(&run, outp, err, sizeof(err)), 0);
    const char *names[] = {"s1.0", "s1.0", "s0.0", "w0"};
    for (int i = 0; i < 4; i++) {
        rkv_trace_run_child_env(&run, names[i]);
        const char *node = getenv("RKV_TRACE_NODE"), *path = getenv("RKV_TRACE_FILE");
        assert_string_equal(node, i == 1 ? "s1.0-r2" : names[i]);
        assert_non_null(strstr(getenv("RKV_TRACE_CLOCK"), "127.0.0.1:"));
        struct rkv_trace *tr;
        assert_int_equal(rkv_trace_open(path, node, 0, &tr, err, sizeof(err)), 0);
        char host[32];
        unsigned port;
        assert_int_equal(sscanf(getenv("RKV_TRACE_CLOCK"), "%31[^:]:%u", host, &port), 2);
        /* The launcher's clock server answers (the same host: offset ~0). */
        assert_int_equal(rkv_trace_sync(tr, host, (uint16_t)port, err, sizeof(err)), 0);
        uint64_t t = rkv_trace_now_ns(tr);
        rkv_trace_span(tr, "x", "op", t, t + 1, -1, 0, 0);
        rkv_trace_close(tr);
    }
    unsetenv("RKV_TRACE_NODE"), unsetenv("RKV_TRACE_FILE"), unsetenv("RKV_TRACE_CLOCK");
    struct rkv_trace_merge_stats st;
    if (rkv_trace_run_finish(&run, outp, &st, err, sizeof(err)) < 0)
        fail_msg("%s", err);
    assert_int_equal(st.nodes, 4);
    assert_true(st.max_rtt_us > 0 && st.max_rtt_us < 100000);
    json_t *evs = load_events(outp);
    const char *want[] = {"s0.0", "s1.0", "s1.0-r2", "w0"};
    for (int pid = 1; pid <= 4; pid++) {
        json_t *pn = find(evs, "M", pid, "process_name");
        assert_non_null(pn);
        assert_string_equal(json_string_value(json_object_get(json_object_get(pn, "args"), "name")),
                            want[pid - 1]);
    }
    json_decref(evs);
    unlink(outp);
}

/* Ends and starts of arrows by id. */
struct arrow {
    json_int_t id;
    double s_ts, f_ts;
    int s_pid, f_pid;
};

static void test_tcp_run_merged(void **state)
{
    (void)state;
    char dir[] = "/tmp/rkv-test-trace.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], args[512];
    snprintf(path, sizeof(path), "%s/t.json", dir);
    snprintf(args, sizeof(args), "run %s/quickstart.yaml --backend tcp --trace %s --out %s",
             SCEN_DIR, path, dir);
    /* w1's host clock 100 s ahead: the offset measured at its start puts it
     * back. The run's own wall time bounds the trace, whatever the load. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int code = run_rkv("RKV_TRACE_SKEW_NS=100000000000 RKV_TRACE_SKEW_NODE=w1", args);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall_us =
        (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    if (code != 0)
        fail_msg("exit %d: %s", code, out);
    assert_non_null(strstr(out, "trace: "));
    assert_non_null(strstr(out, "8 processes"));
    json_t *evs = load_events(path);
    static const char *const names[] = {"s0.0", "s0.1", "s1.0", "s1.1", "w0", "w1", "w2", "w3"};
    for (int pid = 1; pid <= 8; pid++) {
        json_t *pn = find(evs, "M", pid, "process_name");
        assert_non_null(pn);
        assert_string_equal(json_string_value(json_object_get(json_object_get(pn, "args"), "name")),
                            names[pid - 1]);
        assert_non_null(find(evs, "X", pid, NULL));
        if (pid <= 4) {
            assert_non_null(find(evs, "X", pid, "recv PUSH"));
            assert_non_null(find(evs, "X", pid, "send PUSH_ACK"));
        } else {
            assert_non_null(find(evs, "X", pid, "push"));
            assert_non_null(find(evs, "X", pid, "pull"));
            assert_non_null(find(evs, "X", pid, "barrier"));
        }
    }
    size_t n = json_array_size(evs), n_arrows = 0, i;
    struct arrow *ar = calloc(n, sizeof(*ar));
    assert_non_null(ar);
    json_t *e;
    double max_ts = 0;
    json_array_foreach(evs, i, e)
    {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (json_object_get(e, "ts") && ts_of(e) > max_ts)
            max_ts = ts_of(e);
        if (strcmp(ph, "s") && strcmp(ph, "f"))
            continue;
        json_int_t id = json_integer_value(json_object_get(e, "id"));
        size_t k = 0;
        while (k < n_arrows && ar[k].id != id)
            k++;
        if (k == n_arrows)
            ar[n_arrows++] = (struct arrow){.id = id, .s_pid = -1, .f_pid = -1};
        int pid = (int)json_integer_value(json_object_get(e, "pid"));
        if (ph[0] == 's')
            ar[k].s_ts = ts_of(e), ar[k].s_pid = pid;
        else
            ar[k].f_ts = ts_of(e), ar[k].f_pid = pid;
    }
    /* Each arrow end sits inside a span of its thread (the send, the
     * handler that received it), which is what Perfetto binds it to. */
    json_array_foreach(evs, i, e)
    {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (strcmp(ph, "s") && strcmp(ph, "f"))
            continue;
        json_int_t pid = json_integer_value(json_object_get(e, "pid")),
                   tid = json_integer_value(json_object_get(e, "tid"));
        double ts = ts_of(e);
        int bound = 0;
        size_t j;
        json_t *x;
        json_array_foreach(evs, j, x)
        {
            if (bound || strcmp(json_string_value(json_object_get(x, "ph")), "X") ||
                json_integer_value(json_object_get(x, "pid")) != pid ||
                json_integer_value(json_object_get(x, "tid")) != tid)
                continue;
            double x0 = ts_of(x), x1 = x0 + json_number_value(json_object_get(x, "dur"));
            bound = x0 <= ts && ts <= x1;
        }
        if (!bound)
            fail_msg("arrow %s at %.3f us (pid %lld tid %lld) lies in no span", ph, ts,
                     (long long)pid, (long long)tid);
    }
    /* Within the run, not the skew's 100 s past it (a second or so alone;
     * 4 s was the bound, and a run next to a build took longer). */
    if (max_ts > wall_us)
        fail_msg("an event at %.0f us, past the run's %.0f us: the skew was not undone", max_ts,
                 wall_us);
    size_t with_w1 = 0;
    assert_true(n_arrows > 100);
    for (size_t k = 0; k < n_arrows; k++) {
        if (ar[k].s_pid < 0 || ar[k].f_pid < 0)
            fail_msg("arrow %lld has only its %s", (long long)ar[k].id,
                     ar[k].s_pid < 0 ? "end" : "start");
        assert_int_not_equal(ar[k].s_pid, ar[k].f_pid);
        with_w1 += ar[k].s_pid == 6 || ar[k].f_pid == 6;
        /* Received after it was sent, to within the clock measurement
         * (half a loopback round trip; 2 ms allows for a busy host). */
        if (ar[k].f_ts < ar[k].s_ts - 2000)
            fail_msg("arrow %lld: received at %.1f us, sent at %.1f us (pids %d -> %d)",
                     (long long)ar[k].id, ar[k].f_ts, ar[k].s_ts, ar[k].s_pid, ar[k].f_pid);
    }
    assert_true(with_w1 > 10);
    free(ar);
    json_decref(evs);
    unlink(path);
    check_report_stats(dir);
    rmdir(dir);
}

/* A trace file that cannot be written is refused before anything starts:
 * one line, exit 2, no run. */
static void test_unwritable_trace_refused_first(void **state)
{
    (void)state;
    char args[256];
    snprintf(args, sizeof(args), "run %s/quickstart.yaml --backend tcp --trace /nonexistent/t.json",
             SCEN_DIR);
    assert_int_equal(run_rkv("", args), 2);
    assert_non_null(strstr(out, "--trace: cannot write /nonexistent/t.json"));
    assert_null(strstr(out, "verdict"));
}

/* The twin's workers count in simulated time and report the same way. */
static void test_sim_report_stats(void **state)
{
    (void)state;
#if RKV_WITH_SIM
    char dir[] = "/tmp/rkv-test-trace.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char args[512];
    snprintf(args, sizeof(args), "run %s/quickstart.yaml --backend sim --out %s", SCEN_DIR, dir);
    int code = run_rkv("", args);
    if (code != 0)
        fail_msg("exit %d: %s", code, out);
    check_report_stats(dir);
    rmdir(dir);
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_applies_offsets),
        cmocka_unit_test(test_writer_limit_and_unsynced_clock),
        cmocka_unit_test(test_restarted_node_named_and_ordered),
        cmocka_unit_test(test_unwritable_trace_refused_first),
        cmocka_unit_test(test_tcp_run_merged),
        cmocka_unit_test(test_sim_report_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
