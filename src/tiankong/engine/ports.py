"""Local ports for supervised children: a free one from the OS, and whether a chosen one is taken."""

from __future__ import annotations

import errno
import socket


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` is taken. An IPv6 address is tried as one (an IPv4 socket refused ``::1`` and
    every bind failure read as "in use"); a host that does not resolve, or is no address of this machine, is a
    ``ConfigError`` saying so."""
    from ..errors import ConfigError

    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"cannot bind {host!r}: it does not resolve to an address ({exc})",
                          hint="use an address such as 127.0.0.1 or ::1, or a host name that resolves") from None
    family, kind, proto, _, address = found[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            why = "is not an address of this machine" if exc.errno == errno.EADDRNOTAVAIL else \
                f"cannot be bound ({exc.strerror or exc})"
            raise ConfigError(f"{host} port {port} {why}",
                              hint="bind 127.0.0.1 (or ::1, or an address this machine has)") from None
    return False
