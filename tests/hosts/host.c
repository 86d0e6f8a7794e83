/*
 * A foreign host for the tinybox TinyBus module, as TinyBus would be: it
 * dlopens the built library, resolves the four documented symbols, and
 * drives boxes through tinybox_call. Compiled and run by
 * tests/tests/module_c_host.rs with the system cc.
 *
 *   host LIB manifest
 *   host LIB e2e STORE WORKDIR SANDBOX
 *   host LIB bad STORE
 *   host LIB threads STORE THREADS PER_THREAD
 *   host LIB call METHOD PARAMS_JSON
 *
 * It checks what C can check cheaply and prints every result as
 * "TAG<TAB>JSON" on one line, for the Rust test to parse and assert on.
 * Any failed check prints "FAIL: ..." on stderr and exits 1.
 */

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint32_t (*abi_version_fn)(void);
typedef char *(*manifest_fn)(void);
typedef char *(*call_fn)(char const *method, char const *params_json);
typedef void (*free_fn)(char *s);

static abi_version_fn tb_abi_version;
static manifest_fn tb_manifest;
static call_fn tb_call;
static free_fn tb_free;

static void fail(char const *what, char const *detail) {
    fprintf(stderr, "FAIL: %s: %s\n", what, detail ? detail : "(null)");
    exit(1);
}

static void *sym(void *lib, char const *name) {
    void *p = dlsym(lib, name);
    if (!p) fail("dlsym", name);
    return p;
}

/* Calls, prints "TAG\tRESULT", and returns a malloc'd copy of the result
 * (the library's string is freed here, exactly once). */
static char *call_print(char const *tag, char const *method, char const *params) {
    char *r = tb_call(method, params);
    if (!r) fail(tag, "tinybox_call returned NULL");
    char *copy = strdup(r);
    tb_free(r);
    if (tag) printf("%s\t%s\n", tag, copy);
    fflush(stdout);
    return copy;
}

static int is_ok(char const *json) { return strncmp(json, "{\"ok\":", 6) == 0; }

static void expect_ok(char const *tag, char const *json) {
    if (!is_ok(json)) fail(tag, json);
}

static void expect_code(char const *tag, char const *json, char const *code) {
    char want[128];
    snprintf(want, sizeof want, "{\"error\":{\"code\":\"%s\"", code);
    if (strncmp(json, want, strlen(want)) != 0) fail(tag, json);
}

/* The box id of a create result: {"ok":{"created_at":..,"id":"box-N",...}} */
static void box_id(char const *json, char *out, size_t n) {
    char const *p = strstr(json, "\"id\":\"");
    if (!p) fail("box id", json);
    p += 6;
    size_t i = 0;
    while (p[i] && p[i] != '"' && i + 1 < n) { out[i] = p[i]; i++; }
    out[i] = 0;
}

static void load(char const *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) fail("dlopen", dlerror());
    tb_abi_version = (abi_version_fn)sym(lib, "tinybox_abi_version");
    tb_manifest = (manifest_fn)sym(lib, "tinybox_manifest");
    tb_call = (call_fn)sym(lib, "tinybox_call");
    tb_free = (free_fn)sym(lib, "tinybox_free");
    /* ABI check first, as the release contract says a host must. */
    uint32_t abi = tb_abi_version();
    if (abi != 1) { fprintf(stderr, "FAIL: ABI %u, this host speaks 1\n", abi); exit(1); }
}

static int manifest(void) {
    char *m = tb_manifest();
    if (!m) fail("manifest", "NULL");
    if (!strstr(m, "\"abi_version\":\"1\"")) fail("manifest abi_version", m);
    if (!strstr(m, "\"name\":\"tinybox\"")) fail("manifest name", m);
    printf("manifest\t%s\n", m);
    tb_free(m);
    tb_free(NULL); /* documented as a no-op */
    return 0;
}

static int e2e(char const *store, char const *workdir, char const *sandbox) {
    char params[4096], id[80];
    snprintf(params, sizeof params, "{\"store\":\"%s\",\"sandbox\":\"%s\",\"workspace\":\"%s\"}", store, sandbox,
             workdir);
    char *created = call_print("create", "create", params);
    expect_ok("create", created);
    box_id(created, id, sizeof id);
    free(created);

    /* An argument vector with spaces, quotes, a dollar and a glob: each must
     * arrive as one argument, unexpanded. The command prints each between
     * bars, writes to stderr, and exits 3. */
    snprintf(params, sizeof params,
             "{\"store\":\"%s\",\"id\":\"%s\",\"argv\":[\"sh\",\"-c\","
             "\"printf '[%%s]' \\\"$@\\\"; echo; echo to-stderr >&2; exit 3\",\"sh\","
             "\"a b\",\"it's\",\"say \\\"hi\\\"\",\"$HOME\",\"*\",\"\"]}",
             store, id);
    char *r = call_print("exec_argv", "exec", params);
    expect_ok("exec_argv", r);
    if (!strstr(r, "\"exit_code\":3")) fail("exec_argv exit code", r);
    free(r);

    snprintf(params, sizeof params,
             "{\"store\":\"%s\",\"id\":\"%s\",\"argv\":[\"cat\"],\"stdin\":\"fed through stdin\\n\"}", store, id);
    r = call_print("exec_stdin", "exec", params);
    expect_ok("exec_stdin", r);
    free(r);

    snprintf(params, sizeof params,
             "{\"store\":\"%s\",\"id\":\"%s\",\"argv\":[\"printf\",\"\\\\377\\\\000\\\\001\"]}", store, id);
    r = call_print("exec_binary", "exec", params);
    expect_ok("exec_binary", r);
    free(r);

    snprintf(params, sizeof params, "{\"store\":\"%s\",\"id\":\"%s\",\"argv\":[\"pwd\"]}", store, id);
    r = call_print("exec_pwd", "exec", params);
    expect_ok("exec_pwd", r);
    free(r);

    /* Streaming: start, read until done, wait. */
    snprintf(params, sizeof params,
             "{\"store\":\"%s\",\"id\":\"%s\",\"argv\":[\"sh\",\"-c\",\"echo one; echo two >&2; exit 4\"]}",
             store, id);
    r = call_print("exec_start", "exec.start", params);
    expect_ok("exec_start", r);
    char handle[80];
    char const *h = strstr(r, "\"exec\":\"");
    if (!h) fail("exec.start handle", r);
    h += 8;
    size_t i = 0;
    while (h[i] && h[i] != '"' && i + 1 < sizeof handle) { handle[i] = h[i]; i++; }
    handle[i] = 0;
    free(r);
    for (int n = 0;; n++) {
        if (n > 10000) fail("exec.read", "never done");
        snprintf(params, sizeof params, "{\"exec\":\"%s\"}", handle);
        r = call_print("exec_read", "exec.read", params);
        expect_ok("exec_read", r);
        int done = strstr(r, "\"done\":true") && strstr(r, "\"stdout_eof\":true") && strstr(r, "\"stderr_eof\":true");
        free(r);
        if (done) break;
    }
    snprintf(params, sizeof params, "{\"exec\":\"%s\"}", handle);
    r = call_print("exec_wait", "exec.wait", params);
    expect_ok("exec_wait", r);
    free(r);
    r = call_print("exec_wait_again", "exec.wait", params);
    expect_code("exec_wait_again", r, "not_found");
    free(r);

    snprintf(params, sizeof params, "{\"store\":\"%s\",\"id\":\"%s\"}", store, id);
    r = call_print("inspect", "inspect", params);
    expect_ok("inspect", r);
    free(r);
    snprintf(params, sizeof params, "{\"store\":\"%s\"}", store);
    r = call_print("ls", "ls", params);
    expect_ok("ls", r);
    free(r);
    snprintf(params, sizeof params, "{\"store\":\"%s\",\"ids\":[\"%s\"]}", store, id);
    r = call_print("rm", "rm", params);
    expect_ok("rm", r);
    free(r);
    snprintf(params, sizeof params, "{\"store\":\"%s\"}", store);
    r = call_print("ls_after", "ls", params);
    if (strcmp(r, "{\"ok\":[]}") != 0) fail("ls after rm", r);
    free(r);
    return 0;
}

static int bad(char const *store) {
    char params[1024];
    struct { char const *tag, *method, *params, *code; } cases[] = {
        {"null_method", NULL, "{}", "invalid_argument"},
        {"null_params", "ls", NULL, "invalid_argument"},
        {"null_both", NULL, NULL, "invalid_argument"},
        {"utf8_method", "l\xff\xfes", "{}", "invalid_argument"},
        {"utf8_params", "ls", "{\"store\":\"\xc3\x28\"}", "invalid_argument"},
        {"json_truncated", "ls", "{\"store\":", "invalid_argument"},
        {"json_not_object", "ls", "[1,2]", "invalid_argument"},
        {"json_empty", "ls", "", "invalid_argument"},
        {"unknown_method", "frobnicate", "{}", "unknown_method"},
        {"abi_mismatch", "ls", "{\"abi\":\"2\"}", "abi_mismatch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *r = call_print(cases[i].tag, cases[i].method, cases[i].params);
        expect_code(cases[i].tag, r, cases[i].code);
        free(r);
    }
    /* Cases that need the store. */
    struct { char const *tag, *method, *fmt, *code; } store_cases[] = {
        {"bad_box_name", "inspect", "{\"store\":\"%s\",\"id\":\"../etc\"}", "invalid_argument"},
        {"bad_sandbox_name", "create", "{\"store\":\"%s\",\"sandbox\":\"bad/name\"}", "invalid_argument"},
        {"empty_template_name", "template.rm", "{\"store\":\"%s\",\"name\":\"\"}", "invalid_argument"},
        {"long_name", "inspect",
         "{\"store\":\"%s\",\"id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
         "invalid_argument"},
        {"zero_pids", "create", "{\"store\":\"%s\",\"sandbox\":\"passthrough\",\"pids\":0}", "invalid_argument"},
        {"zero_memory", "create", "{\"store\":\"%s\",\"sandbox\":\"passthrough\",\"memory\":0}", "invalid_argument"},
        {"zero_cpus", "create", "{\"store\":\"%s\",\"sandbox\":\"passthrough\",\"cpus\":0}", "invalid_argument"},
        {"zero_ttl", "create", "{\"store\":\"%s\",\"sandbox\":\"passthrough\",\"ttl_secs\":0}", "invalid_argument"},
        {"unknown_field", "create", "{\"store\":\"%s\",\"sandbox\":\"passthrough\",\"memroy\":\"1G\"}",
         "invalid_argument"},
        {"unsupported_limit", "create", "{\"store\":\"%s\",\"sandbox\":\"passthrough\",\"memory\":\"1G\"}",
         "unsupported"},
        {"no_such_driver", "create", "{\"store\":\"%s\",\"sandbox\":\"nonexistent\"}", "unavailable"},
        {"no_such_box", "inspect", "{\"store\":\"%s\",\"id\":\"box-999\"}", "not_found"},
        {"exec_no_such_box", "exec", "{\"store\":\"%s\",\"id\":\"box-999\",\"argv\":[\"true\"]}", "not_found"},
        {"exec_empty_argv", "exec", "{\"store\":\"%s\",\"id\":\"box-0\",\"argv\":[]}", "invalid_argument"},
        {"exec_no_argv", "exec", "{\"store\":\"%s\",\"id\":\"box-0\"}", "invalid_argument"},
        {"exec_zero_timeout", "exec", "{\"store\":\"%s\",\"id\":\"box-0\",\"argv\":[\"true\"],\"timeout_secs\":0}",
         "invalid_argument"},
        {"read_no_such_exec", "exec.read", "{\"store\":\"%s\",\"exec\":\"exec-999999\"}", "not_found"},
    };
    for (size_t i = 0; i < sizeof store_cases / sizeof store_cases[0]; i++) {
        snprintf(params, sizeof params, store_cases[i].fmt, store);
        char *r = call_print(store_cases[i].tag, store_cases[i].method, params);
        expect_code(store_cases[i].tag, r, store_cases[i].code);
        free(r);
    }
    /* Nothing was left behind by any of it. */
    snprintf(params, sizeof params, "{\"store\":\"%s\"}", store);
    char *r = call_print("ls_after_bad", "ls", params);
    if (strcmp(r, "{\"ok\":[]}") != 0) fail("ls after bad input", r);
    free(r);
    return 0;
}

struct worker {
    char const *store;
    int index, per_thread, failures;
    char ids[64][80];
};

static void *work(void *arg) {
    struct worker *w = arg;
    char params[1024];
    for (int i = 0; i < w->per_thread; i++) {
        snprintf(params, sizeof params, "{\"store\":\"%s\",\"sandbox\":\"passthrough\"}", w->store);
        char *r = call_print(NULL, "create", params);
        if (!is_ok(r)) { fprintf(stderr, "thread %d create: %s\n", w->index, r); w->failures++; free(r); continue; }
        box_id(r, w->ids[i], sizeof w->ids[i]);
        free(r);
        /* Each thread also runs a command in its own box and sees its own output. */
        snprintf(params, sizeof params, "{\"store\":\"%s\",\"id\":\"%s\",\"argv\":[\"echo\",\"t%d-%d\"]}",
                 w->store, w->ids[i], w->index, i);
        r = call_print(NULL, "exec", params);
        char want[64];
        snprintf(want, sizeof want, "\"stdout\":\"t%d-%d\\n\"", w->index, i);
        if (!is_ok(r) || !strstr(r, want)) { fprintf(stderr, "thread %d exec: %s\n", w->index, r); w->failures++; }
        free(r);
    }
    return NULL;
}

static void *unwork(void *arg) {
    struct worker *w = arg;
    char params[1024];
    for (int i = 0; i < w->per_thread; i++) {
        snprintf(params, sizeof params, "{\"store\":\"%s\",\"id\":\"%s\"}", w->store, w->ids[i]);
        char *r = call_print(NULL, "rm", params);
        if (!is_ok(r) || !strstr(r, "\"failed\":[]")) { fprintf(stderr, "rm: %s\n", r); w->failures++; }
        free(r);
    }
    return NULL;
}

static int threads(char const *store, int n, int per) {
    if (n > 64 || per > 64) fail("threads", "at most 64 threads of 64 boxes");
    struct worker *ws = calloc((size_t)n, sizeof *ws);
    pthread_t *ts = calloc((size_t)n, sizeof *ts);
    for (int i = 0; i < n; i++) {
        ws[i].store = store;
        ws[i].index = i;
        ws[i].per_thread = per;
        if (pthread_create(&ts[i], NULL, work, &ws[i]) != 0) fail("pthread_create", "work");
    }
    int failures = 0;
    for (int i = 0; i < n; i++) { pthread_join(ts[i], NULL); failures += ws[i].failures; }
    char params[1024];
    snprintf(params, sizeof params, "{\"store\":\"%s\"}", store);
    char *listed = call_print("threads_ls", "ls", params);
    /* Every id a thread was given is listed. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < per; j++) {
            char want[128];
            snprintf(want, sizeof want, "\"id\":\"%s\"", ws[i].ids[j]);
            if (!strstr(listed, want)) { fprintf(stderr, "lost box %s\n", ws[i].ids[j]); failures++; }
        }
    free(listed);
    for (int i = 0; i < n; i++)
        if (pthread_create(&ts[i], NULL, unwork, &ws[i]) != 0) fail("pthread_create", "unwork");
    for (int i = 0; i < n; i++) { pthread_join(ts[i], NULL); failures += ws[i].failures; }
    char *after = call_print("threads_ls_after", "ls", params);
    free(after);
    printf("threads_failures\t%d\n", failures);
    free(ws);
    free(ts);
    return failures == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: host LIB MODE ...\n"); return 2; }
    load(argv[1]);
    char const *mode = argv[2];
    if (!strcmp(mode, "manifest")) return manifest();
    if (!strcmp(mode, "e2e") && argc == 6) return e2e(argv[3], argv[4], argv[5]);
    if (!strcmp(mode, "bad") && argc == 4) return bad(argv[3]);
    if (!strcmp(mode, "threads") && argc == 6) return threads(argv[3], atoi(argv[4]), atoi(argv[5]));
    if (!strcmp(mode, "call") && argc == 5) { free(call_print("call", argv[3], argv[4])); return 0; }
    fprintf(stderr, "usage: host LIB manifest | e2e STORE WORKDIR SANDBOX | bad STORE | threads STORE N PER | call M P\n");
    return 2;
}
