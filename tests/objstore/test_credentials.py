"""AWS credentials files as Velero's storage locations hold them: the default profile's keys,
and a clear refusal of anything else."""

from __future__ import annotations

import re

import pytest

from diskferry.objstore.credentials import parse_credentials, read_credentials
from diskferry.objstore.errors import ObjectStoreError


def test_default_profile_keys(tmp_path):
    path = tmp_path / "cloud"
    path.write_text("[default]\naws_access_key_id = AKIA1\naws_secret_access_key=s3cr%t\n")
    assert read_credentials(str(path)) == ("AKIA1", "s3cr%t")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not ini at all", "not an AWS credentials file"),
        ("[other]\naws_access_key_id=a\naws_secret_access_key=b\n", "no [default] profile"),
        ("[default]\naws_access_key_id=a\n", "needs aws_access_key_id and aws_secret_access_key"),
    ],
)
def test_refusals_say_what_is_wrong(text, said):
    with pytest.raises(ObjectStoreError, match=re.escape(said)):
        parse_credentials(text)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ObjectStoreError, match="cannot read the credentials file"):
        read_credentials(str(tmp_path / "absent"))
