/* The smallest container the Docker fault tests need (no image can be pulled here): a
 * static binary in a FROM-scratch image. It answers "ok\n" to every TCP connection on port
 * 7000 and exits 0 on SIGTERM (as PID 1 it would ignore it otherwise). */
#include <arpa/inet.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void bye(int signum) {
    (void)signum;
    _exit(0);
}

int main(void) {
    signal(SIGTERM, bye);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(7000);
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 16) != 0)
        return 1;
    for (;;) {
        int c = accept(fd, 0, 0);
        if (c >= 0) {
            (void)!write(c, "ok\n", 3);
            close(c);
        }
    }
}
