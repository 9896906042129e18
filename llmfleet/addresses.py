"""Where a service listens, and where a process on the same host reaches it."""


def listen(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def local_url(address: str, port: int, path: str = "/metrics") -> str:
    """Where a process on the host itself reaches an exporter listening on `address`."""
    host = "127.0.0.1" if address in ("0.0.0.0", "::") else address
    return f"http://{listen(host, port)}{path}"
