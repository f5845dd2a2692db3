"""Grade the notebook you are in (issue 41).

In a Jupyter notebook of the course::

    %load_ext grade_jupyter
    %grade 04-checkpoint                 # [--seed N] [--lang zh|en] [--device cpu|cuda|auto]

or, from code, ``grade_jupyter.check("04-checkpoint")``. Either grades the notebook's *saved
file* with the course's ``grade`` binary (``grade exercise ID --submission NB.ipynb --html
FILE``), exactly as an instructor's batch would, and shows the report under the cell: the HTML
page ``--html`` writes (verdicts, reasons, the lesson's pictures) with the terminal table as the
plain-text fallback of the same display. Nothing but the ``grade`` binary is started: no second
Python, no Jupyter server API. Magic lines (``%load_ext``, ``%grade``) are not graded: the
notebook reader of ``grade`` drops every ``%``/``!`` line (src/notebook.rs).

Exit codes as on the command line: 0 every criterion passed, 1 some criterion failed, 2 could
not grade. A problem the student can act on (no course, ``grade`` not built, an unknown lesson,
a notebook never saved) is a short bilingual message in the cell, never a traceback.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import html as _html
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

__version__ = "0.1.0"
__all__ = ["check", "GradeResult", "load_ipython_extension", "unload_ipython_extension"]

#: The last result of ``%grade`` or ``check()`` in this kernel.
last_result = None

# --------------------------------------------------------------------------------------------
# results and problems


class GradeResult:
    """One grading: ``exit_code`` (0 pass, 1 some criterion failed, 2 could not grade), ``html``
    (the page ``grade --html`` wrote, or None), ``text`` (the terminal table, or the message),
    the graded ``notebook`` and when it was ``saved``, and ``notes`` (what the cell said above
    the report: the file graded, unsaved cells)."""

    def __init__(self, lesson, exit_code, text, html=None, notebook=None, saved=None,
                 notes=(), stderr="", message=None):
        self.lesson = lesson
        self.exit_code = exit_code
        self.text = text
        self.html = html
        self.notebook = notebook
        self.saved = saved
        self.notes = list(notes)
        self.stderr = stderr
        self.message = message  # (zh, en) when it could not grade

    @property
    def passed(self):
        return self.exit_code == 0

    def __repr__(self):
        what = {0: "passed", 1: "failed", 2: "could not grade"}.get(self.exit_code, "stopped")
        return f"<GradeResult {self.lesson}: exit {self.exit_code} ({what})>"

    # no _repr_mimebundle_: check() already shows the report, and `grade_jupyter.check(...)` as a
    # cell's last line would show it twice; `show()` shows it again
    def show(self):
        _show(self, None)


class _Problem(Exception):
    """Something the student can act on: a bilingual message, exit 2."""

    def __init__(self, zh, en, detail=""):
        super().__init__(en)
        self.zh, self.en, self.detail = zh, en, detail


# --------------------------------------------------------------------------------------------
# which notebook, which course, which binary


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _notebook_path(explicit, ip):
    """The notebook file the kernel runs: `explicit`, else `__session__` (ipykernel sets it from
    JPY_SESSION_NAME, which a Jupyter server gives its kernels), JPY_SESSION_NAME itself, or VS
    Code's `__vsc_ipynb_file__`. A relative name is taken from the kernel's folder."""
    ns = getattr(ip, "user_ns", {}) or {}
    named = []
    if explicit:
        named.append(("notebook=", str(explicit)))
    else:
        for how, value in (("__session__", ns.get("__session__")),
                           ("JPY_SESSION_NAME", os.environ.get("JPY_SESSION_NAME")),
                           ("__vsc_ipynb_file__", ns.get("__vsc_ipynb_file__"))):
            if isinstance(value, str) and value.strip():
                named.append((how, value.strip()))
    for how, value in named:
        if not explicit and not value.lower().endswith(".ipynb"):
            continue  # a console's or a bare kernel's session name: no file
        p = Path(value).expanduser()
        tries = [p] if p.is_absolute() else [Path.cwd() / p, Path.cwd() / p.name]
        for t in tries:
            if t.is_file():
                return t.resolve()
        raise _Problem(
            f"找不到要评分的笔记本文件 `{value}`：请先保存笔记本（Ctrl-S / ⌘S），再运行 %grade"
            "（内核启动后改过名？用 %grade 练习编号 --notebook 路径.ipynb）",
            f"the notebook's file `{value}` is not on disk: save the notebook first (Ctrl-S / ⌘S), "
            "then run %grade again (renamed since the kernel started? %grade ID --notebook PATH.ipynb)",
        )
    raise _Problem(
        "不知道这个内核运行的是哪个笔记本文件（没有 __session__ / JPY_SESSION_NAME）："
        "请在 Jupyter 中保存并打开笔记本，或写 %grade ID --notebook 路径.ipynb",
        "this kernel does not know which notebook file it runs (no __session__ / JPY_SESSION_NAME): "
        "save the notebook and open it in Jupyter, or name it: %grade ID --notebook PATH.ipynb",
    )


def _is_course(d):
    return (d / "exercises").is_dir() and ((d / "course.yaml").is_file() or (d / "rubrics").is_dir())


def _course_root(notebook):
    """GRADE_COURSE, else the first folder up from the notebook with course.yaml (or rubrics/)
    and exercises/."""
    env = os.environ.get("GRADE_COURSE")
    if env:
        root = Path(env).expanduser()
        if _is_course(root):
            return root.resolve()
        raise _Problem(
            f"GRADE_COURSE={env} 不是课程目录（需要 course.yaml 和 exercises/）",
            f"GRADE_COURSE={env} is not the course folder (it needs course.yaml and exercises/)",
        )
    for d in notebook.parents:
        if _is_course(d):
            return d.resolve()
    raise _Problem(
        f"找不到课程目录：{notebook} 不在课程（含 course.yaml 和 exercises/ 的目录）之下；"
        "把笔记本放进课程目录，或设置环境变量 GRADE_COURSE=课程目录",
        f"no course found: {notebook} is not inside the course (the folder with course.yaml and "
        "exercises/); move the notebook into it, or set GRADE_COURSE=/path/to/the/course",
    )


def _grade_binary(root):
    """GRADE_BIN, else the course's own build (target/debug/grade, then target/release/grade)."""
    env = os.environ.get("GRADE_BIN")
    if env:
        if os.access(env, os.X_OK):
            return env
        raise _Problem(f"GRADE_BIN={env} 不是可执行文件", f"GRADE_BIN={env} is not an executable")
    for sub in ("debug", "release"):
        b = root / "target" / sub / "grade"
        if os.access(b, os.X_OK):
            return str(b)
    raise _Problem(
        f"评分程序 grade 还没有构建：在终端进入 {root} 运行 ./setup.sh（第一次需要几分钟），再运行 %grade",
        f"the grader is not built yet: in a terminal, run ./setup.sh in {root} (a few minutes the "
        "first time), then run %grade again",
    )


# --------------------------------------------------------------------------------------------
# what is graded: the saved file, and whether the kernel ran cells it does not hold

_runs = []  # (In [n], start time, cell id, source) of each cell run since the extension loaded
_MAX_RUNS = 1000
_starts = {}


def _pre_run_cell(info=None):
    _starts[id(info)] = time.time()


def _post_run_cell(result=None):
    info = getattr(result, "info", None)
    started = _starts.pop(id(info), time.time())
    if info is None or getattr(info, "silent", False) or not getattr(info, "store_history", True):
        return  # a frontend's own silent request, not a cell
    _runs.append((getattr(result, "execution_count", None), started,
                  getattr(info, "cell_id", None), getattr(info, "raw_cell", "") or ""))
    del _runs[:-_MAX_RUNS]


def _norm(src):
    return "\n".join(line.rstrip() for line in src.strip("\n").splitlines())


def _graded_part(src):
    """The lines of a cell that grading runs (what src/notebook.rs keeps), normalised."""
    if src.lstrip().startswith("%%"):
        return ""
    keep = [l for l in src.splitlines() if not l.lstrip().startswith(("%", "!", "#"))]
    return _norm("\n".join(keep)).strip()


def _magic_only(src):
    """A cell grading runs nothing of: only `%`/`!` lines (or a `%%` cell), at least one."""
    lines = [l.strip() for l in src.splitlines() if l.strip()]
    return bool(lines) and (lines[0].startswith("%%") or all(l.startswith(("%", "!")) for l in lines))


def _saved_cells(notebook):
    """The notebook's code cells as saved: [(id, source)], or None when it is not readable JSON
    (grade then says where it breaks)."""
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
        cells = []
        for c in nb.get("cells", []):
            if c.get("cell_type") == "code":
                src = c.get("source", "")
                cells.append((c.get("id"), "".join(src) if isinstance(src, list) else str(src)))
        return cells
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def _when(ts):
    t = _dt.datetime.fromtimestamp(ts)
    ago = max(0, int(time.time() - ts))
    if ago < 120:
        rel_zh, rel_en = f"{ago} 秒前", f"{ago} s ago"
    elif ago < 7200:
        rel_zh, rel_en = f"{ago // 60} 分钟前", f"{ago // 60} min ago"
    else:
        rel_zh, rel_en = f"{ago // 3600} 小时前", f"{ago // 3600} h ago"
    return t.strftime("%Y-%m-%d %H:%M:%S"), rel_zh, rel_en


def _what_is_graded(notebook, ip):
    """Notes (zh, en) for the top of the report: the file and when it was saved, its cells, and
    the cells the kernel ran that the saved file does not hold."""
    mtime = notebook.stat().st_mtime
    stamp, rel_zh, rel_en = _when(mtime)
    notes = [(
        f"评分对象：已保存的文件 {notebook}（保存于 {stamp}，{rel_zh}），与批量评分相同，不是内核当前的状态",
        f"Graded: the saved file {notebook} (saved {stamp}, {rel_en}), as a batch grading would, "
        "not the kernel's live state",
    )]
    cells = _saved_cells(notebook)
    if cells is None:
        return notes, mtime
    magic = sum(1 for _, s in cells if _magic_only(s))
    notes.append((
        f"代码单元 {len(cells)} 个，依次作为一个模块导入；其中 {magic} 个只含魔法命令/Shell 命令，"
        "评分时不运行（%… 和 !… 行都不运行）",
        f"{len(cells)} code cells, imported in order as one module; {magic} of them hold only "
        "magics/shell lines and are not run when graded (no %… or !… line runs)",
    ))
    if ip is None:
        return notes, mtime
    by_id = {cid: _graded_part(s) for cid, s in cells if cid}
    saved = {_graded_part(s) for _, s in cells}
    tracked = {n for n, *_ in _runs}  # cells that finished: the running one is not among them
    newer, unknown = [], []
    for n, ran_at, cid, src in _runs:
        part = _graded_part(src)
        if not part:
            continue
        differs = (by_id[cid] != part) if cid in by_id else part not in saved
        if differs and ran_at >= mtime - 1:
            newer.append(n)
    # cells run before the extension was loaded: no time known
    hm = getattr(ip, "history_manager", None)
    history = getattr(hm, "input_hist_raw", None) or []  # as typed (`In` holds the translation)
    for n, src in enumerate(history[:-1]):  # In [n]; the last one is this cell
        if n == 0 or n in tracked or not isinstance(src, str):
            continue
        part = _graded_part(src)
        if part and part not in saved:
            unknown.append(n)
    if newer:
        cells_txt = ", ".join(f"In [{n}]" for n in sorted(set(newer)))
        notes.append((
            f"⚠ 未保存：{cells_txt} 在上次保存之后运行，而保存的文件里没有这个版本。"
            "评分的是保存的文件：请先保存（Ctrl-S / ⌘S）再运行 %grade",
            f"⚠ Unsaved: {cells_txt} ran after the last save and the saved file does not hold "
            "that version. The saved file is what is graded: save (Ctrl-S / ⌘S) and run %grade again",
        ))
    if unknown:
        cells_txt = ", ".join(f"In [{n}]" for n in sorted(set(unknown)))
        notes.append((
            f"注意：{cells_txt}（在加载 grade_jupyter 之前运行）不在保存的文件中；如果之后改过并且没有保存，"
            "请先保存再评分",
            f"Note: {cells_txt} (run before grade_jupyter was loaded) are not in the saved file as "
            "they ran; if you changed them since without saving, save and grade again",
        ))
    return notes, mtime


# --------------------------------------------------------------------------------------------
# running the binary


class _Progress:
    """One line under the cell, updated while `grade` runs (a display in a kernel, stderr in a
    terminal)."""

    def __init__(self, ip, quiet=False):
        self.handle = None
        self.quiet = quiet
        self.kernel = not quiet and ip is not None and hasattr(ip, "kernel")

    @staticmethod
    def _bundle(text):
        return {"text/plain": text,
                "text/html": f'<pre class="grade-jupyter-progress">{_html.escape(text)}</pre>'}

    def update(self, text):
        if self.handle is not None:
            self.handle.update(self._bundle(text), raw=True)

    def first(self, text):
        if self.kernel:
            from IPython.display import display
            self.handle = display(self._bundle(text), raw=True, display_id=True)
        elif not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def finish(self, bundle):
        """Replace the progress line with the result (so the output holds only the report)."""
        if self.handle is not None:
            self.handle.update(bundle, raw=True)
            return True
        return False


def _run(cmd, env, progress, title):
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    out, err = [], []

    def pump(stream, into):
        for raw in iter(stream.readline, b""):
            into.append(raw.decode("utf-8", "replace"))
        stream.close()

    readers = [threading.Thread(target=pump, args=(proc.stdout, out), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err), daemon=True)]
    for r in readers:
        r.start()
    progress.first(f"⏳ {title} …")
    try:
        while True:
            try:
                proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            last = next((l.strip() for l in reversed(err) if l.strip()
                         and not l.startswith("HTML report")), "")  # e.g. `⏳ probe compare`
            line = f"⏳ {title} … {int(time.monotonic() - started)} s"
            progress.update(line + (f"\n   {last}" if last else ""))
    except KeyboardInterrupt:
        _stop(proc)
        raise
    for r in readers:
        r.join(timeout=5)
    return proc.returncode, "".join(out), "".join(err), time.monotonic() - started


def _stop(proc):
    for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 3)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _could_not_grade(code, stderr, lesson):
    msg = "\n".join(l.removeprefix("grade: error: ") for l in stderr.strip().splitlines()
                    if not l.startswith("HTML report")).strip()
    if "unknown exercise" in msg:
        known = re.search(r"known exercises: ([^.]*)", msg)
        known = known.group(1).strip() if known else ""
        return _Problem(
            f"没有这个练习：`{lesson}`。可用的练习：{known}",
            f"no such lesson: `{lesson}`. The lessons: {known}",
            detail=msg,
        )
    if code == 2:
        return _Problem("无法评分（grade 退出码 2）：", "could not grade (grade exit 2):", detail=msg)
    return _Problem(f"grade 异常退出（{code}）：", f"grade stopped unexpectedly ({code}):", detail=msg)


# --------------------------------------------------------------------------------------------
# the displayed report

# What the notebook's own style would otherwise change (JupyterLab right-aligns and fixes the
# layout of output tables), and the cell's notes; scoped like the page's style.
_EXTRA_CSS = """
:root{max-width:1100px;margin:0;padding:.3rem 0}
table{table-layout:auto;margin-left:0;margin-right:0}
th,td{text-align:left}
p{text-align:left}
.gj-notes{margin:.2rem 0 .6rem;padding:.4rem .6rem;border-left:3px solid #8a8a8a;background:#fafafa;font-size:.9rem}
.gj-notes p{margin:.15rem 0}
.gj-warn{color:#8a4b00}
.gj-error{padding:.5rem .7rem;border-left:4px solid #b3261e;background:#fdf3f2}
.gj-error p{margin:.15rem 0}
"""


def _scope_css(css, scope):
    """`css` with every rule limited to elements under `scope` (`:root`, `html`, `body` become
    the scope itself), so that the page's style does not restyle the notebook around it."""
    out, i = [], 0
    while True:
        brace = css.find("{", i)
        if brace < 0:
            break
        prelude = css[i:brace].strip()
        depth, j = 1, brace + 1
        while j < len(css) and depth:
            depth += {"{": 1, "}": -1}.get(css[j], 0)
            j += 1
        inner = css[brace + 1:j - 1]
        if prelude.startswith("@media") or prelude.startswith("@supports"):
            out.append(f"{prelude}{{{_scope_css(inner, scope)}}}")
        elif prelude.startswith("@"):
            out.append(f"{prelude}{{{inner}}}")
        else:
            sels = []
            for s in prelude.split(","):
                s = s.strip()
                head, _, rest = s.partition(" ")
                if head in (":root", "html", "body"):
                    sels.append(f"{scope} {rest}".strip())
                else:
                    sels.append(f"{scope} {s}")
            out.append(f"{','.join(sels)}{{{inner}}}")
        i = j
    return "\n".join(out)


def _embed(page):
    """The page `grade --html` wrote as a fragment for a notebook's output: its style (the
    page's, then `_EXTRA_CSS`) for `_scope_css`, its body without the script (the class pages'
    sorting; none here)."""
    style = "\n".join(re.findall(r"<style>(.*?)</style>", page, re.S))
    body = re.search(r"<body>(.*)</body>", page, re.S)
    body = body.group(1) if body else page
    body = re.sub(r"<script>.*?</script>", "", body, flags=re.S)
    return style + _EXTRA_CSS, body


def _wrap(css, inner, exit_code):
    """One output: a div with an id of its own, every rule of `css` limited to it (an id's
    weight: the notebook's own table styles do not override the report's)."""
    scope = f"gj-{os.urandom(4).hex()}"
    return (f'<div class="grade-jupyter" id="{scope}" data-exit="{exit_code}">'
            f"<style>{_scope_css(css, '#' + scope)}</style>{inner}</div>")


def _notes_html(notes):
    rows = "".join(
        f'<p class="{"gj-warn" if zh.startswith("⚠") else ""}">{_html.escape(zh)}<br>'
        f'<span lang="en">{_html.escape(en)}</span></p>' for zh, en in notes)
    return f'<div class="gj-notes">{rows}</div>' if rows else ""


def _bundle(r):
    notes_text = "".join(f"{zh}\n{en}\n" for zh, en in r.notes)
    if r.message is not None:
        zh, en = r.message
        # nothing was graded: of the notes, only the warnings about unsaved cells
        warnings = [(z, e) for z, e in r.notes if z.startswith("⚠")]
        detail = f"\n{r.stderr.strip()}" if r.stderr.strip() else ""
        text = f"⚠ {zh}\n⚠ {en}{detail}\n" + "".join(f"{z}\n{e}\n" for z, e in warnings)
        detail_html = f"<pre>{_html.escape(r.stderr.strip())}</pre>" if r.stderr.strip() else ""
        html_ = _wrap(_EXTRA_CSS,
                      f'<div class="gj-error"><p>⚠ {_html.escape(zh)}</p>'
                      f'<p lang="en">⚠ {_html.escape(en)}</p>{detail_html}</div>{_notes_html(warnings)}',
                      r.exit_code)
        return {"text/plain": text, "text/html": html_}
    text = notes_text + "\n" + r.text
    if not r.html:
        body = f"<pre>{_html.escape(r.text)}</pre>"
        css = _EXTRA_CSS
    else:
        css, body = _embed(r.html)
    html_ = _wrap(css, _notes_html(r.notes) + body, r.exit_code)
    return {"text/plain": text, "text/html": html_}


def _show(result, progress):
    bundle = _bundle(result)
    if progress is not None and progress.finish(bundle):
        return
    ip = _shell()
    if ip is not None and hasattr(ip, "kernel"):
        from IPython.display import display
        display(bundle, raw=True)
    else:
        print(bundle["text/plain"])


# --------------------------------------------------------------------------------------------
# the entry points


def check(lesson, notebook=None, seed=None, lang=None, device=None, timeout=None, display=True):
    """Grade `notebook` (default: the notebook this kernel runs, as saved) for `lesson` with the
    course's `grade` binary; show the report (when `display`) and return a GradeResult."""
    global last_result
    ip = _shell()
    progress = None
    notes, saved, nb = [], None, None
    try:
        nb = _notebook_path(notebook, ip)
        root = _course_root(nb)
        binary = _grade_binary(root)
        try:
            notes, saved = _what_is_graded(nb, ip)
        except OSError:
            pass
        fd, page = tempfile.mkstemp(prefix="grade-jupyter-", suffix=".html")
        os.close(fd)
        cmd = [binary, "--root", str(root), "exercise", str(lesson), "--submission", str(nb),
               "--html", page, "--progress"]  # each probe's start on stderr, shown under the cell
        for flag, value in (("--seed", seed), ("--lang", lang), ("--device", device),
                            ("--timeout", timeout)):
            if value is not None:
                cmd += [flag, str(value)]
        title = f"grading / 评分中 {lesson} ({nb.name}{', ' + device if device else ''})"
        progress = _Progress(ip, quiet=not display)
        try:
            code, out, err, took = _run(cmd, dict(os.environ), progress, title)
            html_page = None
            if code in (0, 1):
                try:
                    html_page = Path(page).read_text(encoding="utf-8")
                except OSError:
                    html_page = None
        finally:
            try:
                os.unlink(page)
            except OSError:
                pass
        if code in (0, 1):
            result = GradeResult(lesson, code, out, html_page, nb, saved, notes,
                                 stderr=_strip_html_line(err))
        else:
            p = _could_not_grade(code, err, lesson)
            result = GradeResult(lesson, 2, f"{p.zh}\n{p.en}\n{p.detail}", None, nb, saved, notes,
                                 stderr=p.detail, message=(p.zh, p.en))
    except _Problem as p:
        result = GradeResult(lesson, 2, f"{p.zh}\n{p.en}", None, nb, saved, notes,
                             stderr=p.detail, message=(p.zh, p.en))
    except KeyboardInterrupt:
        result = GradeResult(lesson, 2, "评分已中断 / grading interrupted", None, nb, saved, notes,
                             message=("评分已中断", "grading interrupted"))
    except OSError as e:  # the binary could not start, a temp file could not be made
        result = GradeResult(lesson, 2, f"无法运行 grade / could not run grade: {e}", None, nb,
                             saved, notes, message=("无法运行 grade：", f"could not run grade: {e}"))
    last_result = result
    if display:
        _show(result, progress)
    return result


def _strip_html_line(err):
    """grade's stderr less its own progress lines (`⏳ …`) and the page's path."""
    return "".join(l for l in err.splitlines(True)
                   if not l.startswith("HTML report") and not l.startswith("⏳"))


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Usage(message)


_PARSER = _Parser(prog="%grade", add_help=False)
_PARSER.add_argument("lesson")
_PARSER.add_argument("--seed", type=int)
_PARSER.add_argument("--lang", choices=["zh", "en"])
_PARSER.add_argument("--device", choices=["cpu", "cuda", "auto"])
_PARSER.add_argument("--timeout", type=int)
_PARSER.add_argument("--notebook")

_USAGE_ZH = "用法：%grade 练习编号 [--seed N] [--lang zh|en] [--device cpu|cuda|auto] [--notebook 路径.ipynb]，例如 %grade 04-checkpoint"
_USAGE_EN = "usage: %grade LESSON [--seed N] [--lang zh|en] [--device cpu|cuda|auto] [--notebook PATH.ipynb], e.g. %grade 04-checkpoint"


def grade_magic(line):
    """%grade LESSON [--seed N] [--lang zh|en] [--device cpu|cuda|auto] [--timeout S]
    [--notebook PATH]: grade this notebook's saved file and show the report below."""
    try:
        args = _PARSER.parse_args(shlex.split(line))
    except (_Usage, ValueError) as e:
        global last_result
        last_result = GradeResult(None, 2, f"{_USAGE_ZH}\n{_USAGE_EN}\n{e}", message=(_USAGE_ZH, _USAGE_EN),
                                  stderr=str(e))
        _show(last_result, None)
        return None
    check(args.lesson, notebook=args.notebook, seed=args.seed, lang=args.lang,
          device=args.device, timeout=args.timeout)
    return None  # the report is displayed; no Out[] repeating it


def load_ipython_extension(ip):
    ip.register_magic_function(grade_magic, magic_kind="line", magic_name="grade")
    unload_ipython_extension(ip)
    ip.events.register("pre_run_cell", _pre_run_cell)
    ip.events.register("post_run_cell", _post_run_cell)


def unload_ipython_extension(ip):
    for event, hook in (("pre_run_cell", _pre_run_cell), ("post_run_cell", _post_run_cell)):
        try:
            ip.events.unregister(event, hook)
        except ValueError:
            pass
