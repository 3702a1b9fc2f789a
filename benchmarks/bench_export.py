"""Export benchmarks: the export server, the proxy and the download client against nginx HTTPS,
the gzip endpoint against pigz, and the proxy's memory under 200 concurrent downloads."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from benchmarks.bench_import import DISKFERRY
from benchmarks.data import make_disk
from benchmarks.measure import (
    Comparison,
    Run,
    alternate,
    bytes_written,
    proc_status,
    run_process,
    server_peak_rss,
)
from benchmarks.nginx import nginx
from diskferry.serving.certs import issue_server_cert

TOKEN = "bench-export-token"
TOKEN_HEADER = "x-kubevirt-export-token"
PROXY_PREFIX = "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports/bench"
VOLUME_PATH = "/volumes/disk/disk.img"
LOAD_DOWNLOADS = 200
LOAD_VOLUME = 64 << 20


@dataclass
class Server:
    """A diskferry server process listening on 127.0.0.1."""

    proc: subprocess.Popen[str]
    port: int

    @property
    def url(self) -> str:
        """Its base URL."""
        return f"https://127.0.0.1:{self.port}"


@contextlib.contextmanager
def diskferry_server(args: list[str], log: Path) -> Iterator[Server]:
    """Run `diskferry ARGS` on a free port of 127.0.0.1 until the block ends."""
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [*DISKFERRY, *args, "--address", "127.0.0.1", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"diskferry {args[0]} did not start: {log.read_text()[-2000:]}")
        yield Server(proc, int(line))
    finally:
        proc.terminate()
        proc.wait(60)


def _curl(url: str, ca: Path, *extra: str) -> list[str]:
    return [
        "curl",
        "-sSf",
        "--cacert",
        str(ca),
        "-H",
        f"{TOKEN_HEADER}: {TOKEN}",
        "-o",
        "/dev/null",
        *extra,
        url,
    ]


def served(run: Run, pid: int) -> Run:
    """`run` (a client) with the peak RSS of server `pid` (the largest of its processes) in
    place of the client's."""
    return Run(run.seconds, server_peak_rss(pid))


def _throughput(cmp: Comparison, goal: float) -> str:
    return f"throughput ratio {1 / cmp.ratio:.2f}, goal >= {goal}"


@dataclass
class Setup:
    """Certificates, token, routes and the commands that serve the benchmark volumes."""

    root: Path
    raw: Path
    small: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca" / "ca.crt"

    @property
    def hop(self) -> Path:
        """The Unix socket of the export server behind the proxy."""
        return self.root / "hop.sock"

    def export_args(self, volume: Path, unix_socket: Path | None = None) -> list[str]:
        hop = ["--unix-socket", str(unix_socket)] if unix_socket is not None else []
        return [
            "export",
            "serve",
            "--name",
            "bench",
            "--volume",
            f"disk={volume}",
            "--token-file",
            str(self.root / "token"),
            "--cert-dir",
            str(self.root / "ca"),
            "--san",
            "127.0.0.1",
            *hop,
        ]

    def proxy_args(self, export: Server, unix_socket: Path | None = None) -> list[str]:
        routes = self.root / "routes.yaml"
        route = {"namespace": "default", "name": "bench", "url": export.url, "caFile": str(self.ca)}
        if unix_socket is not None:
            route["unixSocket"] = str(unix_socket)
        routes.write_text(yaml.safe_dump({"exports": [{**route, "ready": True}]}))
        ca_dir = str(self.root / "ca")
        return ["proxy", "serve", "--routes", str(routes), "--cert-dir", ca_dir]

    @contextlib.contextmanager
    def export(self, volume: Path, unix_socket: Path | None = None) -> Iterator[Server]:
        args = self.export_args(volume, unix_socket)
        with diskferry_server(args, self.root / "export.log") as s:
            yield s

    @contextlib.contextmanager
    def proxied(self, volume: Path) -> Iterator[tuple[Server, Server]]:
        """An export server and the proxy in front of it, over the server's Unix socket, as
        when both run on one host."""
        with (
            self.export(volume, self.hop) as exp,
            diskferry_server(self.proxy_args(exp, self.hop), self.root / "proxy.log") as proxy,
        ):
            yield exp, proxy


def prepare(workdir: Path) -> Setup:
    disk = make_disk((workdir / "data").resolve())
    root = (workdir / "export").resolve()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    subprocess.run([*DISKFERRY, "export", "ca", "create", "--dir", str(root / "ca")], check=True)
    chain, key = issue_server_cert(root / "ca", ["127.0.0.1"])
    (root / "nginx.crt").write_bytes(chain)
    (root / "nginx.key").write_bytes(key)
    (root / "token").write_text(TOKEN + "\n")
    (root / "disk.raw").symlink_to(disk["raw"])
    small = root / "small.raw"
    small.write_bytes(os.urandom(LOAD_VOLUME))
    return Setup(root, disk["raw"], small)


def parallel_downloads(
    urls_file: Path,
    codes: Path,
    base: str,
    name: str,
    ca: Path,
    downloads: int = LOAD_DOWNLOADS,
    at_once: int = LOAD_DOWNLOADS,
) -> Callable[[], Run]:
    """Curl fetching `base/name` `downloads` times, `at_once` at a time; each answer a 200."""
    urls_file.write_text(f'url = "{base}/{name}"\noutput = "/dev/null"\n' * downloads)

    def go() -> Run:
        errors = codes.with_suffix(".err")
        with open(codes, "w") as out, open(errors, "w") as err:
            cmd = ["curl", "-sS", "--parallel", "--parallel-immediate"]
            cmd += ["--parallel-max", str(at_once), "--cacert", str(ca)]
            cmd += ["-H", f"{TOKEN_HEADER}: {TOKEN}", "-w", "%{http_code}\n", "-K", str(urls_file)]
            run = run_process(cmd, stdout=out, stderr=err)
        answers = codes.read_text().split()
        if answers.count("200") != downloads:
            raise RuntimeError(f"parallel downloads failed: {answers} {errors.read_text()[-2000:]}")
        return run

    return go


def run(workdir: Path, rounds: int) -> list[tuple[Comparison, str]]:
    """Every export comparison, each with its goal and what was measured beside the time."""
    s = prepare(workdir)
    out = s.root / "out.raw"
    rows = []
    with nginx(s.root, s.root / "nginx.crt", s.root / "nginx.key") as web:

        def direct() -> Run:
            return run_process(_curl(f"{web}/disk.raw", s.ca))

        with s.export(s.raw) as exp:
            cmp = alternate(
                "export raw disk.img vs nginx HTTPS",
                lambda: served(run_process(_curl(exp.url + VOLUME_PATH, s.ca)), exp.proc.pid),
                direct,
                rounds,
            )
            rows.append((cmp, f"{_throughput(cmp, 0.8)}; RSS of the export server"))

        with s.proxied(s.raw) as (exp, proxy):
            url = proxy.url + PROXY_PREFIX + VOLUME_PATH
            cmp = alternate(
                "proxy + export raw vs nginx HTTPS direct",
                lambda: served(run_process(_curl(url, s.ca)), proxy.proc.pid),
                direct,
                rounds,
            )
            rows.append((cmp, f"{_throughput(cmp, 0.6)}; RSS of the proxy"))

        with s.export(s.raw) as exp:
            wire: list[int] = []
            fetched: list[int] = []
            result = s.root / "download.json"

            def download() -> Run:
                before = bytes_written(exp.proc.pid)
                cmd = [*DISKFERRY, "export", "download", exp.url + VOLUME_PATH, str(out)]
                cmd += ["--token-file", str(s.root / "token"), "--ca-bundle", str(s.ca)]
                with open(result, "w") as f:
                    run = run_process([*cmd, "--no-progress", "--json"], stdout=f)
                wire.append(bytes_written(exp.proc.pid) - before)
                fetched.append(json.loads(result.read_text())["bytesFetched"])
                out.unlink()
                return run

            cmp = alternate("export download (sparse) vs curl of nginx", download, direct, rounds)
            allocated = os.stat(s.raw).st_blocks * 512
            rows.append(
                (
                    cmp,
                    f"goal: time ratio <= 0.5; server wrote {max(wire) / allocated:.3f} x "
                    f"allocated (goal <= 1.05), client counted {max(fetched) / allocated:.3f} x",
                )
            )

            gz = exp.url + VOLUME_PATH + ".gz"
            cmp = alternate(
                "export disk.img.gz vs pigz -c FILE",
                lambda: served(run_process(_curl(gz, s.ca)), exp.proc.pid),
                lambda: run_process(f"pigz -c {s.raw} > /dev/null"),
                rounds,
            )
            rows.append((cmp, f"{_throughput(cmp, 0.7)}; RSS of the export server"))

        with s.proxied(s.small) as (exp, proxy):
            base = proxy.url + PROXY_PREFIX + "/volumes/disk"
            codes = s.root / "codes"
            ours = parallel_downloads(s.root / "ours.curl", codes, base, "disk.img", s.ca)
            peer = parallel_downloads(s.root / "peer.curl", codes, web, s.small.name, s.ca)
            cmp = alternate(
                f"{LOAD_DOWNLOADS} concurrent downloads via proxy vs nginx direct",
                lambda: served(ours(), proxy.proc.pid),
                peer,
                rounds,
            )
            export_rss = proc_status(exp.proc.pid, "VmHWM") >> 20
            rows.append(
                (
                    cmp,
                    f"{LOAD_VOLUME >> 20} MiB each; goal: proxy peak RSS <= 256 MiB "
                    f"(export server's {export_rss} MiB)",
                )
            )
    shutil.rmtree(s.root)
    return rows
