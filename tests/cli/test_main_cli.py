"""The `diskferry` command itself: usage errors in one line with exit 2, help when given nothing."""

from __future__ import annotations


def test_usage_errors_are_one_line_and_exit_2(diskferry) -> None:
    unknown = diskferry("frobnicate")
    assert unknown.code == 2
    assert unknown.stderr == "diskferry: error: No such command 'frobnicate'.\n"
    missing = diskferry("import")
    assert missing.code == 2
    assert missing.stderr == "diskferry: error: Missing argument 'source'.\n"


def test_a_command_given_nothing_shows_its_help(diskferry) -> None:
    for args in ((), ("repo",)):
        shown = diskferry(*args)
        assert shown.code == 2
        assert shown.stderr.startswith("Usage: diskferry") and "Commands" in shown.stderr
        assert shown.stdout == ""
