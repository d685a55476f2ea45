import grpc
import pytest

from reservoir.common import errors


@pytest.mark.parametrize(("cls", "code"), errors.STATUS_BY_ERROR)
def test_every_domain_error_round_trips_through_its_status(
    cls: type[errors.ReservoirError], code: grpc.StatusCode
) -> None:
    assert errors.status_for(cls("x")) == code
    back = errors.error_for(code, "x", cls.__name__)
    assert type(back) is cls


def test_domain_errors_are_the_matching_builtins() -> None:
    assert isinstance(errors.NotFound("x"), FileNotFoundError)
    assert isinstance(errors.IsADirectory("x"), IsADirectoryError)
    assert isinstance(errors.InvalidArgument("x"), ValueError)
    assert isinstance(errors.PermissionDenied("x"), PermissionError)
    assert isinstance(errors.DeadlineExceeded("x"), TimeoutError)


def test_unknown_exception_maps_to_internal() -> None:
    assert errors.status_for(RuntimeError("boom")) == grpc.StatusCode.INTERNAL


def test_batch_code_value_maps_back_to_the_same_class() -> None:
    value = errors.code_value(errors.NotFound("gone"))
    assert isinstance(errors.error_for_code_value(value, "gone"), errors.NotFound)
