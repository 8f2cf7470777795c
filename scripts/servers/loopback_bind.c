/* LD_PRELOAD shim for the RocketMQ JVMs of scripts/servers/rocketmq.sh: every bind() to a
 * non-loopback IPv4/IPv6 address is rewritten to 127.0.0.1 (::ffff:127.0.0.1 for IPv6).
 *
 * Why: RocketMQ 5.x has a bind address for its remoting servers (bindAddress), but the broker's
 * HA service (master side, haListenPort) and RocketMQ 4.9.x everywhere bind the wildcard
 * address. The servers must listen on loopback only; rocketmq.sh checks it with `ss` after
 * start-up as well. Built by rocketmq.sh with `gcc -shared -fPIC` into its run folder. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);
static bind_fn real_bind;

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    if (!real_bind) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in a;
        memcpy(&a, addr, sizeof a);
        if ((ntohl(a.sin_addr.s_addr) >> 24) != 127) {
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            fprintf(stderr, "loopback_bind: port %d -> 127.0.0.1\n", ntohs(a.sin_port));
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    } else if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 a;
        memcpy(&a, addr, sizeof a);
        int v4_loopback = IN6_IS_ADDR_V4MAPPED(&a.sin6_addr) && a.sin6_addr.s6_addr[12] == 127;
        if (!IN6_IS_ADDR_LOOPBACK(&a.sin6_addr) && !v4_loopback) {
            memset(&a.sin6_addr, 0, sizeof a.sin6_addr);
            a.sin6_addr.s6_addr[10] = 0xff;
            a.sin6_addr.s6_addr[11] = 0xff;
            a.sin6_addr.s6_addr[12] = 127;
            a.sin6_addr.s6_addr[15] = 1;
            fprintf(stderr, "loopback_bind: ipv6 port %d -> ::ffff:127.0.0.1\n", ntohs(a.sin6_port));
            return real_bind(fd, (const struct sockaddr *)&a, sizeof a);
        }
    }
    return real_bind(fd, addr, len);
}
