"""Scripts run as processes of their own, forked from one server that has done the imports once.

A fresh interpreter per run imports torch and Lightning again (about 10 s of CPU each on our 2-core
machines, most of it Lightning's import of torchmetrics, which imports transformers and scipy when
they are installed). Whoever starts many such runs asks `Zygote` instead: the benchmark's timing
runs (`run`), and the tests' gloo groups, killed loaders and fits. The server imports what the runs
import, freezes what it holds (`gc.freeze`: a run's garbage collections never walk, and so never
copy, the imported modules' objects), then forks each run, which sets its own session (as
``start_new_session=True``), output files, working directory, environment and ``sys.argv``, and runs
the script (or module, as ``python -m``) as ``__main__``. Each run is still a real process: it can be
killed with its process group, its loader workers are its own children, and its CPU times count from
the fork (``getrusage`` starts at zero in a child). A run that must start as a new interpreter
(Lightning's own DDP launcher re-runs ``sys.argv``; the benchmark's memory runs, whose PSS must not
share the server's pages) is started with `subprocess` instead.
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
#: line: {"script", "module", "argv", "log", "err", "cwd", "env", "replace_env"} -> {"pid"};
#: {"poll": pid} -> {"code": int or None}. "module": the script is a module's name, run as ``python
#: -m`` runs it; "err": stderr's own file (None: with stdout in "log"); "replace_env": "env" is the
#: run's whole environment, not additions to the server's.
SERVER = r"""
import gc, importlib, json, os, runpy, sys, traceback

for name in sys.argv[1:]:
    importlib.import_module(name)
gc.collect()
gc.freeze()
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
            if request.get("replace_env"):
                os.environ.clear()
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

#: Seconds the server may take to answer (its first answer waits for its imports).
ANSWER_TIMEOUT = 300


class Zygote:
    """The server of forked runs (module docstring); `close` kills what is left of them."""

    def __init__(self, log: Path, env: dict[str, str], preload: tuple[str, ...]) -> None:
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
        environment: dict[str, str] | None = None,
        **env: str,
    ) -> ForkedRun:
        """Start `script` (a module's name with `module`, as ``python -m``) with `argv`: output to
        `log` (stderr to `err` when given), in `cwd`, `env` added to the server's environment (or
        `environment` as the whole of it, `env` added)."""
        request = {"script": str(script), "module": module, "argv": [str(a) for a in argv], "log": str(log)}
        request |= {"err": str(err) if err else None, "cwd": str(cwd or Path.cwd())}
        request |= {"env": {**(environment or {}), **env}, "replace_env": environment is not None}
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


class Children:
    """Runs ``python -m MODULE ...`` commands to the end and returns them as `subprocess.run` does
    (text output captured): forked from one `Zygote`, started at the first run with that run's
    environment and `preload` imported, or each as a fresh interpreter (``forked=False``). A forked
    run's environment is the one it is given, whole. `close` ends the server."""

    def __init__(self, preload: tuple[str, ...], workdir: Path, forked: bool = True) -> None:
        self.preload, self.workdir, self.forked = preload, workdir, forked
        self.zygote: Zygote | None = None

    def run(self, cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
        """Run `cmd` (``[python, "-m", module, *args]``) with environment `env` until it ends."""
        if not self.forked:
            return subprocess.run(cmd, env=env, capture_output=True, text=True)
        if cmd[1:2] != ["-m"]:
            raise ValueError(f"a forked child runs a module (python -m MODULE ...), not {cmd}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.zygote is None:
            self.zygote = Zygote(self.workdir / "server.log", env, self.preload)
        out, err = self.workdir / "out", self.workdir / "err"
        run = self.zygote.run(cmd[2], cmd[3:], out, err=err, module=True, environment=env)
        code = run.wait()
        return subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None
