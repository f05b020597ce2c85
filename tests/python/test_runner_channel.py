"""The authenticated channel between a runner's driver and its tasks (hora._channel,
hora.spark.driver): a peer without the job secret is refused before anything it sent is
unpickled, a frame cannot be replayed, and the service keeps serving the others."""

import pickle
import socket
import struct

import pytest

from hora._channel import AuthenticationError, Channel
from hora.spark.driver import DriverService

SECRET = "s3cret"


@pytest.fixture
def service():
    s = DriverService(SECRET, "127.0.0.1")
    yield s
    s.close()


def test_messages_and_a_closed_connection_become_events(service):
    channel = Channel.connect(("127.0.0.1", service.port), SECRET, timeout=10)
    channel.send(("hello", 3, "10.0.0.1", "h1", 5555, 42))
    kind, conn, *rest = service.events.get(timeout=10)
    assert (kind, rest) == ("hello", [3, "10.0.0.1", "h1", 5555, 42])
    conn.send(("assign", 0, {"HORA_RANK": "0"}))
    assert channel.recv() == ("assign", 0, {"HORA_RANK": "0"})
    channel.send(("out", 0, "stdout", "hi\n"))
    assert service.events.get(timeout=10) == ("out", 3, "stdout", "hi\n")
    channel.close()  # before its rank's exit: the task is lost
    kind, index, why = service.events.get(timeout=10)
    assert (kind, index) == ("lost", 3) and "EOFError" in why


class Boom:
    def __reduce__(self):
        raise AssertionError("a frame from a peer without the secret was unpickled")


def test_a_peer_without_the_secret_is_refused_and_others_still_served(service):
    intruder = Channel.connect(("127.0.0.1", service.port), "wrong", timeout=10)
    intruder.send(("hello", 0, "h", "h", 1, 1))
    with pytest.raises((EOFError, ConnectionError)):
        intruder.recv()  # the service dropped the connection
    # A well-formed frame with a forged MAC carrying a pickle bomb is dropped unread.
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as raw:
        raw.recv(16)
        data = pickle.dumps(("hello", 0))
        raw.sendall(struct.pack("!I", len(data)) + b"\0" * 32 + data)
        assert raw.recv(1) == b""
    good = Channel.connect(("127.0.0.1", service.port), SECRET, timeout=10)
    good.send(("hello", 1, "h", "h", 1, 1))
    assert service.events.get(timeout=10)[0] == "hello"
    assert service.events.empty()  # the refused peers made no event
    good.close()


def _frame(message, accepting):
    """The bytes one end sends for `message` as its first frame on a connection of nonce n...n."""
    a, b = socket.socketpair()
    with a, b:
        Channel(a, SECRET, b"n" * 16, accepting=accepting).send(message)
        return b.recv(1 << 16)


def test_a_replayed_or_reflected_frame_fails_authentication():
    a, b = socket.socketpair()
    with a, b:
        receiver = Channel(b, SECRET, b"n" * 16, accepting=True)
        frame = _frame("first", accepting=False)
        a.sendall(frame + frame)
        assert receiver.recv() == "first"
        with pytest.raises(AuthenticationError):
            receiver.recv()  # the copy carries sequence number 0; 1 was due
    a, b = socket.socketpair()
    with a, b:
        receiver = Channel(b, SECRET, b"n" * 16, accepting=True)
        a.sendall(_frame("mine", accepting=True))  # the receiver's own frame, sent back to it
        with pytest.raises(AuthenticationError):
            receiver.recv()
