import pytest

from reservoir.client import Client
from reservoir.common.config import ClientConfig


def test_a_closed_client_refuses_calls_instead_of_hanging() -> None:
    client = Client(config=ClientConfig(master="127.0.0.1:1"))
    client.close()
    with pytest.raises(ValueError, match="closed"):
        client.read("/anything")
    with pytest.raises(ValueError, match="closed"):
        client.mounts()
