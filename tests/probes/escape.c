/* escape: one probe per boundary, run inside a box; prints `name=result`
 * lines that the live suite checks from outside. Each check reports what
 * happened, never a verdict, so the test decides what counts as contained.
 *
 *   escape pids                 own pid, every pid visible in /proc
 *   escape signal PID           kill(PID, 0) and ptrace(ATTACH, PID)
 *   escape tiocsti FD           push a character into FD's terminal
 *   escape secret HEAD TAIL     is HEAD+TAIL in our env or any readable /proc
 *                               file (split so our own argv does not hold it)
 *   escape fds                  descriptors open in this process
 *   escape connect HOST PORT    TCP connect (2 s timeout)
 *   escape killall              kill(-1, SIGKILL)
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static const char *res(int rc) { return rc == 0 ? "ok" : strerror(errno); }

static int numeric(const char *s) {
    if (!*s) return 0;
    for (; *s; s++) if (*s < '0' || *s > '9') return 0;
    return 1;
}

static int file_has(const char *path, const char *needle) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    size_t m = strlen(needle);
    for (size_t i = 0; m && i + m <= n; i++) if (memcmp(buf + i, needle, m) == 0) return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *what = argv[1];
    if (!strcmp(what, "pids")) {
        printf("self=%d\n", getpid());
        DIR *d = opendir("/proc");
        struct dirent *e;
        printf("pids=");
        while (d && (e = readdir(d))) if (numeric(e->d_name)) printf("%s,", e->d_name);
        printf("\n");
    } else if (!strcmp(what, "signal") && argc > 2) {
        pid_t pid = atoi(argv[2]);
        printf("kill0=%s\n", res(kill(pid, 0)));
        printf("ptrace=%s\n", res((int)ptrace(PTRACE_ATTACH, pid, 0, 0)));
    } else if (!strcmp(what, "tiocsti") && argc > 2) {
        char c = '#';
        printf("tiocsti=%s\n", res(ioctl(atoi(argv[2]), TIOCSTI, &c)));
        int tty = open("/dev/tty", O_RDWR);
        printf("devtty=%s\n", tty < 0 ? strerror(errno) : "opened");
    } else if (!strcmp(what, "secret") && argc > 3) {
        char v[256];
        snprintf(v, sizeof v, "%s%s", argv[2], argv[3]);
        int found = 0;
        extern char **environ;
        for (char **e = environ; *e; e++) if (strstr(*e, v)) { printf("found=env:%s\n", *e); found = 1; }
        DIR *d = opendir("/proc");
        struct dirent *e;
        const char *files[] = {"environ", "cmdline"};
        char path[512];
        while (d && (e = readdir(d))) {
            if (!numeric(e->d_name)) continue;
            for (int i = 0; i < 2; i++) {
                snprintf(path, sizeof path, "/proc/%s/%s", e->d_name, files[i]);
                if (file_has(path, v)) { printf("found=%s\n", path); found = 1; }
            }
        }
        printf("secret=%s\n", found ? "visible" : "absent");
    } else if (!strcmp(what, "fds")) {
        DIR *d = opendir("/proc/self/fd");
        int own = d ? dirfd(d) : -1;
        struct dirent *e;
        printf("fds=");
        while (d && (e = readdir(d))) if (numeric(e->d_name) && atoi(e->d_name) != own) printf("%s,", e->d_name);
        printf("\n");
    } else if (!strcmp(what, "connect") && argc > 3) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct timeval tv = {2, 0};
        setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        printf("connect=%s\n", res(connect(s, (struct sockaddr *)&a, sizeof a)));
    } else if (!strcmp(what, "killall")) {
        fflush(stdout);
        printf("killall=%s\n", res(kill(-1, SIGKILL)));
    } else {
        return 2;
    }
    fflush(stdout);
    return 0;
}
