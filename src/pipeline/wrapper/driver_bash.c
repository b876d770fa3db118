/*
 * sandpit bash driver: the builtins its loop calls per cell, loaded with `enable -f`.
 *
 *   __sp_recv            reads the next request from fd 10 and sets the loop's variables
 *   __sp_arm             sets the cell's SIGINT and ERR traps (the first command of a cell)
 *   __sp_disarm          ignores SIGINT and removes the DEBUG and ERR traps (after a cell)
 *   __sp_send STATUS RC  writes the end markers on fds 1 and 2 and the response on fd 11
 *
 * What they do is exactly what driver.sh's own functions of the same names do (the
 * fallback, defined when this library cannot be loaded), and, for the traps, what the trap
 * builtin does with the same arguments (the same calls of bash's set_signal, ignore_signal
 * and restore_default_signal): the protocol and the traps are described there. They exist
 * for speed alone. Bash spends about 3 us on each command it interprets (parsing words,
 * expanding, allocating; the trap builtin first tries a handler's text as a signal name),
 * and a request's fields took a dozen commands and three redirections (each a dozen system
 * calls); these builtins do the same with the reads and writes alone: a warm cell costs
 * about 50 us less (0.14 -> 0.09 ms, tests/driver_harness.py).
 *
 * The host (src/pipeline/wrapper/bash_builtins.rs) hands the library to the shell as a sealed memfd
 * on fd 5; the driver loads it from /proc/self/fd/5 and closes fd 5 before any cell runs.
 *
 * Bash's side of the interface: a loadable builtin is a `struct builtin` named
 * NAME_struct, called with its arguments as a WORD_LIST, and the shell's variables are set
 * with bind_variable (exported by bash for loadables). These declarations match bash's
 * builtins.h, command.h and variables.h from bash 2.0 to 5.2 (the driver needs 4.4 or
 * later); bash's own headers are not needed to build this file.
 */
#define _DEFAULT_SOURCE /* NSIG, whatever -std the build asks for */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct word_desc {
    char *word;
    int flags;
} WORD_DESC;
typedef struct word_list {
    struct word_list *next;
    WORD_DESC *word;
} WORD_LIST;
typedef int sh_builtin_func_t(WORD_LIST *);
struct builtin {
    const char *name;
    sh_builtin_func_t *function;
    int flags;
    const char *const *long_doc;
    const char *short_doc;
    char *handle;
};
#define BUILTIN_ENABLED 0x01
#define EXECUTION_SUCCESS 0
#define EXECUTION_FAILURE 1

struct variable;
extern struct variable *bind_variable(const char *, char *, int);
extern char *get_string_value(const char *);
extern void check_signals_and_traps(void);
extern void set_signal(int, char *);
extern void ignore_signal(int);
extern void restore_default_signal(int);
extern char *signal_name(int);

/* Bash numbers its DEBUG and ERR traps after the signals (trap.h: DEBUG_TRAP is NSIG,
 * ERROR_TRAP NSIG+1). Each builtin's load function checks that this shell names them so;
 * if it does not, none is loaded (enable fails, and the driver uses its functions). The
 * library is linked with -z now: a symbol the shell lacks fails the load, not a call. */
#define DEBUG_TRAP NSIG
#define ERROR_TRAP (NSIG + 1)

static int same_traps(void) {
    const char *debug = signal_name(DEBUG_TRAP), *err = signal_name(ERROR_TRAP);
    return debug != NULL && err != NULL && strcmp(debug, "DEBUG") == 0 && strcmp(err, "ERR") == 0;
}

/* The trap texts, as driver.sh's functions give them to the trap builtin. */
#define ON_INT "{ builtin eval \"$__sp_on_int\"; } 2>/dev/null"
#define ON_ERR "{ builtin eval \"$__sp_on_err\"; } 2>/dev/null"

/* The request being run: its id and nonce, for the response. */
static char cell_id[21];
static char nonce[33];

/* A read interrupted by a signal: as bash's own read and mapfile do, the shell handles it
 * first (a terminating signal ends the shell, a trapped one runs its trap, between cells),
 * then the read goes on. */
static int interrupted(ssize_t r) {
    if (r < 0 && errno == EINTR) {
        check_signals_and_traps();
        return 1;
    }
    return 0;
}

/* Reads exactly n bytes; -1 at EOF or on an error. */
static int read_exact(int fd, char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (interrupted(r))
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Reads up to and including a NUL byte, one byte at a time (nothing after it may be taken
 * from the pipe). Returns the bytes before it, NUL-terminated, or NULL at EOF. */
static char *read_to_nul(int fd) {
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL)
        return NULL;
    for (;;) {
        char c;
        ssize_t r = read(fd, &c, 1);
        if (interrupted(r))
            continue;
        if (r <= 0) {
            free(buf);
            return NULL;
        }
        if (c == '\0')
            break;
        if (len + 1 == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        buf[len++] = c;
    }
    buf[len] = '\0';
    return buf;
}

/* The code's length: 1 to 10 decimal digits, as the host writes it, below 2^30 (nothing near
 * SIZE_MAX even where size_t is 32 bits). Parsed here rather than by strtoul, which glibc
 * 2.38+ headers turn into a symbol older C libraries lack (a container's, say). */
static int parse_length(const char *s, size_t *n) {
    size_t v = 0;
    if (*s == '\0')
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (size_t)(*s - '0');
        if (v >= (size_t)1 << 30)
            return -1;
    }
    *n = v;
    return 0;
}

/* A header field: `width` bytes, left-aligned and padded with spaces. */
static void field(char *dst, const char *src, size_t width) {
    memcpy(dst, src, width);
    dst[width] = '\0';
    char *space = strchr(dst, ' ');
    if (space != NULL)
        *space = '\0';
}

/* Sets a shell variable, and says whether it now holds the value: a variable the code made
 * readonly keeps its old one (bash says so on stderr), and the driver must not run a stale
 * cell; as the fallback's read into it fails, the request fails and the driver exits (the
 * host restarts the session). */
static int set(const char *name, const char *value) {
    bind_variable(name, (char *)value, 0);
    const char *now = get_string_value(name);
    return now != NULL && strcmp(now, value) == 0;
}

static int recv_builtin(WORD_LIST *args) {
    (void)args;
    char h[67];
    /* A "{" where a header is expected starts a late tool answer: its line is skipped. */
    for (;;) {
        if (read_exact(10, h, 1) != 0)
            return EXECUTION_FAILURE;
        if (h[0] != '{')
            break;
        char c;
        do {
            if (read_exact(10, &c, 1) != 0)
                return EXECUTION_FAILURE;
        } while (c != '\n');
    }
    if (read_exact(10, h + 1, 66) != 0)
        return EXECUTION_FAILURE;
    /* IP NONCE ID LEN: offsets 0, 1, 3, 36, 57 */
    char len[11];
    field(nonce, h + 3, 32);
    field(cell_id, h + 36, 20);
    field(len, h + 57, 10);
    char *prelude = NULL, *code;
    if (h[1] != '0' && (prelude = read_to_nul(10)) == NULL)
        return EXECUTION_FAILURE;
    if (len[0] == '-') {
        code = read_to_nul(10);
    } else {
        size_t n = 0;
        code = parse_length(len, &n) == 0 ? malloc(n + 1) : NULL;
        if (code != NULL && read_exact(10, code, n) != 0) {
            free(code);
            code = NULL;
        }
        if (code != NULL)
            code[n] = '\0';
    }
    if (code == NULL) {
        free(prelude);
        return EXECUTION_FAILURE;
    }
    char inter[2] = {h[0], '\0'};
    /* As the fallback's `case`: only declare/typeset/local can leave variables local to the
     * cell's function, only sandpit-tool calls a host tool, and source/eval/. may do either. */
    int runs_code = strstr(code, "source") || strstr(code, "eval") || strstr(code, ". ");
    int declares = runs_code || strstr(code, "declare") || strstr(code, "typeset") || strstr(code, "local");
    int tools = runs_code || strstr(code, "sandpit-tool");
    int ok = set("__sp_inter", inter) && set("__sp_id", cell_id) &&
             set("__sp_prelude", prelude != NULL ? prelude : "") && set("__sp_code", code) &&
             (!tools || set("__sp_tool_track", "1")) && set("__sp_k", declares ? "k" : "") &&
             set("__sp_int", "0") && set("__sp_f", "") && set("__sp_in_cell", "1");
    free(prelude);
    free(code);
    return ok ? EXECUTION_SUCCESS : EXECUTION_FAILURE;
}

static void write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        buf += w;
        n -= (size_t)w;
    }
}

/* Appends s at *p (bounded by end); returns the new end of the text. */
static char *append(char *p, const char *end, const char *s) {
    size_t n = strlen(s);
    if (n > (size_t)(end - p))
        n = (size_t)(end - p);
    memcpy(p, s, n);
    return p + n;
}

static int send_builtin(WORD_LIST *args) {
    const char *status = "ok", *rc = "0";
    if (args != NULL) {
        status = args->word->word;
        if (args->next != NULL)
            rc = args->next->word->word;
    }
    char mark[46];
    mark[0] = '\036';
    memcpy(mark + 1, "sandpit-end:", 12);
    memcpy(mark + 13, nonce, 32);
    mark[45] = '\036';
    write_all(1, mark, sizeof mark);
    write_all(2, mark, sizeof mark);
    char line[256];
    char *p = line, *end = line + sizeof line - 1;
    p = append(p, end, "{\"id\":");
    p = append(p, end, cell_id);
    p = append(p, end, ",\"nonce\":\"");
    p = append(p, end, nonce);
    p = append(p, end, "\",\"status\":\"");
    p = append(p, end, status);
    p = append(p, end, "\",\"exit_code\":");
    p = append(p, end, rc);
    p = append(p, end, ",\"result\":null,\"exception\":null,\"warnings\":[]}");
    *p++ = '\n';
    write_all(11, line, (size_t)(p - line));
    return EXECUTION_SUCCESS;
}

/* `trap 'ON_INT' 2; trap 'ON_ERR' ERR` */
static int arm_builtin(WORD_LIST *args) {
    (void)args;
    set_signal(SIGINT, ON_INT);
    set_signal(ERROR_TRAP, ON_ERR);
    return EXECUTION_SUCCESS;
}

/* `trap '' 2; trap - DEBUG ERR` */
static int disarm_builtin(WORD_LIST *args) {
    (void)args;
    ignore_signal(SIGINT);
    restore_default_signal(DEBUG_TRAP);
    restore_default_signal(ERROR_TRAP);
    return EXECUTION_SUCCESS;
}

static const char *const recv_doc[] = {"Reads the next request (sandpit driver).", NULL};
static const char *const arm_doc[] = {"Sets the cell's SIGINT and ERR traps (sandpit driver).", NULL};
static const char *const disarm_doc[] = {"Ignores SIGINT, removes the DEBUG and ERR traps (sandpit driver).", NULL};
static const char *const send_doc[] = {"Writes the end markers and the response (sandpit driver).", NULL};

struct builtin __sp_recv_struct = {"__sp_recv", recv_builtin, BUILTIN_ENABLED, recv_doc, "__sp_recv", NULL};
struct builtin __sp_arm_struct = {"__sp_arm", arm_builtin, BUILTIN_ENABLED, arm_doc, "__sp_arm", NULL};
struct builtin __sp_disarm_struct = {"__sp_disarm", disarm_builtin, BUILTIN_ENABLED, disarm_doc, "__sp_disarm", NULL};
struct builtin __sp_send_struct = {"__sp_send", send_builtin, BUILTIN_ENABLED, send_doc, "__sp_send STATUS RC", NULL};

/* Called by `enable -f` for each builtin before it is added: 0 refuses it. */
int __sp_recv_builtin_load(char *name) { (void)name; return same_traps(); }
int __sp_arm_builtin_load(char *name) { (void)name; return same_traps(); }
int __sp_disarm_builtin_load(char *name) { (void)name; return same_traps(); }
int __sp_send_builtin_load(char *name) { (void)name; return same_traps(); }
