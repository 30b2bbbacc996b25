#!/usr/bin/env python3
"""Runs the local LLM for mnemo: llama.cpp's OpenAI-compatible server, through xllamacpp.

    models/python/bin/python scripts/local_llm.py --model PATH [--host 127.0.0.1] [--port N]
        [--threads 2] [--ctx-size 4096] [--parallel 2] [--alias NAME] [--cache-ram-mib 256]
        [--embeddings]

Installed by `scripts/setup llm` (the runtime into models/python/, the model to
models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf). Serves /v1/chat/completions (with
response_format json_schema), /v1/models and /health on the loopback interface only; with
--embeddings also /v1/embeddings (mean-pooled hidden states of the same model).

Protocol for the process that spawns it:
- stdout carries exactly one line, `ready http://HOST:PORT/v1`, printed (and flushed) once the
  model is loaded and GET /health answers 200. `--port 0` (the default) lets the system pick a
  free port; the ready line says which.
- stderr carries llama.cpp's log and this script's own lines, prefixed `local_llm:`. A failure
  to start (missing model, port in use, unloadable model) is one `local_llm: error: ...` line
  and exit status 1 (2 for bad arguments).
- OMP_WAIT_POLICY defaults to PASSIVE (llama.cpp's OpenMP threads sleep instead of spinning
  while waiting; much faster when the CPU is shared).
- It runs until SIGTERM or SIGINT, or until its parent process dies (PR_SET_PDEATHSIG, plus a
  poll of getppid() every 0.5 s), then stops the server and exits 0.
"""

import argparse
import ctypes
import errno
import os
import signal
import socket
import sys
import threading
import time
import urllib.request

LOOPBACK = {"127.0.0.1": "127.0.0.1", "localhost": "127.0.0.1", "::1": "::1"}
PR_SET_PDEATHSIG = 1
SHUTDOWN_GRACE_S = 10


def log(message: str) -> None:
    print(f"local_llm: {message}", file=sys.stderr, flush=True)


def fail(message: str) -> "NoReturn":  # noqa: F821
    log(f"error: {message}")
    sys.exit(1)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> "NoReturn":  # noqa: F821
        log(f"error: {message} (see --help)")
        sys.exit(2)


def parse_args() -> argparse.Namespace:
    parser = Parser(
        prog="local_llm.py",
        description="Runs llama.cpp's OpenAI-compatible server (xllamacpp) on the loopback "
                    "interface; prints `ready http://HOST:PORT/v1` on stdout once it answers.")
    parser.add_argument("--model", required=True, help="GGUF model file")
    parser.add_argument("--host", default="127.0.0.1",
                        help="127.0.0.1 (default), localhost or ::1; nothing else is allowed")
    parser.add_argument("--port", type=int, default=0, help="TCP port; 0 = any free port (default)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    parser.add_argument("--ctx-size", type=int, default=4096,
                        help="context size in tokens, shared by the parallel slots (default 4096)")
    parser.add_argument("--parallel", type=int, default=2,
                        help="requests served at once (slots; default 2)")
    parser.add_argument("--alias", help="model id in /v1/models (default: the file name)")
    parser.add_argument("--cache-ram-mib", type=int, default=256,
                        help="RAM for llama.cpp's prompt cache, MiB (default 256; 0 disables)")
    parser.add_argument("--embeddings", action="store_true",
                        help="also serve /v1/embeddings, mean-pooled")
    args = parser.parse_args()
    if args.host not in LOOPBACK:
        parser.error(f"--host {args.host} refused: the local LLM listens on the loopback "
                     f"interface only (127.0.0.1, localhost or ::1)")
    args.host = LOOPBACK[args.host]
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port} is not a TCP port")
    for name in ("threads", "ctx_size", "parallel"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def check_port_free(host: str, port: int) -> None:
    """A clear message for a port in use (llama.cpp's own is a generic init failure)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                fail(f"port {port} on {host} is already in use")
            fail(f"cannot listen on {host} port {port}: {e.strerror}")


def die_with_parent() -> int:
    """Asks Linux to send SIGTERM when the parent dies; returns the parent's pid to poll."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
                log(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
        except (OSError, AttributeError) as e:
            log(f"prctl(PR_SET_PDEATHSIG) unavailable: {e}")
    # The parent may have died before prctl took effect.
    if os.getppid() != parent:
        log("parent process exited before start-up; not starting")
        sys.exit(0)
    return parent


def wait_healthy(base: str, timeout_s: float) -> None:
    # Never through a proxy: this traffic stays on the loopback interface.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            with opener.open(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except OSError as e:
            last = str(e)
        time.sleep(0.1)
    fail(f"the server at {base} did not answer /health within {timeout_s:.0f} s ({last})")


def main() -> int:
    args = parse_args()
    # Until the server is up, SIGTERM/SIGINT (and parent death) just end the process.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    parent = die_with_parent()

    model = os.path.abspath(args.model)
    if not os.path.isfile(model):
        fail(f"model file not found: {args.model} (scripts/setup llm installs it)")
    if not os.access(model, os.R_OK):
        fail(f"model file not readable: {args.model}")
    check_port_free(args.host, args.port)
    # xllamacpp's CPU backend runs on OpenMP, whose threads spin while waiting by default; on a
    # machine busy with other work (mnemo itself, a build) that made calls 3-10x slower. Passive
    # waiting must be chosen before the library loads. Set OMP_WAIT_POLICY=ACTIVE to override.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import xllamacpp as xlc
    except ImportError as e:
        fail(f"cannot import xllamacpp ({e}); run scripts/setup llm and start this script with "
             f"models/python/bin/python")

    params = xlc.CommonParams()
    params.model.path = model
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.cache_ram_mib = args.cache_ram_mib
    params.model_alias = {args.alias or os.path.basename(model)}
    params.ui = False       # no web UI
    params.offline = True   # never reach for a model hub
    if args.embeddings:
        params.embedding = True
        # OpenAI-compatible embeddings need one vector per input, not one per token.
        params.pooling_type = xlc.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN

    log(f"loading {model} (ctx {args.ctx_size} shared by {args.parallel} slots, "
        f"{args.threads} threads) on {args.host} port {args.port or 'any'}")
    started = time.monotonic()
    try:
        server = xlc.Server(params)  # blocks until the model is loaded and the port is bound
    except RuntimeError as e:
        fail(f"llama.cpp could not start ({e}); its log above says why")
    address = server.listening_address.rstrip("/")  # e.g. http://127.0.0.1:40123
    wait_healthy(address, 30)
    log(f"ready in {time.monotonic() - started:.1f} s at {address}")

    stop = threading.Event()
    reason = ["?"]

    def on_signal(signum, _frame):
        reason[0] = signal.Signals(signum).name
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"ready {address}/v1", flush=True)

    while not stop.wait(0.5):
        if os.getppid() != parent:
            reason[0] = "parent process exited"
            break

    log(f"stopping ({reason[0]})")
    watchdog = threading.Timer(SHUTDOWN_GRACE_S, lambda: (log("shutdown hung; exiting"),
                                                          os._exit(1)))
    watchdog.daemon = True
    watchdog.start()
    del server  # ~Server stops the HTTP server and the inference loop
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
