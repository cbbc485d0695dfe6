#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	int server = argv[1][0] == 's', port = atoi(argv[2]), n = atoi(argv[3]);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	char buf[64] = "hello world 14";
	int fd, one = 1;
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	if (server) {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (void *)&a, sizeof(a)) || listen(l, 8)) { perror("bind"); return 1; }
		fd = accept(l, NULL, NULL);
	} else {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (void *)&a, sizeof(a))) { perror("connect"); return 1; }
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (int i = 0; i < n; i++) {
		if (server) {
			if (recv(fd, buf, 14, 0) != 14 || send(fd, buf, 14, 0) != 14) return 2;
		} else {
			if (send(fd, buf, 14, 0) != 14 || recv(fd, buf, 14, 0) != 14) return 2;
		}
	}
	close(fd);
	return 0;
}
