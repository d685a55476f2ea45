from reservoir.common import keyspace


def _under(prefix: bytes, path: str) -> bool:
    return keyspace.inode_key(path).startswith(prefix)


def test_children_prefix_matches_direct_children_only() -> None:
    prefix = keyspace.inode_children_prefix("/a/b")
    assert _under(prefix, "/a/b/x")
    assert not _under(prefix, "/a/b/x/y")  # a grandchild
    assert not _under(prefix, "/a/bc/x")  # a sibling sharing a name prefix
    assert not _under(prefix, "/a/b")


def test_root_children_are_the_top_level_paths() -> None:
    prefix = keyspace.inode_children_prefix("/")
    assert _under(prefix, "/m") and not _under(prefix, "/m/x")


def test_level_prefix_reaches_exactly_one_depth_below_a_directory() -> None:
    assert _under(keyspace.inode_level_prefix("/a", 3), "/a/b/c")
    assert not _under(keyspace.inode_level_prefix("/a", 3), "/a/b")
