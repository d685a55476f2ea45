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


def test_a_bare_invalid_argument_from_elsewhere_is_not_taken_for_unsupported() -> None:
    back = errors.error_for(grpc.StatusCode.INVALID_ARGUMENT, "x")
    assert type(back) is errors.InvalidArgument
    assert isinstance(errors.Unsupported("x"), ValueError)  # caught as before


def test_unknown_exception_maps_to_internal() -> None:
    assert errors.status_for(RuntimeError("boom")) == grpc.StatusCode.INTERNAL


def test_batch_code_value_maps_back_to_the_same_class() -> None:
    value = errors.code_value(errors.NotFound("gone"))
    assert isinstance(errors.error_for_code_value(value, "gone"), errors.NotFound)


def test_etcd_out_of_space_is_resource_exhausted_and_says_what_to_do() -> None:
    from reservoir.common.errors import ResourceExhausted, error_for, status_for
    from reservoir.common.metadata.etcd_space import is_out_of_space, out_of_space

    error = out_of_space("etcd put: etcdserver: mvcc: database space exceeded")
    assert status_for(error) == grpc.StatusCode.RESOURCE_EXHAUSTED
    back = error_for(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
    assert isinstance(back, ResourceExhausted) and str(back) == str(error)
    assert str(error).startswith("etcd is out of space: etcd put: etcdserver: mvcc:")
    for advice in ("etcdctl compact", "etcdctl defrag", "etcdctl alarm disarm"):
        assert advice in str(error)
    assert is_out_of_space("RESOURCE_EXHAUSTED", "etcdserver: mvcc: database space exceeded")
    assert not is_out_of_space("RESOURCE_EXHAUSTED", "etcdserver: too many requests")
    assert not is_out_of_space("UNAVAILABLE", "etcdserver: leader changed")
