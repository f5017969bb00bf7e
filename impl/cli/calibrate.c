/* rkv calibrate: its flags and help (the measuring is harness/calibrate.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "harness/calib.h"
#include "harness/scenario.h"
#include "util/util.h"

#if RKV_WITH_SIM
#include "sim/twin/twin.h"
#endif

static void cal_usage(void)
{
    printf("usage: rkv calibrate [--backend tcp|verbs] [--out FILE] [--quick]\n"
           "                     [--platform-xml FILE --machines M]\n"
           "Measures the real backend on this host (CPU per message and per byte, the time\n"
           "that is not CPU, from small scenarios run as `rkv run --backend B` runs them, and\n"
           "one loopback TCP stream) and writes the twin's parameters to FILE (default\n"
           "rkv-calibration.txt), for `rkv run SCENARIO --calibration FILE` and `--predict`\n"
           "(sim/README.md). Under a minute; --quick about ten seconds.\n"
           "  --quick             fewer rounds and repetitions (noisier)\n"
           "  --platform-xml F    also the SimGrid platform for a scenario's sim: platform_file\n"
           "                      (every machine shares this host: one host named loopback;\n"
           "                      --machines M is for a platform of hosts m0..)\n");
}

#if RKV_WITH_SIM
static int cal_xml(const struct rkv_calib *c, const char *path, uint32_t machines, char *err,
                   size_t err_len)
{
    struct rkv_scenario *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return -RKV_ENOMEM;
    sc->machines = machines;
    rkv_calib_apply(c, sc);
    int rc = rkv_twin_platform_xml(sc, path, err, err_len);
    free(sc);
    return rc;
}
#endif

/* Whether the file flag names (--out, --platform-xml) can be written, tried
 * before the measuring: a path in no directory failed after a minute of it.
 * A file this call made is removed again. */
static int cal_writable(const char *flag, const char *path)
{
    struct stat st;
    int existed = stat(path, &st) == 0;
    int fd = *path && !(existed && S_ISDIR(st.st_mode))
                 ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)
                 : -1;
    if (fd < 0) {
        fprintf(stderr, "rkv calibrate: %s \"%s\": cannot write it: %s\n", flag, path,
                !*path                           ? "an empty path"
                : existed && S_ISDIR(st.st_mode) ? "a directory"
                                                 : strerror(errno));
        return -1;
    }
    close(fd);
    if (!existed)
        unlink(path);
    return 0;
}

int cmd_calibrate(int argc, char **argv, const char *self)
{
    const char *backend = "tcp", *out = "rkv-calibration.txt", *xml = NULL, *machines_arg = "";
    int quick = 0;
    unsigned long machines = 2;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            cal_usage();
            return RKV_EXIT_OK;
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            backend = argv[++i];
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--platform-xml") && i + 1 < argc) {
            xml = argv[++i];
        } else if (!strcmp(argv[i], "--machines") && i + 1 < argc) {
            uint64_t m = 0; /* "2x" was 2 */
            machines_arg = argv[++i];
            machines = rkv_parse_u64(machines_arg, &m) < 0 || m > 65536 ? 0 : (unsigned long)m;
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (i + 1 == argc &&
                   (!strcmp(argv[i], "--backend") || !strcmp(argv[i], "--out") ||
                    !strcmp(argv[i], "--platform-xml") || !strcmp(argv[i], "--machines"))) {
            fprintf(stderr, "rkv calibrate: %s needs a value\n", argv[i]);
            return RKV_EXIT_USAGE;
        } else {
            fprintf(stderr, "rkv calibrate: unknown argument \"%s\" (see --help)\n", argv[i]);
            return RKV_EXIT_USAGE;
        }
    }
    if (strcmp(backend, "tcp") && strcmp(backend, "verbs")) {
        fprintf(stderr, "rkv calibrate: --backend: expected tcp or verbs, got \"%s\"\n", backend);
        return RKV_EXIT_USAGE;
    }
    if (machines < 1 || machines > 65536) {
        fprintf(stderr, "rkv calibrate: --machines: expected 1..65536, got \"%s\"\n", machines_arg);
        return RKV_EXIT_USAGE;
    }
    if (*machines_arg && !xml) { /* it sizes the platform file only: it was ignored */
        fprintf(stderr, "rkv calibrate: --machines goes with --platform-xml FILE\n");
        return RKV_EXIT_USAGE;
    }
    if (cal_writable("--out", out) < 0 || (xml && cal_writable("--platform-xml", xml) < 0))
        return RKV_EXIT_USAGE;
    struct rkv_calib c;
    char err[600];
    int rc = rkv_calibrate(self, backend, quick, out, CMD_TWIN, &c, err, sizeof(err));
    if (rc == 0 && xml) {
#if RKV_WITH_SIM
        rc = cal_xml(&c, xml, (uint32_t)machines, err, sizeof(err));
#else
        snprintf(err, sizeof(err), "--platform-xml needs the twin (cmake -DRKV_WITH_SIM=ON)");
        rc = -RKV_ECONFIG;
#endif
    }
    if (rc < 0) {
        fprintf(stderr, "rkv calibrate: %s\n", err);
        return rc == -RKV_ECONFIG ? RKV_EXIT_USAGE : RKV_EXIT_STORE;
    }
    printf("wrote %s%s%s\n", out, xml ? " and " : "", xml ? xml : "");
    return RKV_EXIT_OK;
}
