"""The peer in bench/run: the script people write instead of zklock.

    kazoo_lock.py HOSTS PATH CMD [ARGS...]

Connects, takes kazoo's Lock on PATH, runs CMD, releases, stops the client
and exits with CMD's status. Nothing more: no signal forwarding, no lease,
no process-group cleanup; it is the cost baseline, not a reference.
"""

import subprocess
import sys

from kazoo.client import KazooClient


def main():
    hosts, path, *command = sys.argv[1:]
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start()
    try:
        lock = client.Lock(path)
        with lock:
            status = subprocess.call(command)
    finally:
        client.stop()
        client.close()
    sys.exit(status)


if __name__ == "__main__":
    main()
