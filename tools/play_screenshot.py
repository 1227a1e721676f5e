"""Drive `unilab play` in headless Chromium: open the viewer, screenshot it, move the forward-velocity
slider with the keyboard and report, from the server's own status lines, the command and the base's
velocity before and after. tests/test_play_browser.py runs it on a short run; docs/play.md's
screenshot is regenerated with it on a trained one:

    python tools/play_screenshot.py RUN_DIR --out docs/images/play.png [--forward 0.5] [--settle 6]

Needs Chromium and its driver (Debian: apt-get install chromium chromium-driver; `bash tools/setup.sh
test` installs them as root) and selenium (the test extra).
"""

from __future__ import annotations

import argparse
import queue
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

STATUS = re.compile(
    r"command vx (?P<cvx>[-+]\d+\.\d+) vy (?P<cvy>[-+]\d+\.\d+) wz (?P<cwz>[-+]\d+\.\d+)  "
    r"base \(1 s mean\) vx (?P<vx>[-+]\d+\.\d+) vy (?P<vy>[-+]\d+\.\d+) wz (?P<wz>[-+]\d+\.\d+)"
)
SLIDER_STEP = 0.05  # unilab.play.viewer.COMMAND_STEP: one arrow key press


def chromium_paths() -> tuple[str, str]:
    """(browser, driver) on PATH, or a SystemExit that says how to install them."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        missing = " and ".join(n for n, p in (("chromium", browser), ("chromedriver", driver)) if p is None)
        raise SystemExit(
            f"{missing} not found on PATH: install them (Debian/Ubuntu: apt-get install chromium chromium-driver; "
            "`bash tools/setup.sh test` does as root)"
        )
    return browser, driver


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PlayServer:
    """`unilab play` in a subprocess; its stdout lines collected by a thread."""

    proc: subprocess.Popen[str]
    url: str = ""
    lines: list[str] = field(default_factory=list)
    _q: queue.Queue[str] = field(default_factory=queue.Queue)
    _reader: threading.Thread | None = None

    @staticmethod
    def start(run_dir: Path, port: int, timeout: float = 120.0) -> PlayServer:
        cmd = [sys.executable, "-m", "unilab", "play", str(run_dir), "--port", str(port)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        server = PlayServer(proc)
        server._reader = threading.Thread(target=server._read, daemon=True)
        server._reader.start()
        server.url = server.wait_for(r"serving on (\S+)", timeout).group(1)
        return server

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first line from now on matching ``pattern``; SystemExit with the output on timeout or exit."""
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self._q.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self._q.empty():
                    break
                continue
            self.lines.append(line)
            if (m := rx.search(line)) is not None:
                return m
        raise SystemExit(f"unilab play did not print /{pattern}/ in {timeout:.0f} s:\n" + "\n".join(self.lines[-30:]))

    def status(self, seconds: float) -> list[re.Match[str]]:
        """The status lines printed over the next ``seconds``."""
        out: list[re.Match[str]] = []
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                line = self._q.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            self.lines.append(line)
            if (m := STATUS.search(line)) is not None:
                out.append(m)
        return out

    def stop(self) -> int:
        """Ctrl-C, as a user stops it; its exit status."""
        self.proc.send_signal(2)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = -9
        if self._reader is not None:
            self._reader.join(timeout=10)
        while not self._q.empty():  # what it printed while stopping
            self.lines.append(self._q.get())
        return rc


def open_browser(width: int = 1280, height: int = 800):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = chromium_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-dev-shm-usage",
        "--enable-unsafe-swiftshader",  # WebGL in software: no GPU here
        "--use-angle=swiftshader",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=opts)


def sliders(page, count: int, timeout: float = 60.0) -> list:
    """The page's slider handles once ``count`` of them are drawn."""
    from selenium.webdriver.common.by import By

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = page.find_elements(By.CSS_SELECTOR, "[role=slider]")
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise SystemExit(f"the viewer showed fewer than {count} sliders in {timeout:.0f} s")


def move_forward_slider(page, presses: int) -> None:
    """Focus the forward-velocity slider's handle (as Tab would) and press the right arrow key
    ``presses`` times. A mouse click on the handle would also set the value under the pointer when
    the button comes up, after the keys."""
    from selenium.webdriver.common.keys import Keys

    handle = sliders(page, 3)[0]
    page.execute_script("arguments[0].focus()", handle)
    for _ in range(presses):
        handle.send_keys(Keys.ARROW_RIGHT)


def save_screenshot(page, path: Path) -> None:
    """The page as a small PNG (a 256-colour palette), browser notices closed first."""
    import io

    from PIL import Image
    from selenium.webdriver.common.by import By

    for button in page.find_elements(By.CSS_SELECTOR, ".mantine-Notification-closeButton"):
        button.click()  # "software WebGL rendering": true here, not what the page is about
    time.sleep(0.5)
    img = Image.open(io.BytesIO(page.get_screenshot_as_png())).convert("RGB")
    path.parent.mkdir(parents=True, exist_ok=True)
    img.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="a g1_walk run directory")
    ap.add_argument("--out", type=Path, default=Path("docs/images/play.png"), help="the screenshot (PNG)")
    ap.add_argument("--forward", type=float, default=0.5, help="forward velocity to set with the slider, m/s")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds to measure before and after the change")
    args = ap.parse_args()
    server = PlayServer.start(args.run_dir, free_port())
    page = open_browser(960, 640)
    try:
        page.get(server.url)
        sliders(page, 3)
        before = server.status(args.settle)
        move_forward_slider(page, round(args.forward / SLIDER_STEP))
        server.wait_for(r"command: vx", 30)
        server.status(2.0)  # the robot starts to follow
        after = server.status(args.settle)
        save_screenshot(page, args.out)
    finally:
        page.quit()
        rc = server.stop()
    for name, rows in (("before", before), ("after", after)):
        cmd = rows[-1]["cvx"] if rows else "?"
        vx = statistics.fmean(float(m["vx"]) for m in rows) if rows else float("nan")
        print(f"{name}: command vx {cmd} m/s, base vx {vx:+.2f} m/s (mean of {len(rows)} status lines)")
    print(f"screenshot: {args.out}; unilab play exited {rc}")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
