"""Local ports for supervised children: a free one from the OS, and whether a chosen one is taken."""

from __future__ import annotations

import errno
import socket
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free on ``host`` (``ConfigError`` as :func:`port_in_use` says it)."""
    family, kind, proto, address = _address(host, 0)
    with socket.socket(family, kind, proto) as sock:
        try:
            sock.bind(address)
        except OSError as exc:
            raise _bind_error(host, 0, exc) from None
        return int(sock.getsockname()[1])


def _address(host: str, port: int) -> tuple[socket.AddressFamily, socket.SocketKind, int, tuple[Any, ...]]:
    from ..errors import ConfigError

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"cannot bind {host!r}: it does not resolve to an address ({exc})",
                          hint="use an address such as 127.0.0.1 or ::1, or a host name that resolves") from None
    return family, kind, proto, address


def _bind_error(host: str, port: int, exc: OSError) -> Exception:
    from ..errors import ConfigError

    why = "is not an address of this machine" if exc.errno == errno.EADDRNOTAVAIL else \
        f"cannot be bound ({exc.strerror or exc})"
    return ConfigError(f"{host}{f' port {port}' if port else ''} {why}",
                       hint="bind 127.0.0.1 (or ::1, or an address this machine has)")


def port_in_use(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` is taken. An IPv6 address is tried as one (an IPv4 socket refused ``::1`` and
    every bind failure read as "in use"); a host that does not resolve, or is no address of this machine, is a
    ``ConfigError`` saying so."""
    family, kind, proto, address = _address(host, port)
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise _bind_error(host, port, exc) from None
    return False
