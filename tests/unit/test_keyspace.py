from reservoir.common.metadata import keyspace


def test_a_directorys_chunks_share_a_group_that_no_other_directory_has() -> None:
    group = keyspace.namespace_group("/m", "/m/a")
    assert keyspace.chunk_key(group, "x").startswith(group)
    assert keyspace.chunk_key(group, None).startswith(group)
    for other in ("/m/ab", "/m/a/b", "/m", "/"):
        assert not keyspace.namespace_group("/m", other).startswith(group)


def test_every_group_of_a_mount_lies_under_the_mount_prefix_only() -> None:
    prefix = keyspace.namespace_mount_prefix("/m")
    assert keyspace.namespace_group("/m", "/m/a/b").startswith(prefix)
    assert keyspace.namespace_group("/m", "/").startswith(prefix)
    assert not keyspace.namespace_group("/m2", "/m2/a").startswith(prefix)


def test_the_last_chunk_sorts_after_every_named_chunk_of_its_group() -> None:
    group = keyspace.namespace_group("/m", "/m")
    assert keyspace.chunk_key(group, "\U0010ffff-last") < keyspace.chunk_key(group, None)


def test_legacy_inode_keys_are_by_depth_then_path() -> None:
    assert keyspace.legacy_inode_key("/a/b/c") == b"/reservoir/v1/inodes/003/a/b/c"
    assert keyspace.legacy_inode_key("/") == b"/reservoir/v1/inodes/000/"
