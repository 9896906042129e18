"""Run on a host by the verify suite: can this host reach each endpoint in argv?

Each argument is "get URL" (an HTTP GET, its status is printed) or "tcp URL" (a TCP connection
to the URL's host and port, 200 printed on success). Errors are printed as text.
"""
import json
import socket
import sys
import urllib.parse
import urllib.request

out: dict = {}
for arg in sys.argv[1:]:
    kind, url = arg.split(" ", 1)
    try:
        if kind == "tcp":
            parts = urllib.parse.urlsplit(url)
            socket.create_connection((parts.hostname, parts.port or 80), 10).close()
            out[url] = 200
        else:
            out[url] = urllib.request.urlopen(url, timeout=10).status
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        out[url] = repr(exc)
print(json.dumps(out))
