"""JupyterLab in a real browser: the chapters' pages render, their drawings show, their widgets respond, and a
solved bring-up milestone's checks pass in a kernel JupyterLab started.

Starts JupyterLab on localhost, opens each notebook of chapters/ (and the first solved bring-up milestone) in
headless Chromium (Debian's ``chromium`` package, driven by Playwright) and checks the page: no error output,
drawings present as SVG/images, and ipywidgets rendered and responding to one interaction. Screenshots and
JupyterLab's log go to ``build/browser/``.

Two kinds of visit. nbval already runs every notebook and compares its outputs with the committed ones, so the
page runs as few as show something only a live kernel can:

* **run**: the chapters of :data:`LIVE_CHAPTERS` (a widget needs a live kernel to respond) and the solved
  milestone (its checks fork the kernel's process, which must work in a kernel JupyterLab started). The served
  copy has its outputs cleared up to the last cell that shows a widget (the whole solution), and the page runs
  those cells from the Run menu, as a learner would, so every output checked there was produced in this run; the
  cells after it keep their committed outputs and are checked as a rendered notebook's are. The numba kernels are
  compiled first (``python -m npu_lab warmup``, as Binder's ``postBuild`` does), so the time limits measure the
  notebooks, not a cold compiler cache. A notebook fails when no cell finishes for ``STALL_S`` seconds; the
  failure names the cell that was running, the kernel's state and the end of JupyterLab's log.
* **render**: every other chapter opens with its committed outputs (the ones nbval reproduces in the same run),
  and the page must show them: no error output, every committed drawing drawn.

Skipped, with the reason, where Chromium or Playwright is not installed
(``sudo apt-get install chromium``; ``pip install playwright``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Every chapter, and one solved bring-up milestone: its checks fork the kernel's process, which must work in a
# kernel JupyterLab started as it does in nbval's (the later milestones fork the same way)
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb")) + [ROOT / "solutions" / "B1_eager_mlp.ipynb"]
#: The chapters the page runs up to their last widget, one of each kind of widget: ipywidgets' ``interact``
#: (C7) and the lab's own explorer (C5b, Dynamo's guards). Each run costs the chapter's cells a second time
#: (nbval runs them too), so the other chapters with widgets (C1, C2, C4, C6, C8b) are rendered from their
#: committed outputs; their explorers' controls are tested in Python (tests/test_inspect_explorer.py).
LIVE_CHAPTERS = {"C5b_dynamo", "C7_dispatcher"}
ARTIFACTS = ROOT / "build" / "browser"
STALL_S = float(os.environ.get("NPU_LAB_BROWSER_STALL_S", 300))  # no cell finished for this long: stuck
NOTEBOOK_S = 900   # a whole notebook, however steady its progress
RENDER_S = 120     # a rendered notebook's committed outputs, all shown
# Chromium's own background traffic only meets refused connections on a closed network; containers
# often give /dev/shm 64 MB, too little for a long notebook page (the tab crashes), hence /tmp.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CHROMIUM = os.environ.get("NPU_LAB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

pytestmark = [
    pytest.mark.skipif(os.environ.get("NPU_LAB_FRESH_CHECK") == "1",
                       reason="the fresh-machine check's inner run leaves the browser test to the outer run"),
    pytest.mark.skipif(sync_playwright is None, reason="browser test needs Playwright: pip install playwright"),
    pytest.mark.skipif(CHROMIUM is None, reason="browser test needs Chromium: sudo apt-get install chromium"),
]


WIDGET = "application/vnd.jupyter.widget-view+json"


def _code_cells(path: Path) -> list:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def _live(path: Path) -> int:
    """How many leading code cells the page runs (see the module's docstring): all of a solution's; a chapter's
    up to its last committed widget; none of a chapter without widgets (the page renders it)."""
    cells = _code_cells(path)
    if path.parent.name == "solutions":
        return len(cells)
    if path.stem not in LIVE_CHAPTERS:
        return 0
    widgets = [i for i, c in enumerate(cells) if any(WIDGET in out.get("data", {}) for out in c.outputs)]
    return widgets[-1] + 1 if widgets else 0


def _runs(path: Path) -> bool:
    return _live(path) > 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    port, token = _free_port(), "npu-lab-browser-test"
    home = tmp_path_factory.mktemp("lab_home")
    settings = home / "lab_settings"
    # Render every cell (JupyterLab 4 virtualizes off-screen cells) and skip the news pop-up.
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none"}')
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}')
    # Never write the committed notebooks back.
    (settings / "@jupyterlab" / "docmanager-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings").write_text(
        '{"autosave": false}')
    # The lab serves copies of the notebooks (nothing can write to the committed ones); those the page runs have
    # their outputs cleared, so no committed output can stand in for one this run must produce.
    served = home / "served"
    for folder in ("chapters", "solutions"):
        shutil.copytree(ROOT / folder, served / folder)
        for copy in (served / folder).glob("*.ipynb"):
            live = _live(ROOT / folder / copy.name)
            if not live:
                continue
            nb = nbformat.read(copy, as_version=4)
            for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
                cell.execution_count = None
                if i < live:
                    cell.outputs = []
            nbformat.write(nb, copy)
    env = dict(os.environ, NPU_LAB_HOME=str(home), JUPYTER_CONFIG_DIR=str(home / "jupyter_config"),
               JUPYTER_DATA_DIR=str(home / "jupyter_data"), JUPYTERLAB_SETTINGS_DIR=str(settings))
    # JupyterLab shows an untrusted notebook's committed SVG and HTML as text: trust the rendered copies, as a
    # learner's own run of the notebook would
    rendered = [str(served / p.relative_to(ROOT)) for p in NOTEBOOKS if _live(p) < len(_code_cells(p))]
    trust = subprocess.run([sys.executable, "-m", "jupyter", "trust", *rendered], env=env, capture_output=True,
                           text=True, timeout=120)
    assert trust.returncode == 0, f"jupyter trust failed:\n{trust.stderr[-2000:]}"
    warm = subprocess.run([sys.executable, "-m", "npu_lab", "warmup"], env=env, capture_output=True,
                          text=True, timeout=900)
    assert warm.returncode == 0, f"python -m npu_lab warmup failed:\n{warm.stderr[-3000:]}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log_path = ARTIFACTS / "jupyterlab.log"
    log = log_path.open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--ServerApp.token={token}", f"--ServerApp.root_dir={served}", "--LabApp.news_url=",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.extension_manager=readonly", "--allow-root"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("JupyterLab did not start within 90 s")
            time.sleep(0.5)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser, url, token, log_path
        browser.close()
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def _sessions(url: str, token: str) -> list[dict]:
    """JupyterLab's running sessions (notebook path, kernel state) from its REST API."""
    try:
        with urllib.request.urlopen(f"{url}/api/sessions?token={token}", timeout=5) as reply:
            return json.load(reply)
    except OSError:
        return []


def _kernel_state(url: str, token: str, rel: str) -> str:
    for session in _sessions(url, token):
        if session.get("path") == rel and session.get("kernel"):
            return session["kernel"].get("execution_state", "unknown")
    return "no kernel"


def _run_all(page, live: int) -> None:
    """Run every cell from the Run menu, or (``live`` short of the code cells) every cell above code cell ``live``."""
    cells = page.locator(".jp-Notebook .jp-CodeCell")
    if live < cells.count():
        cells.nth(live).locator(".jp-InputPrompt").click()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells" if live >= cells.count() else "Run All Above Selected Cell",
                     exact=True).click()


def _prompts(page) -> list[str]:
    """The input prompt of every code cell: '[ ]' not run, '[*]' queued or running, '[n]' done."""
    return [p.strip() for p in page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").all_inner_texts()]


def _finished(prompts: list[str]) -> int:
    return sum(bool(re.search(r"\[\d+\]", p)) for p in prompts)


def _shut_down(url: str, token: str, rel: str) -> None:
    """End the notebook's kernel, so kernels of earlier notebooks do not pile up."""
    for session in _sessions(url, token):
        if session.get("path") == rel:
            request = urllib.request.Request(f"{url}/api/sessions/{session['id']}?token={token}", method="DELETE")
            try:
                urllib.request.urlopen(request, timeout=10).close()
            except OSError:
                pass


def _wait_for_kernel(url: str, token: str, rel: str, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while (state := _kernel_state(url, token, rel)) != "idle":
        assert time.time() < deadline, f"{rel}: kernel not ready after {seconds:.0f} s (state: {state})"
        time.sleep(0.5)


def _stuck(page, path: Path, prompts: list[str], state: str, log_path: Path, why: str) -> str:
    """A failure message that says where the notebook stopped and what the lab reported."""
    shot = ARTIFACTS / f"{path.parent.name}_{path.stem}_stuck.png"
    page.screenshot(path=str(shot), full_page=False)
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    where = next((i for i, p in enumerate(prompts) if not re.search(r"\[\d+\]", p)), None)
    cell = "" if where is None or where >= len(code) else \
        f"first unfinished code cell #{where} ({prompts[where]}): {code[where].source.splitlines()[0][:100]!r}\n"
    tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    return (f"{path.relative_to(ROOT)}: {why}; {_finished(prompts)} of {len(prompts)} code cells finished\n"
            f"{cell}kernel: {state}; screenshot: {shot}\nJupyterLab log (end):\n{tail}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS])
def test_notebook_runs_in_jupyterlab(lab, path):
    browser, url, token, log_path = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    rel = path.relative_to(ROOT).as_posix()
    try:
        if _runs(path):
            _run_and_check(page, path, rel, url, token, log_path)
        else:
            _render_and_check(page, path, rel, url, token)
    finally:
        page.close()
        _shut_down(url, token, rel)


def _drawings(nb) -> int:
    """How many committed outputs hold a drawing (SVG or an image)."""
    return sum(any(k.startswith("image/") for k in out.get("data", {}))
               for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs)


def _render_and_check(page, path: Path, rel: str, url: str, token: str) -> None:
    nb = nbformat.read(path, as_version=4)
    page.goto(f"{url}/lab/tree/{rel}?token={token}&reset")
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=60_000)
    committed = sum(bool(c.outputs) for c in nb.cells if c.cell_type == "code")
    # A long notebook's outputs render a while after its first cell shows, longer on a busy machine: wait until
    # they have all rendered (or RENDER_S seconds have passed), not a fixed moment.
    # Cells, not output areas: a widget's own Output widget is an output area inside the cell's (C1's interact, once
    # the widget manager has drawn it), which made the count 29 for 28 cells in a run.
    outputs = page.locator(".jp-Notebook .jp-CodeCell:has(.jp-OutputArea-output)")
    waited = time.time()
    while outputs.count() < committed and time.time() - waited < RENDER_S:
        page.wait_for_timeout(500)
    page.wait_for_timeout(1000)
    shown = outputs.count()
    shot = ARTIFACTS / f"{path.parent.name}_{path.stem}.png"
    page.screenshot(path=str(shot), full_page=False)  # before the assertions: a failure leaves its picture
    assert shown == committed, f"{rel}: {committed} code cells have committed outputs, the page shows {shown}"
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    tracebacks = [t for t in errors.all_inner_texts() if "Traceback" in t or "Error" in t.split("\n")[0]]
    assert not tracebacks, f"{rel}: error output in the page:\n{tracebacks[0][:2000]}"
    drawings = page.locator(".jp-OutputArea-output svg, .jp-OutputArea-output img")
    waited = time.time()
    while drawings.count() < _drawings(nb) and time.time() - waited < RENDER_S:
        page.wait_for_timeout(500)
    drawn = drawings.count()
    assert drawn >= _drawings(nb), f"{rel}: {_drawings(nb)} committed drawings, {drawn} drawn on the page"


def _run_and_check(page, path: Path, rel: str, url: str, token: str, log_path: Path) -> None:
    live = _live(path)
    page.goto(f"{url}/lab/tree/{rel}?token={token}&reset")
    page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=60_000)
    _wait_for_kernel(url, token, rel)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    page.wait_for_timeout(1000)
    assert _finished(_prompts(page)) == 0, f"{rel}: the served copy should have no execution counts"
    _run_all(page, live)
    # The menu click must have started the run: cells queue ('[*]') or finish within a minute.
    started = time.time()
    while all(p == "[ ]" for p in _prompts(page)):
        if time.time() - started > 60:
            raise AssertionError(_stuck(page, path, _prompts(page), _kernel_state(url, token, rel),
                                        log_path, "Run All Cells started nothing within 60 s"))
        page.wait_for_timeout(500)
    begin = last_change = time.time()
    done = -1
    while True:
        prompts = _prompts(page)[:live]
        if prompts and _finished(prompts) == live:
            break
        if _finished(prompts) != done:
            done, last_change = _finished(prompts), time.time()
        now = time.time()
        if now - last_change > STALL_S or now - begin > NOTEBOOK_S:
            why = (f"no cell finished for {STALL_S} s" if now - last_change > STALL_S
                   else f"still running after {NOTEBOOK_S} s")
            raise AssertionError(_stuck(page, path, prompts, _kernel_state(url, token, rel), log_path, why))
        page.wait_for_timeout(500)
    page.wait_for_timeout(1000)
    shot = ARTIFACTS / f"{path.parent.name}_{path.stem}.png"
    page.screenshot(path=str(shot), full_page=False)

    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    tracebacks = [t for t in errors.all_inner_texts() if "Traceback" in t or "Error" in t.split("\n")[0]]
    assert not tracebacks, f"{rel}: error output in the page:\n{tracebacks[0][:2000]}"

    if rel.startswith("solutions/"):  # a solved milestone: every check it runs passes in the browser's kernel too
        outputs = "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())
        checks = len(re.findall(r"npu_lab\.check\(", path.read_text()))
        # a result shows as "[passed] b1.loss ..." in text, "✔ passed b1.loss ..." in its HTML form
        passed = re.findall(r"(?:\[passed\]|✔ passed) [a-z]\w*\.\w+", outputs)
        failed = re.findall(r"(?:not yet|not started)\]? [a-z]\w*\.\w+", outputs)
        assert len(passed) >= checks and not failed, \
            f"{rel}: a check did not pass in JupyterLab:\n{outputs[-2000:]}"

    source = path.read_text()
    if "draw_fx" in source or "draw_autograd" in source or "Drawing(" in source:
        assert page.locator(".jp-OutputArea-output svg, .jp-OutputArea-output img").count() > 0, \
            f"{rel}: no drawing rendered"
    widgets = page.locator(".jp-OutputArea-output .jupyter-widgets")
    if any(WIDGET in out.get("data", {}) for c in _code_cells(path) for out in c.outputs):
        assert widgets.count() > 0, f"{rel}: no ipywidget rendered"
        _interact(page, rel)
    if live < len(_code_cells(path)):  # the committed tail shows as a rendered notebook's outputs do
        drawn = page.locator(".jp-OutputArea-output svg, .jp-OutputArea-output img").count()
        committed = _drawings(nbformat.read(path, as_version=4))
        assert drawn >= committed, f"{rel}: {committed} committed drawings, {drawn} drawn on the page"


def _interact(page, rel: str) -> None:
    """One interaction with the first widget that takes one; assert the page responded."""
    button = page.locator(".jp-OutputArea-output button.jupyter-button")
    slider = page.locator(".jp-OutputArea-output .widget-slider .noUi-handle, "
                          ".jp-OutputArea-output .widget-slider input[type='range']")
    checkbox = page.locator(".jp-OutputArea-output .widget-checkbox input[type='checkbox']")
    if button.count():
        control = button.first
    elif slider.count():
        control = slider.first
    elif checkbox.count():
        box = checkbox.first
        was = box.is_checked()
        box.click()
        page.wait_for_timeout(500)
        assert box.is_checked() != was, f"{rel}: the checkbox did not toggle"
        return
    else:
        raise AssertionError(f"{rel}: widgets rendered but none takes a click or a key")
    # The output area holding the control: its HTML must change when the control is used.
    area = control.locator("xpath=ancestor::div[contains(@class, 'jp-OutputArea-output')][1]")
    before = area.inner_html()
    if button.count():
        control.click()
    else:
        control.focus()
        page.keyboard.press("Home")
    for _ in range(20):
        page.wait_for_timeout(500)
        if area.inner_html() != before:
            return
    raise AssertionError(f"{rel}: using the widget changed nothing on the page")
