"""Scripts run as processes of their own, forked from one server that has done the imports once.

A fresh interpreter per run imported torch and Lightning again (about 12 s of CPU each here, most of
it Lightning's import of torchmetrics, which imports transformers and scipy when they are installed).
The tests that start many such runs (gloo groups, killed loaders and fits) ask `Zygote` instead: it
imports what the scripts import, then forks each run, which sets its own session (as
``start_new_session=True``), output file, working directory, environment and ``sys.argv``, and runs
the script as ``__main__`` (`runpy.run_path`). Each run is still a real process: it can be killed
with its process group, and its loader workers are its own children. A run that must start as a new
interpreter (Lightning's own DDP launcher re-runs ``sys.argv``) is started with `subprocess` instead.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

#: The server: imports the modules named on its command line, then answers one JSON request per
#: line: {"script", "module", "argv", "log", "err", "cwd", "env"} -> {"pid"}; {"poll": pid} -> {"code": int
#: or None}. "module": the script is a module's name, run as ``python -m`` runs it; "err": stderr's
#: own file (None: with stdout in "log").
SERVER = r"""
import importlib, json, os, runpy, sys, traceback

for name in sys.argv[1:]:
    importlib.import_module(name)
for line in sys.stdin:
    request = json.loads(line)
    if "poll" in request:
        pid, status = os.waitpid(request["poll"], os.WNOHANG)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status) if pid else None}), flush=True)
        continue
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(log, 1)
            os.dup2(os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if request["err"] else log, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the requests are the server's, not the run's
            sys.stdin = open(os.devnull)
            os.environ.update(request["env"])
            os.chdir(request["cwd"])
            sys.argv = [request["script"], *request["argv"]]
            try:
                if request["module"]:  # python -m MODULE
                    runpy.run_module(request["script"], run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(request["script"], run_name="__main__")
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
"""

#: What the test scripts import: torch, gloo, Lightning and our data module.
PRELOAD = ("torch", "torch.distributed", "lightning", "lightning.pytorch.callbacks", "bionemo_wds.lightning.datamodule")
#: Seconds the server may take to answer (its first answer waits for its imports).
ANSWER_TIMEOUT = 300


class Zygote:
    """The server of forked runs (module docstring); `close` kills what is left of them."""

    def __init__(self, log: Path, env: dict[str, str], preload: tuple[str, ...] = PRELOAD) -> None:
        self.log, self.env = log, env
        with open(log, "w") as fh:
            self.server = subprocess.Popen(
                [sys.executable, "-c", SERVER, *preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=fh,
                env=env,
                text=True,
                start_new_session=True,
            )
        self.runs: list[ForkedRun] = []

    def ask(self, request: dict) -> dict:
        assert self.server.stdin and self.server.stdout
        self.server.stdin.write(json.dumps(request) + "\n")
        self.server.stdin.flush()
        ready, _, _ = select.select([self.server.stdout], [], [], ANSWER_TIMEOUT)
        line = self.server.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"no answer to {request} in {ANSWER_TIMEOUT} s:\n{self.log.read_text()[-3000:]}")
        return json.loads(line)

    def run(
        self,
        script: Path | str,
        argv: list[str],
        log: Path,
        cwd: Path | None = None,
        err: Path | None = None,
        module: bool = False,
        **env: str,
    ) -> ForkedRun:
        """Start `script` (a module's name with `module`, as ``python -m``) with `argv`: output to
        `log` (stderr to `err` when given), in `cwd`, `env` added to the server's environment."""
        request = {"script": str(script), "module": module, "argv": [str(a) for a in argv], "log": str(log)}
        request |= {"err": str(err) if err else None, "cwd": str(cwd or Path.cwd()), "env": env}
        run = ForkedRun(self, self.ask(request)["pid"])
        self.runs.append(run)
        return run

    def close(self) -> None:
        for run in self.runs:  # a run left going by a failed test, with its loader workers
            if run.returncode is None:
                try:
                    os.killpg(run.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.server.kill()
        self.server.wait()
        for stream in (self.server.stdin, self.server.stdout):
            if stream is not None:
                stream.close()


class ForkedRun:
    """One run, with the part of `subprocess.Popen` the tests use: `pid`, `poll`, `wait`,
    `returncode` (negative: the signal that ended it)."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote, self.pid = zygote, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.ask({"poll": self.pid})["code"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"forked run {self.pid}", timeout or 0)
            time.sleep(0.05)
        assert self.returncode is not None
        return self.returncode

    def running(self) -> bool:
        """Still running (not ended, and not ended and waiting to be polled)?"""
        if self.returncode is not None:
            return False
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
