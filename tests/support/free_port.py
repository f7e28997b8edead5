#!/usr/bin/env python3
"""Prints a TCP port on 127.0.0.1 that is free now, drawn below the kernel's
ephemeral range (ip_local_port_range), as `titan run` draws its own
(launch::pick_free_port): a port from bind(0) lies in that range, where any
outgoing connection (another test's Gloo pairs) may take it before
torchrun's agent binds it for its store."""

import random
import socket


def main():
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(64):
        port = random.randint(max(1024, low - 16384), low - 1)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        print(port)
        return
    with socket.socket() as s:  # no luck below the range: any free port
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


if __name__ == "__main__":
    main()
