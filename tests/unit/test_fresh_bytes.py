from __future__ import annotations

import gc
import os

import pytest

from reservoir.common.blocks.fresh_bytes import bytes_to_fill, filled_bytes, finished_bytes


def test_filled_bytes_holds_what_the_fill_wrote() -> None:
    source = os.urandom(5 * 1024 * 1024 + 3)

    def fill(out: memoryview) -> bool:
        half = len(out) // 2
        out[:half] = source[:half]
        out[half:] = source[half:]
        return True

    data = filled_bytes(len(source), fill)
    assert type(data) is bytes
    assert data == source
    assert hash(data) == hash(source)


def test_each_call_makes_a_new_object_even_for_one_byte() -> None:
    a = filled_bytes(1, lambda out: out.__setitem__(0, 7) or True)
    b = filled_bytes(1, lambda out: out.__setitem__(0, 9) or True)
    assert (a, b, b"\x07") == (b"\x07", b"\x09", bytes([7]))  # the interned b"\x07" untouched


def test_zero_length_is_the_empty_bytes() -> None:
    assert filled_bytes(0, lambda out: True) == b""


def test_a_fill_that_could_not_write_it_all_gives_none() -> None:
    def partial(out: memoryview) -> bool:
        out[:3] = b"abc"
        return False

    assert filled_bytes(10, partial) is None
    assert filled_bytes(0, lambda out: False) is None


def test_an_error_in_the_fill_propagates() -> None:
    def fail(out: memoryview) -> bool:
        out[:3] = b"abc"
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        filled_bytes(10, fail)


def test_bytes_to_fill_are_what_was_written_through_their_view() -> None:
    result, view = bytes_to_fill(3 * 1024 * 1024)
    source = os.urandom(len(view))
    view[: len(source) // 2] = source[: len(source) // 2]
    view[len(source) // 2 :] = source[len(source) // 2 :]
    data = finished_bytes(result, view)
    assert type(data) is bytes and data == source


def test_bytes_to_fill_stay_alive_while_their_view_is_filled() -> None:
    result, view = bytes_to_fill(6)
    del result  # the caller let go (a cancelled fetch) while a thread still fills it
    gc.collect()
    view[:] = b"abcdef"
    assert bytes(view) == b"abcdef"
