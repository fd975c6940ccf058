"""The ``regroup groups`` entry point: help, usage errors, unreachable brokers, --command-config."""

from __future__ import annotations

import argparse
import io
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from regroup.admin.cli import add_parser, main


def call(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A listener that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        server.close()


def test_no_arguments_prints_the_description_and_usage() -> None:
    code, out, err = call()
    assert code == 1
    assert out == ""
    assert err.startswith(
        "This tool helps to list all consumer groups, describe a consumer group, delete consumer"
    )
    assert "--reset-offsets" in err


def test_help_and_version() -> None:
    code, out, _ = call("--help")
    assert code == 0
    assert "--bootstrap-server" in out
    assert "--output" in out
    code, out, _ = call("--version")
    assert (code, out.startswith("regroup ")) == (0, True)


def test_usage_error_exit_code_and_message() -> None:
    code, out, err = call("--bootstrap-server", "localhost:9092", "--describe")
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == "Option [describe] takes one of these options: [all-groups], [group]"


def test_malformed_numbers_are_reported_like_kafka() -> None:
    code, out, _ = call("--bootstrap-server", "localhost:9092", "--list", "--timeout", "abc")
    assert (code, out) == (
        0,
        "\nError: Executing consumer group command failed due to "
        "Cannot parse argument 'abc' of option timeout\n",
    )


def test_connection_refused_is_one_line_naming_the_address() -> None:
    port = closed_port()
    code, out, err = call("--bootstrap-server", f"127.0.0.1:{port}", "--list", "--timeout", "2000")
    assert (code, out) == (1, "")
    assert err == f"Error: cannot connect to the broker at 127.0.0.1:{port} (connection refused)\n"


def test_all_bootstrap_servers_are_tried() -> None:
    a, b = closed_port(), closed_port()
    code, _, err = call("--bootstrap-server", f"127.0.0.1:{a},127.0.0.1:{b}", "--describe", "--all-groups")
    assert code == 1
    assert err == (
        f"Error: cannot connect to any bootstrap server: 127.0.0.1:{a} (connection refused), "
        f"127.0.0.1:{b} (connection refused)\n"
    )


def test_a_broker_that_never_answers_times_out(silent_server: int) -> None:
    code, out, err = call("--bootstrap-server", f"127.0.0.1:{silent_server}", "--list", "--timeout", "500")
    assert (code, out) == (1, "")
    assert err == (
        f"Error: cannot connect to the broker at 127.0.0.1:{silent_server} (connected, but got no response "
        "within 0.500s)\n"
    )


def test_bad_bootstrap_value() -> None:
    code, _, err = call("--bootstrap-server", "no-port", "--list")
    assert code == 1
    assert err == "Error: invalid --bootstrap-server: bootstrap server 'no-port' is not host:port\n"


def test_secured_clusters_are_refused_clearly(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    code, out, err = call("--bootstrap-server", "localhost:9092", "--list", "--command-config", str(config))
    assert (code, out) == (1, "")
    assert err.startswith("Error: security.protocol=SASL_SSL (from --command-config) is not supported")
    assert "kafka-consumer-groups.sh" in err


def test_command_config_settings_and_warnings(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=PLAINTEXT\nssl.truststore.location=/x\nclient.id=ops\n")
    port = closed_port()
    code, _, err = call("--bootstrap-server", f"127.0.0.1:{port}", "--list", "--command-config", str(config))
    assert code == 1
    assert (
        err.splitlines()[0]
        == "WARN: ignoring security settings from --command-config: ssl.truststore.location"
    )
    code, out, _ = call(
        "--bootstrap-server", "localhost:9092", "--list", "--command-config", str(tmp_path / "nope")
    )
    assert code == 0
    assert out.startswith(
        "\nError: Executing consumer group command failed due to cannot read the --command-config"
    )


def test_add_parser_passes_every_argument_through(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr("regroup.admin.cli.main", lambda argv: seen.append(list(argv)) or 0)
    parser = argparse.ArgumentParser(prog="regroup")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["groups", "--bootstrap-server", "b:1", "--describe", "--group", "g", "--help"])
    assert args.handler(args) == 0
    assert seen == [["--bootstrap-server", "b:1", "--describe", "--group", "g", "--help"]]


def test_module_entry_point_without_traceback() -> None:
    port = closed_port()
    done = subprocess.run(
        [sys.executable, "-m", "regroup.admin", "--bootstrap-server", f"127.0.0.1:{port}", "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == f"Error: cannot connect to the broker at 127.0.0.1:{port} (connection refused)\n"
