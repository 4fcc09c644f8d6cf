"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe): stdlib only.

Chromium reads JSON commands, each ended by a NUL byte, from fd 3 and writes responses and events
to fd 4. ``Page.load(url)`` navigates one tab, waits for the load event and records every console
error, uncaught exception, failed resource and JavaScript dialog; ``evaluate`` runs an expression
in the page; ``screenshot`` returns PNG bytes.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe", "--window-size=1400,1000", "about:blank")


def ensure_installed() -> str | None:
    """None when Chromium is there (installed now with apt-get if missing), else why it cannot be."""
    if Path(CHROMIUM).exists():
        return None
    if shutil.which("apt-get") is None:
        return "Chromium is not installed and this system has no apt-get to install Debian's `chromium`"
    if os.geteuid() != 0:
        return "Chromium is not installed and installing Debian's `chromium` needs root (apt-get install -y chromium)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "install", "-y", "-q", "chromium"],
                    ["sh", "-c", "apt-get update -q && apt-get install -y -q chromium"]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"apt-get install chromium failed: {e}"
        if done.returncode == 0 and Path(CHROMIUM).exists():
            return None
    return f"apt-get install chromium failed: {done.stderr.strip()[-300:]}"


class Browser:
    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="neuronsim-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def child_fds() -> None:  # the protocol's fixed descriptors: 3 = commands in, 4 = replies out
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]
            for target, fd in zip((3, 4), high):
                os.dup2(fd, target, inheritable=True)
                os.close(fd)

        # close_fds=False: the child keeps 3 and 4 (made inheritable above); every other descriptor
        # of this process is close-on-exec already (Python creates them non-inheritable).
        self.process = subprocess.Popen([CHROMIUM, f"--user-data-dir={self.profile}", *FLAGS], close_fds=False,
                                        preexec_fn=child_fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=True)

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError(f"Chromium closed the DevTools pipe (exit code {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            command["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read_message(deadline)
            self.events.append(message)
            if message.get("method") == method:
                return message

    def load(self, url: str) -> None:
        self.events.clear()
        self.send("Page.navigate", session=True, url=url)
        self.wait_for("Page.loadEventFired")
        self.evaluate("1")  # drain events raised while the page loaded

    def evaluate(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression!r} raised in the page: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions, failed loads and dialogs since the last load()."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
            elif method == "Page.javascriptDialogOpening":
                found.append(f"dialog: {params.get('message')}")
        return found

    def screenshot(self) -> bytes:
        return base64.b64decode(self.send("Page.captureScreenshot", session=True, format="png",
                                          captureBeyondViewport=True)["data"])

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)
