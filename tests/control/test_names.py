"""Names made from other names: kept when short, cut with a hash of the whole when long."""

from __future__ import annotations

import re

from diskferry.control.resources.names import MAX_LENGTH, short_name

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


def test_a_short_name_is_the_parts_joined() -> None:
    assert short_name("b1", "vm-a") == "b1-vm-a"
    assert short_name("x" * 63) == "x" * 63


def test_a_long_name_is_cut_to_a_label_and_ends_in_a_hash() -> None:
    name = short_name("b" * 60, "v" * 60)
    assert len(name) == MAX_LENGTH and re.fullmatch(DNS_LABEL, name)
    assert name.startswith("b" * 54 + "-")
    assert name == short_name("b" * 60, "v" * 60)


def test_long_names_with_one_head_stay_apart() -> None:
    assert short_name("b" * 60, "vm-1") != short_name("b" * 60, "vm-2")


def test_a_cut_never_leaves_a_dash_before_the_hash() -> None:
    name = short_name("a" * 53, "b" * 20)
    assert "--" not in name and re.fullmatch(DNS_LABEL, name)
