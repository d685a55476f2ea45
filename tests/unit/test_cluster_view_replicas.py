"""What the client's cluster view keeps of a block's replicas (the read planner's nearest
first order starts there): beside the inode, never in what `stat` answers. In-process: the
view makes no master call here."""

from __future__ import annotations

import dataclasses

from reservoir.client.cluster_view import ClusterView
from reservoir.common.config import ClientConfig
from reservoir.common.models import Inode
from reservoir.common.rpc import PlaintextChannels

PLAIN = Inode("/m/f", False, size=100, block_size=1000, file_id="v1", mount_path="/m")
LOCATED = PLAIN.with_locations({0: ["w1", "w2"]})


def _view() -> ClusterView:
    return ClusterView(ClientConfig(master="127.0.0.1:1"), PlaintextChannels())


def test_a_located_answer_is_remembered_without_locations_and_its_replicas_beside_it() -> None:
    view = _view()
    assert view.remember(LOCATED, located=True) == PLAIN
    known = view.known_inode("/m/f")
    assert known == PLAIN and known.locations == {}
    assert view.replicas(known) == {0: ["w1", "w2"]}


def test_an_answer_without_locations_keeps_the_replicas_of_the_same_version_only() -> None:
    view = _view()
    view.remember(LOCATED, located=True)
    view.remember(PLAIN)  # e.g. a rename's answer: nothing said about locations
    assert view.replicas(PLAIN) == {0: ["w1", "w2"]}
    changed = dataclasses.replace(PLAIN, file_id="v2", etag="new")
    view.remember(changed)
    assert view.replicas(changed) == {}
    assert view.replicas(PLAIN) == {}  # an open file of the old version: not these


def test_a_located_answer_naming_no_holder_forgets_the_replicas() -> None:
    view = _view()
    view.remember(LOCATED, located=True)
    view.remember(PLAIN, located=True)  # the master knows of no worker holding it now
    assert view.replicas(PLAIN) == {}


def test_a_forgotten_file_has_no_replicas() -> None:
    view = _view()
    view.remember(LOCATED, located=True)
    view.forget("/m/f")
    assert view.replicas(PLAIN) == {}
