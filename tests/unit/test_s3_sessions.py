"""The S3 stores of one process share botocore's parsed models: a mount opens a store in
the master and in every worker, and a remount opens it again."""

from __future__ import annotations

from pathlib import Path

import pytest

from reservoir.common.understore.s3_credentials import aws_session
from reservoir.common.understore.s3_under_store import S3UnderStore
from reservoir.common.understore.under_store import UnderStoreSettings


def _store(settings: UnderStoreSettings) -> S3UnderStore:
    return S3UnderStore("s3://bucket/prefix/", settings)


def test_a_second_s3_store_parses_no_botocore_model_file(monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.loaders

    settings = UnderStoreSettings(endpoint_url="http://127.0.0.1:9")
    _store(settings)
    parsed: list[str] = []
    load_file = botocore.loaders.JSONFileLoader.load_file

    def counted(self: object, path: str) -> object:
        parsed.append(path)
        return load_file(self, path)

    monkeypatch.setattr(botocore.loaders.JSONFileLoader, "load_file", counted)
    store = _store(settings)
    assert parsed == []
    assert store.bucket == "bucket"  # a whole store, its client made
    loader = aws_session("env")[0]._session.get_component("data_loader")
    paths = list(loader.search_paths)
    _store(settings)
    assert loader.search_paths == paths  # each session's boto3 directory is not added again


def test_sessions_sharing_models_keep_their_own_credentials(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text("aws_access_key_id = AKIAFIRST\naws_secret_access_key = one\n")
    second.write_text("aws_access_key_id = AKIASECOND\naws_secret_access_key = two\n")
    one, _ = aws_session(f"file:{first}")
    two, _ = aws_session(f"file:{second}")
    assert one._session.get_component("data_loader") is two._session.get_component("data_loader")
    assert one.get_credentials().access_key == "AKIAFIRST"
    assert two.get_credentials().access_key == "AKIASECOND"
    assert aws_session("anonymous")[1] is True
