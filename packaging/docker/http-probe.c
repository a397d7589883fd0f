/* http-probe: the images' health check. GET http://IPV4:PORT/PATH, exit 0 on a 2xx status,
 * 1 otherwise (connection refused, timeout, other status). Statically linked and without a
 * shell, so the images keep no shell or package manager; numeric IPv4 only (no resolver).
 * Usage: http-probe http://127.0.0.1:13133/
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "http-probe: %s\n", what);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2 || strncmp(argv[1], "http://", 7) != 0)
        return fail("usage: http-probe http://IPV4:PORT/PATH");
    char host[64];
    const char *hp = argv[1] + 7;
    const char *colon = strchr(hp, ':');
    if (!colon || (size_t)(colon - hp) >= sizeof host) return fail("expected http://IPV4:PORT/PATH");
    memcpy(host, hp, (size_t)(colon - hp));
    host[colon - hp] = '\0';
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (port <= 0 || port > 65535 || (*end != '/' && *end != '\0')) return fail("bad port");
    const char *path = *end == '/' ? end : "/";
    if (strlen(path) > 512) return fail("path too long");

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) return fail("host must be a numeric IPv4 address");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return fail(strerror(errno));
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) return fail(strerror(errno));

    char req[640];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s:%ld\r\nConnection: close\r\n\r\n", path, host, port);
    if (n < 0 || (size_t)n >= sizeof req || write(fd, req, (size_t)n) != n) return fail("write failed");

    char resp[64];
    size_t got = 0;
    while (got < sizeof resp - 1) {
        ssize_t r = read(fd, resp + got, sizeof resp - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    resp[got] = '\0';
    /* "HTTP/1.x 2xx" */
    if (got < 12 || strncmp(resp, "HTTP/1.", 7) != 0 || resp[9] != '2') {
        fprintf(stderr, "http-probe: unhealthy: %.12s\n", got ? resp : "(no response)");
        return 1;
    }
    return 0;
}
