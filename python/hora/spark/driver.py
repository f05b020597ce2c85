"""The driver's side of hora.spark.run: a TCP service that the Spark tasks connect to
(authenticated with the job secret, hora._channel), turning everything they say, and their
connections closing, into events on one queue that run() consumes.

Events: ("hello", conn, index, host, hostname, port, pid), ("started", index, pid),
("out", index, stream, text), ("outcome", index, pickled outcome), ("exit", index, code),
("lost", index, why) when a task's connection closed before it reported its child's exit, and
("spark", error) from the thread running the Spark job. Events name tasks by Spark partition
index; run() maps indices to ranks.
"""

import logging
import queue
import socket
import threading

from hora._channel import Channel

log = logging.getLogger("hora.spark")


class DriverService:
    def __init__(self, secret, bind_host):
        self.events = queue.Queue()
        self._secret = secret
        self._listener = socket.create_server((bind_host, 0), family=_family(bind_host), backlog=128)
        self.port = self._listener.getsockname()[1]
        self._connections = []
        self._lock = threading.Lock()
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept_loop, name="hora-spark-driver", daemon=True)
        self._acceptor.start()

    def _accept_loop(self):
        while True:
            try:
                sock, peer = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(sock, peer), name=f"hora-spark-task-{peer[0]}",
                             daemon=True).start()

    def _serve(self, sock, peer):
        index = None
        exited = False
        try:
            channel = Channel.accept(sock, self._secret)
            with self._lock:
                if self._closed:
                    channel.close()
                    return
                self._connections.append(channel)
            while True:
                message = channel.recv()
                kind = message[0]
                if kind == "hello":
                    index = message[1]
                    self.events.put(("hello", channel) + tuple(message[1:]))
                elif kind in ("started", "out", "outcome", "exit"):
                    exited = exited or kind == "exit"
                    self.events.put((kind, index) + tuple(message[2:]))
        except (EOFError, OSError) as e:
            if index is None:
                if not isinstance(e, EOFError):
                    log.warning("hora.spark: refused a connection from %s: %s", peer[0], e)
            elif not exited:
                self.events.put(("lost", index, f"{type(e).__name__}: {e}"))
        finally:
            sock.close()

    def close(self):
        """Stops accepting and closes every task's connection: tasks still running kill their
        rank's process (hora.spark.task)."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        self._listener.close()
        for c in connections:
            c.close()


def _family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET
