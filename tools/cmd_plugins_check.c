/* `weft plugins check [BUNDLE...]`: validates each bundle's manifest in this process, then
 * checks its binary in a child process: load the library, negotiate, compare the descriptor
 * with the manifest, create with the default options and destroy. A plugin that crashes or
 * hangs in a constructor, in negotiation or in create takes only the child down, and the
 * report says which signal and in which phase. Without arguments every bundle on the search
 * path is checked; a bundle whose library is not built yet passes on its manifest alone and
 * says so. Exit status 1 when any bundle fails. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "plugin/host.h"
#include "plugin/loader.h"
#include "plugin/manifest.h"
#include "plugin/registry.h"
#include "util/error.h"

#define MAX_PATHS 32
#define CHILD_TIMEOUT_S 30

static void usage(FILE *f) {
    fprintf(
        f, "usage: weft plugins check [BUNDLE...] [--path DIR]...\n\n"
           "Checks plugin bundles (a bundle directory or its manifest.yaml; without arguments,\n"
           "every bundle on the search path). The manifest is validated strictly; then, in a\n"
           "child process, the library is loaded, its ABI negotiated, its descriptor compared\n"
           "with the manifest, and create/destroy run with the default options. A crash there\n"
           "is reported, not fatal. A bundle whose library is not built passes on its manifest.\n\n"
           "  --path DIR   search DIR first (repeatable; default: none)\n\n"
           "Exit status: 0 when every bundle passed, 1 otherwise, 2 on a usage error.\n");
}

/* Phases the child announces on the pipe before entering them. */
enum { PHASE_LOAD = 'L', PHASE_CREATE = 'C', PHASE_DESTROY = 'D', PHASE_DONE = 'K' };

static const char *phase_words(int phase) {
    switch (phase) {
    case PHASE_LOAD:
        return "while loading";
    case PHASE_CREATE:
        return "in create";
    case PHASE_DESTROY:
        return "in destroy";
    default:
        return "before loading";
    }
}

static void put(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

/* Runs in the child: every outcome goes to fd as phase bytes, then 'K' or 'E' + message. */
static void child_check(int fd, const weft_plugin_manifest *m, const char *library) {
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        signal(sigs[i], SIG_DFL);
    alarm(CHILD_TIMEOUT_S);
    weft_error err;
    weft_error_clear(&err);
    weft_plugin_expect ex = {m->name,    m->version_text, m->kind, m->slots,
                             m->abi_min, m->abi_max,      NULL};
    weft_loaded_plugin p;
    weft_options opts = {0, NULL};
    weft_host *host = weft_host_new();
    char tag = PHASE_LOAD;
    put(fd, &tag, 1);
    weft_status st = host ? weft_plugin_open(library, &ex, &p, &err)
                          : weft_error_set(&err, WEFT_ERR_NOMEM, "check", "out of memory");
    if (st == WEFT_OK) st = weft_options_build(m, NULL, 0, m->path, "options", &opts, &err);
    if (st == WEFT_OK) {
        tag = PHASE_CREATE;
        put(fd, &tag, 1);
        st = weft_plugin_instantiate(&p, weft_host_services_of(host), &opts, &err);
        tag = PHASE_DESTROY;
        put(fd, &tag, 1);
        weft_plugin_close(&p);
    }
    if (st == WEFT_OK) {
        tag = PHASE_DONE;
        put(fd, &tag, 1);
    } else {
        tag = 'E';
        put(fd, &tag, 1);
        put(fd, err.message, strlen(err.message));
    }
    weft_options_free(&opts);
    weft_host_free(host);
}

/* Forks, runs child_check, and turns what came back into one line in why. Returns 0 on pass. */
static int check_binary(const weft_plugin_manifest *m, const char *library, char *why, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, cap, "cannot create a pipe: %s", strerror(errno));
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(why, cap, "cannot fork: %s", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        close(fds[0]);
        child_check(fds[1], m, library);
        close(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    char buf[1024];
    size_t n = 0;
    for (;;) {
        ssize_t got = read(fds[0], buf + n, sizeof(buf) - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += (size_t)got;
        if (n == sizeof(buf) - 1) break;
    }
    buf[n] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    /* the last phase byte before an 'E', 'K' or the end says where the child was */
    int phase = 0;
    size_t i = 0;
    for (; i < n; i++) {
        if (buf[i] == 'E' || buf[i] == PHASE_DONE) break;
        phase = buf[i];
    }
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        if (sig == SIGALRM)
            snprintf(why, cap, "did not finish within %d s %s %s", CHILD_TIMEOUT_S,
                     phase_words(phase), library);
        else
            snprintf(why, cap, "crashed with signal %d (%s) %s %s", sig, strsignal(sig),
                     phase_words(phase), library);
        return 1;
    }
    if (i < n && buf[i] == PHASE_DONE) return 0;
    if (i < n && buf[i] == 'E') {
        snprintf(why, cap, "%s", buf + i + 1);
        return 1;
    }
    snprintf(why, cap, "the check process exited with status %d %s %s",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1, phase_words(phase), library);
    return 1;
}

/* Checks one bundle; prints one ok line or a FAIL line with the reason. Returns 1 on failure. */
static int check_bundle(const char *label, const char *manifest_path) {
    weft_error err;
    weft_error_clear(&err);
    weft_plugin_manifest *m = NULL;
    if (weft_plugin_manifest_load(manifest_path, &m, &err) != WEFT_OK) {
        printf("FAIL %s\n     %s\n", label, err.message);
        return 1;
    }
    int failed = 0;
    char why[1200];
    if (m->abi_max < WEFT_ABI_VERSION_MIN || m->abi_min > WEFT_ABI_VERSION) {
        char built[32];
        if (m->abi_min == m->abi_max)
            snprintf(built, sizeof(built), "%u", m->abi_min);
        else
            snprintf(built, sizeof(built), "%u..%u", m->abi_min, m->abi_max);
        printf("FAIL %s %s (%s)\n     plugin %s %s: built for ABI %s, this runtime speaks "
               "%d..%d\n",
               m->name, m->version_text, label, m->name, m->version_text, built,
               WEFT_ABI_VERSION_MIN, WEFT_ABI_VERSION);
        weft_plugin_manifest_free(m);
        return 1;
    }
    /* the library sits beside the manifest */
    char dir[2048], library[2400];
    snprintf(dir, sizeof(dir), "%s", manifest_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    snprintf(library, sizeof(library), "%s/%s", dir, m->library);
    struct stat sb;
    if (stat(library, &sb) != 0) {
        printf("ok   %s %s (%s): manifest valid; library %s not built, binary not checked\n",
               m->name, m->version_text, label, m->library);
    } else if (check_binary(m, library, why, sizeof(why)) != 0) {
        printf("FAIL %s %s (%s)\n     %s\n", m->name, m->version_text, label, why);
        failed = 1;
    } else {
        printf("ok   %s %s (%s): manifest valid, library loads, descriptor matches, "
               "create/destroy ok\n",
               m->name, m->version_text, label);
    }
    weft_plugin_manifest_free(m);
    return failed;
}

int weft_cmd_plugins_check(int argc, char **argv) {
    if (weft_cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *paths[MAX_PATHS];
    size_t n_paths = 0;
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    int n_rest = 0;
    if (!rest) return 1;
    for (int i = 1; i < argc; i++) {
        const char *dirv = NULL;
        if (!strcmp(argv[i], "--path")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft plugins check: --path needs a directory\n");
                free(rest);
                return 2;
            }
            dirv = argv[++i];
        } else if (!strncmp(argv[i], "--path=", 7)) {
            dirv = argv[i] + 7;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "weft plugins check: unknown option %s (see --help)\n", argv[i]);
            free(rest);
            return 2;
        } else {
            rest[n_rest++] = argv[i];
            continue;
        }
        if (n_paths >= MAX_PATHS) {
            fprintf(stderr, "weft plugins check: at most %d --path options\n", MAX_PATHS);
            free(rest);
            return 2;
        }
        paths[n_paths++] = dirv;
    }
    int failed = 0, total = 0;
    if (n_rest) {
        for (int i = 0; i < n_rest; i++, total++) {
            char path[2048];
            struct stat sb;
            if (stat(rest[i], &sb) == 0 && S_ISDIR(sb.st_mode))
                snprintf(path, sizeof(path), "%s/manifest.yaml", rest[i]);
            else
                snprintf(path, sizeof(path), "%s", rest[i]);
            failed += check_bundle(rest[i], path);
        }
    } else {
        weft_error err;
        weft_error_clear(&err);
        weft_registry *reg = NULL;
        if (weft_registry_discover(paths, n_paths, 0, &reg, &err) != WEFT_OK) {
            free(rest);
            return weft_cli_fail("plugins check", &err);
        }
        for (size_t i = 0; i < reg->n; i++) {
            const weft_registry_entry *e = &reg->entries[i];
            total++;
            if (e->status == WEFT_BUNDLE_BROKEN) {
                printf("FAIL %s\n     %s\n", e->bundle_dir, e->error.message);
                failed++;
            } else if (e->status == WEFT_BUNDLE_SHADOWED) {
                printf("ok   %s %s (%s): shadowed by %s, not checked\n", e->manifest->name,
                       e->manifest->version_text, e->bundle_dir,
                       reg->entries[e->shadowed_by].bundle_dir);
            } else {
                failed += check_bundle(e->bundle_dir, e->manifest_path);
            }
        }
        if (!reg->n) printf("no plugin bundles found on the search path\n");
        weft_registry_free(reg);
    }
    free(rest);
    printf("%d of %d bundle(s) passed\n", total - failed, total);
    return failed ? 1 : 0;
}
