"""A TCP relay in front of a worker's data port, as a party on the path between reader
and worker would sit: each connection it accepts is carried to the worker by two threads,
one a direction. What it does to the worker's answers is its subclass's."""

from __future__ import annotations

import socket
import threading


class DataPortRelay:
    def __init__(self, target: str) -> None:
        """Listens on 127.0.0.1 (`address`) and relays to the data port at `target`.
        Subclasses set their own state first: connections may come at once."""
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def answers(self, worker: socket.socket, reader: socket.socket) -> None:
        """Carries what the worker sends to the reader, until either closes."""
        pipe(worker, reader)

    def close(self) -> None:
        self._listener.close()

    def _serve(self) -> None:
        while True:
            try:
                reader, _ = self._listener.accept()
            except OSError:
                return
            worker = socket.create_connection(self._target, timeout=10)
            threading.Thread(target=pipe, args=(reader, worker), daemon=True).start()
            threading.Thread(target=self.answers, args=(worker, reader), daemon=True).start()


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """`source`'s bytes to `sink` as they come; `sink` closed when `source` is."""
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        sink.close()
