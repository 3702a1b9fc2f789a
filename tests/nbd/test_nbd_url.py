"""NBD URLs read as the NBD URI spec says, and bad ones refused with a clear message."""

import pytest

from diskferry.disk.schemes import is_nbd_url
from diskferry.nbd.errors import NbdUrlError
from diskferry.nbd.url import NbdUrl, parse_url


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("nbd://example.com/disk", NbdUrl(export="disk", host="example.com", port=10809)),
        ("nbd://example.com:1234", NbdUrl(export="", host="example.com", port=1234)),
        ("nbd://example.com/", NbdUrl(export="", host="example.com")),
        ("nbd://example.com//disk", NbdUrl(export="/disk", host="example.com")),
        ("nbd://example.com/hello%20world", NbdUrl(export="hello world", host="example.com")),
        ("NBD://127.0.0.1:10810/x", NbdUrl(export="x", host="127.0.0.1", port=10810)),
        ("nbd://[::1]:5000/x", NbdUrl(export="x", host="::1", port=5000)),
        ("nbd+unix:///disk?socket=/run/s.sock", NbdUrl(export="disk", socket="/run/s.sock")),
        ("nbd+unix:///?socket=/tmp/a%2Bb+c", NbdUrl(export="", socket="/tmp/a+b+c")),
        ("nbd+unix://?socket=s", NbdUrl(export="", socket="s")),
        (
            "nbds+unix:///d?socket=s&tls-certificates=/etc/pki&tls-hostname=h&tls-verify-peer=0",
            NbdUrl(
                export="d",
                socket="s",
                tls=True,
                tls_certificates="/etc/pki",
                tls_hostname="h",
                tls_verify_peer=False,
            ),
        ),
        ("nbds://h/e", NbdUrl(export="e", host="h", tls=True)),
    ],
)
def test_parse(spec: str, expected: NbdUrl) -> None:
    assert parse_url(spec) == expected
    assert is_nbd_url(spec)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("nbd+unix:///disk", "has no socket=PATH"),
        ("nbd+unix://host/disk?socket=s", "names a host for a Unix socket"),
        ("nbd://host:port/disk", "cannot read NBD URL"),
        ("nbd://host:99999/disk", "cannot read NBD URL"),
        ("nbd:///disk", "has no host"),
        ("nbd+vsock://1/disk", "not a supported NBD URL"),
        ("http://host/disk", "not a supported NBD URL"),
        ("nbd://host/disk?socket=s", "socket= needs nbd+unix://"),
        ("nbd://host/disk?color=red", "unknown parameter 'color'"),
        ("nbd+unix:///d?socket=a&socket=b", "repeats the parameter 'socket'"),
        ("nbd://host/disk?tls-hostname=h", "tls-hostname needs an nbds://"),
        ("nbds://host/disk?tls-verify-peer=yes", "tls-verify-peer must be 0 or 1"),
        ("nbd://host/disk#part", "has a fragment"),
    ],
)
def test_bad_urls_say_what_is_wrong(spec: str, said: str) -> None:
    with pytest.raises(NbdUrlError) as caught:
        parse_url(spec)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)
    assert caught.value.reason == "BadNbdUrl"


@pytest.mark.parametrize(
    "spec",
    [
        "nbd://example.com:1234/a%20b",
        "nbd+unix:///?socket=/tmp/x y.sock",
        "nbds+unix:///disk?socket=/s",
        "nbd://[::1]:5000/x",
    ],
)
def test_str_reads_back(spec: str) -> None:
    url = parse_url(spec)
    assert parse_url(str(url)) == url


@pytest.mark.parametrize("spec", ["/dev/sda", "disk.img", "./nbd://x", "https://h/d.img"])
def test_paths_are_not_nbd_urls(spec: str) -> None:
    assert not is_nbd_url(spec)
