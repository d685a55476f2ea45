import pytest

from reservoir.common import paths
from reservoir.common.errors import InvalidArgument


@pytest.mark.parametrize(
    ("raw", "normal"),
    [("/", "/"), ("/a", "/a"), ("/a/b/", "/a/b"), ("/a b/c", "/a b/c")],
)
def test_normalize_keeps_canonical_paths(raw: str, normal: str) -> None:
    assert paths.normalize(raw) == normal


@pytest.mark.parametrize("bad", ["", "a/b", "/a//b", "/a/../b", "/a/./b", "/..", "/a\x00b", "//"])
def test_normalize_refuses_ambiguous_paths(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        paths.normalize(bad)


def test_is_within_matches_whole_components_only() -> None:
    assert paths.is_within("/data/x", "/data")
    assert paths.is_within("/data", "/data")
    assert not paths.is_within("/database", "/data")
    assert paths.is_within("/anything", "/")


def test_parent_and_join_round_trip() -> None:
    assert paths.parent_of("/a/b") == "/a"
    assert paths.parent_of("/a") == "/"
    assert paths.join("/", "a") == "/a"
    assert paths.join("/a", "b") == "/a/b"


@pytest.mark.parametrize(
    "bad",
    ["/" + "a" * 4096, "/d/" + "n" * 256, "/" + "x" * (4 * 1024 * 1024)],
    ids=["path-over-4096", "name-over-255", "path-4MiB"],
)
def test_overlong_paths_are_refused_with_a_short_message(bad: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        paths.normalize(bad)
    assert len(str(caught.value)) < 300


def test_the_longest_allowed_path_and_name_pass() -> None:
    name = "n" * 255
    longest = ("/" + name) * 16
    assert len(longest) == 4096
    assert paths.normalize(longest) == longest
