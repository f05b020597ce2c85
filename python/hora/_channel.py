"""An authenticated message channel over one TCP connection, for a runner's driver and the
processes it starts (hora.spark's driver and its Spark tasks).

Every frame is ``length (4 bytes) | HMAC-SHA256 (32 bytes) | pickled message``. The MAC covers
the connection's nonce (chosen by the accepting side and sent first), the direction and a
sequence number, so a frame cannot be replayed on another connection, reflected back or
reordered. A frame whose MAC does not verify is never unpickled: the channel raises
AuthenticationError and the connection is dropped.
"""

import hashlib
import hmac
import os
import pickle
import socket
import struct
import threading

_HEADER = struct.Struct("!I")
_MAC_BYTES = 32
_NONCE_BYTES = 16
_MAX_FRAME = 1 << 31  # a pickled result may be large, but not larger than this


class AuthenticationError(ConnectionError):
    """The peer does not know the job secret (or the frame was altered)."""


class Channel:
    """One end of a connection. ``send`` may be called from several threads; ``recv`` from one.
    Blocking calls obey the socket's timeout (socket.timeout on expiry); a closed connection
    raises EOFError."""

    def __init__(self, sock, secret, nonce, accepting):
        self._sock = sock
        self._key = secret.encode() if isinstance(secret, str) else secret
        self._nonce = nonce
        self._out_dir, self._in_dir = (b"A", b"C") if accepting else (b"C", b"A")
        self._sent = 0
        self._received = 0
        self._send_lock = threading.Lock()

    @classmethod
    def accept(cls, sock, secret):
        """The accepting side: sends a fresh nonce."""
        nonce = os.urandom(_NONCE_BYTES)
        sock.sendall(nonce)
        return cls(sock, secret, nonce, accepting=True)

    @classmethod
    def connect(cls, address, secret, timeout, source=None):
        """Connects to ``(host, port)`` within ``timeout`` seconds, from address ``source`` if
        given, and reads the nonce."""
        sock = socket.create_connection(address, timeout=timeout,
                                        source_address=None if source is None else (source, 0))
        try:
            nonce = _read_exactly(sock, _NONCE_BYTES)
        except BaseException:
            sock.close()
            raise
        return cls(sock, secret, nonce, accepting=False)

    @property
    def socket(self):
        return self._sock

    def _mac(self, direction, seq, data):
        h = hmac.new(self._key, digestmod=hashlib.sha256)
        h.update(self._nonce + direction + struct.pack("!Q", seq))
        h.update(data)
        return h.digest()

    def send(self, message):
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            mac = self._mac(self._out_dir, self._sent, data)
            self._sent += 1
            self._sock.sendall(_HEADER.pack(len(data)) + mac + data)

    def recv(self):
        (length,) = _HEADER.unpack(_read_exactly(self._sock, _HEADER.size))
        if length > _MAX_FRAME:
            raise AuthenticationError(f"frame of {length} bytes refused")
        mac = _read_exactly(self._sock, _MAC_BYTES)
        data = _read_exactly(self._sock, length)
        if not hmac.compare_digest(mac, self._mac(self._in_dir, self._received, data)):
            raise AuthenticationError("a frame failed authentication: the peer does not know the job secret")
        self._received += 1
        return pickle.loads(data)

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def _read_exactly(sock, n):
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("the connection was closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def free_port(host):
    """A TCP port that is free on ``host`` now (the OS's pick); whoever binds it next races only
    with other programs asking the OS for a free port in the same instant."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
