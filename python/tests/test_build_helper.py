"""kiln.tune's build helpers (docs/measure.md "Build helpers") on the host: the helper process that kiln.tune
starts (this interpreter, kiln._build_helper) speaks the tuner's protocol and, without a GPU, answers the hello
with the reason; kiln.tune checks its build_helpers argument before any GPU work."""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess

import pytest

import kiln
from kiln import _build_helper


def _send(sock: socket.socket, obj: dict) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("<Q", len(data)) + data)


def _recv(sock: socket.socket) -> dict:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "the helper closed the socket before answering"
            out += chunk
        return out

    (n,) = struct.unpack("<Q", exactly(8))
    return json.loads(exactly(n))


def _start_helper(env: dict[str, str]) -> tuple[subprocess.Popen, socket.socket]:
    ours, theirs = socket.socketpair()
    cmd = _build_helper.command()
    # The helper's end becomes its fd 3, as the tuner's posix_spawn makes it (close_fds would close that 3 again;
    # every other descriptor of ours is close-on-exec).
    proc = subprocess.Popen(cmd, close_fds=False, env=env, stderr=subprocess.PIPE,
                            preexec_fn=lambda fd=theirs.fileno(): os.dup2(fd, 3))
    theirs.close()
    ours.settimeout(60)
    return proc, ours


def test_the_helper_answers_its_hello_with_why_it_cannot_build_without_a_gpu(spec_dict):
    g = kiln.load(spec_dict)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc, sock = _start_helper(env)
    try:
        _send(sock, {"graph": json.dumps(spec_dict), "structure": kiln.signature(g).structure, "device": 0})
        answer = _recv(sock)
    finally:
        sock.close()
        _, err = proc.communicate(timeout=60)
    assert answer["code"] != 0, answer
    assert "CUDA device" in answer["message"], answer
    assert answer["cudnn"] > 0  # the cuDNN it loaded, which the tuner compares with its own
    # 1 after it says why on stderr, or 0 when the socket's close (this test's) ended it first.
    assert proc.returncode in (0, 1), err


def test_the_helper_refuses_a_graph_that_is_not_the_tuners(spec_dict):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc, sock = _start_helper(env)
    try:
        _send(sock, {"graph": json.dumps(spec_dict), "structure": "not the tuner's", "device": 0})
        answer = _recv(sock)
    finally:
        sock.close()
        proc.communicate(timeout=60)
    assert answer["code"] != 0
    assert "another signature" in answer["message"], answer


def test_the_helper_ends_quietly_when_the_tuner_closes_at_once():
    proc, sock = _start_helper(dict(os.environ))
    sock.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


@pytest.mark.parametrize("value", [-1, 65, 2.5, "4", True])
def test_tune_checks_build_helpers_before_the_gpu(spec_dict, tmp_path, value):
    with pytest.raises(kiln.BadInput, match="build_helpers"):
        kiln.tune(spec_dict, tmp_path / "plans.db", build_helpers=value)
