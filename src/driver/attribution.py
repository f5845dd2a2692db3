"""The driver's attribution rule: whose call is it, and what of the grader may the submission call.

Part of grade's Python driver (driver.py loads it beside itself as `grade_attribution`, first of
its modules). It owns `attributed` (the one rule every instrument uses to tell the submission's
calls from torch's, a library's or the grader's), the grader's internal files and the entries
the submission may call (`_INTERNAL_FILES`, `_ENTRIES`), the recorder's gate (`_forged`),
tampering (`_tamper`) and the guards on `grade_lib`'s helpers (`_grader_only`, `_guard_lib`).
"""
import os
import sys

_HERE = (lambda: None).__code__.co_filename  # this file, as its code names it


# Files of the submission (set by run_job before it is imported): a call is attributed to the
# submission when `attributed()` finds one of them on the stack (see there).
SUBMISSION_FILES = set()


def _stdlib_dirs():
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if k in paths}
    dirs |= {paths[k] for k in ("stdlib", "platstdlib") if k in paths}  # unresolved, as frames name them
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs)


_STDLIB = _stdlib_dirs()


# torch's own folder (set by run_job once torch is imported): torch's frames are opaque, except
# torch.utils.benchmark, which times a statement on its caller's behalf as timeit does.
_TORCH_DIR = "\0"
_TORCH_BENCHMARK = "\0"
# torch's decorator wrapper (`torch.no_grad()(fn)` calls fn from there): it acts on its caller's
# behalf, as functools does
_TORCH_CONTEXTLIB = "\0"


_TRANSPARENT_FILES = set()  # the policy's guards (policy.py): they act on the submission's behalf


def _timeit_files():
    import timeit

    return {timeit.__file__, os.path.realpath(timeit.__file__)}


_TIMEIT_FILES = _timeit_files()


def _transparent(filename):
    """A frame that acts on its caller's behalf: the standard library (`timeit`, `statistics`,
    `functools`, …), code generated at run time (`<timeit-src>`, `<string>`,
    `exec(compile(src, "<x>", "exec"))`), and installed third-party libraries other than torch
    (numpy reading a tensor for `np.isnan(t)`), plus `torch.utils.benchmark` (torch's timeit).
    torch's other frames are opaque: what torch does for itself (dynamo timing its compile,
    the profiler's clock) is nobody's."""
    if filename.startswith("<") or filename in _TRANSPARENT_FILES or filename == _TORCH_CONTEXTLIB:
        return True
    if "-packages" not in filename:
        return filename.startswith(_STDLIB)
    if filename.startswith(_TORCH_DIR):
        return filename.startswith(_TORCH_BENCHMARK)
    return True


def _reads_for_itself(filename):
    """Is a clock read made directly by code of this file the library's own? A library frame that
    calls a clock itself stamps its own records (`logging` stamps every record it makes, asyncio
    its loop): not a read the submission made, whoever called the library. The code that reads a
    clock *for* its caller is the exception: timeit (its generated loop `<timeit-src>`), code
    generated at run time, the policy's substitutes, torch.utils.benchmark."""
    if filename.startswith("<") or filename in _TRANSPARENT_FILES or filename in _TIMEIT_FILES:
        return False
    if "-packages" not in filename:
        return filename.startswith(_STDLIB)
    return not filename.startswith(_TORCH_DIR)  # torch's frames: `attributed` says whose


def attributed(frame, files=None, course=False, behalf=False):
    """The frame of `files` (default: the submission's) that a call made in `frame` is attributed
    to, or None. The rule, the same for every instrument (clocks, `empty_cache`, CUDA events,
    read-backs, constants): walk up from `frame` through standard-library and generated frames;
    the first other frame decides. So `timeit.Timer(stmt, timer=time.perf_counter).repeat(...)`
    called by the submission reads the clock on the submission's behalf, code the submission
    built with `exec(compile(...))` is the submission's, and a read made by torch or by the
    grader is nobody's. With `course`, the course package's frames (`exercises/course`: the model)
    act on their caller's behalf too: what the device's data tells host code is the caller's
    read wherever the course's code made it (red team 9: a device tensor handed to the model as
    its dropout, read by dropout's range check), and so do torch's frames above one (the module
    call that ran the model's forward); what the model makes for itself (its position indices)
    stays the model's, so only the read-back counter asks this way. With `behalf`, torch's frames
    above a standard-library or third-party frame act on their caller's behalf as well: a device
    tensor's values handed to numpy by torch's code that the submission set going (red team 27: a
    DataLoader whose `collate_fn` was `numpy.atleast_1d`, torch's fetch calling numpy calling
    `Tensor.__array__`) are the submission's read; the read-back counter asks this way only for a
    read that no frame was found for otherwise."""
    files = SUBMISSION_FILES if files is None else files
    f = frame
    through = False  # past a frame of the course's: torch's frames above it (a module's call, a
    # checkpoint's recomputation) ran it on their caller's behalf
    while f is not None:
        name = f.f_code.co_filename
        if name in files:
            return f
        if course and name.startswith(_COURSE):
            through = True
        elif not (through and name.startswith(_TORCH_DIR)):
            if not _transparent(name):
                return None
            through = through or behalf
        f = f.f_back
    return None


_COURSE = ("\0",)  # the course package's folder, as frames may name it (`know_course`)


def in_course(frame):
    """Whether `frame` runs the course package's code (`exercises/course`: the model)."""
    return frame.f_code.co_filename.startswith(_COURSE)


def know_course(course_path):
    """The course's root (`job["course_path"]`, put on `sys.path`): its package `course/`."""
    global _COURSE
    raw = os.path.join(course_path, "course") + os.sep
    _COURSE = (raw, os.path.join(os.path.realpath(course_path), "course") + os.sep)


# The grader's own files whose functions the submission has no business calling directly: the
# driver's modules (each adds itself) and grade_lib's modules (added when it is loaded). What the submission is handed or what
# torch calls on its behalf from its frames (the clocks, the checkpoint counter, the read-back
# modes, the observed model's forward) is an *entry* (`_ENTRIES`, code objects).
_INTERNAL_FILES = {_HERE}  # and each module of the driver, as it loads
_ENTRIES = set()
_TAMPERED = set()
_ctx = None  # the run's Ctx (run_job), for `_tamper`


def know_torch(torch):
    """torch is imported (run_job): its folders, for `_transparent` and `_reads_for_itself`."""
    global _TORCH_DIR, _TORCH_BENCHMARK, _TORCH_CONTEXTLIB
    _TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
    _TORCH_BENCHMARK = os.path.join(_TORCH_DIR, "utils", "benchmark") + os.sep
    _TORCH_CONTEXTLIB = os.path.join(_TORCH_DIR, "utils", "_contextlib.py")


def _entry(fn):
    """Mark `fn` as an entry: the submission may call it (see `_INTERNAL_FILES`)."""
    _ENTRIES.add(fn.__code__)
    return fn


# How deep the grader is in work of its own that runs none of the submission's code (a sealed
# body, `lib.sealed`; the recording of its own stamps): records made there are the grader's,
# with no walk up the stack. The walk's length is the submission's to choose (red team 21: a
# handed-over call made from 800 frames of `contextlib`: 11 ms of walking per record, booked as
# the call's work or as the grader's recording, so a 1.5 ms step read 14 ms).
_GRANTED = [0]


def _forged():
    """Is a record being made on the submission's own initiative? Walking up from the recorder
    (`_Channel._send`'s caller), the last frame before the first submission frame that is not a
    transparent one (`_transparent`) is the function the submission called. A record is the
    submission's forgery when that function is the grader's own internal code (`_INTERNAL_FILES`)
    and not an entry: `ctx.event(...)`, `observer.forward(...)`, `channel.record(...)` called by
    the submission, however it got hold of them. Records made below torch (a hook that torch calls
    during the submission's forward), below an entry (a clock read) or below a scenario's function
    handed to the submission (`step()`, `sync()`) are the grader's. Returns the called function's
    name, or None."""
    if not SUBMISSION_FILES or _GRANTED[0]:
        return None
    f = sys._getframe(1)
    called = f.f_code
    f = f.f_back
    while f is not None:
        code = f.f_code
        name = code.co_filename
        if name in SUBMISSION_FILES:
            if called.co_filename in _INTERNAL_FILES and called not in _ENTRIES:
                return getattr(called, "co_qualname", called.co_name)
            return None
        if not _transparent(name):
            called = code
        f = f.f_back
    return None


def _tamper(what):
    """The submission reached into the grader (`what`): sent at once as `integrity.seen.<what>`
    (so the run's observations are not trusted) and kept for `integrity.tampered`."""
    ctx = _ctx
    if ctx is None or what in _TAMPERED:
        return
    _TAMPERED.add(what)
    if ctx.watch is not None:
        ctx.watch.seen.add(what)
    ctx._channel.record_ungated("metric", f"integrity.seen.{what}", ctx.current_probe or "?")


def _grader_only(fn, label):
    """`fn` (a helper of grade_lib) that records tampering when the submission calls it itself."""

    def guarded(*args, **kwargs):
        if _from_submission(2):
            _tamper(f"{label} called by the submission (a grader helper)")
        return fn(*args, **kwargs)

    guarded.__name__, guarded.__qualname__, guarded.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return guarded


def _lib_modules(lib):
    """`grade_lib` and its modules (`grade_lib.memory`, …), by name."""
    prefix = lib.__name__ + "."
    return {name: mod for name, mod in list(sys.modules.items()) if name == lib.__name__ or name.startswith(prefix)}


def _guard_lib(lib):
    """The library's module-level helpers (in the package and each of its modules) become
    grader-only (`_grader_only`); its `ENTRY_POINTS` (what torch or the submission may call: the
    observed forward, the read-back modes) are entries."""
    import types

    modules = _lib_modules(lib)
    files = {mod.__file__ for mod in modules.values()}
    _INTERNAL_FILES.update(files)
    for fn in getattr(lib, "ENTRY_POINTS", ()):
        _entry(fn)
    for mod in modules.values():
        for name, fn in list(vars(mod).items()):
            if (
                not name.startswith("_")
                and isinstance(fn, types.FunctionType)
                and fn.__code__.co_filename in files
                and fn.__code__ not in _ENTRIES
            ):
                setattr(mod, name, _grader_only(fn, f"grade_lib.{name}"))


def _from_submission(depth=2):
    """Was the function `depth` frames up called on the submission's behalf (`attributed`)?"""
    try:
        return attributed(sys._getframe(depth)) is not None
    except ValueError:
        return False


def _past(name):
    """A frame `_from_submission_past_torch` looks past: torch's, the grader's own modules' (its
    wrappers of torch's functions) and code generated at run time."""
    return name.startswith(_TORCH_DIR) or name.startswith("<") or name in _INTERNAL_FILES


def _from_submission_past_torch(depth=2):
    """As `_from_submission`, past torch's own frames first (as lib.HostReads attributes a
    read-back): a counted call the submission makes through a torch wrapper
    (`torch.no_grad()(torch.cuda.empty_cache)()`) is still its own. For what hiding would help a
    submission (a call counted against it); clocks keep the plain rule (torch's own clock reads,
    dynamo timing its compile, are nobody's). Past the grader's own wrappers of torch's functions
    too (the counting `checkpoint`, the `torch._dynamo` stand-in) and code generated at run time:
    red team 26 slept inside `checkpoint(time.sleep, 0.03)`, whose frames run through both."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return False
    # torch's, the grader's wrappers', generated, standard-library and third-party frames in any
    # order (red team 46: `empty_cache` as an ExitStack callback that torch's checkpoint exits:
    # the standard library's frame first, then torch's, then the submission's)
    while f is not None:
        name = f.f_code.co_filename
        if name in SUBMISSION_FILES:
            return True
        if not (_past(name) or _transparent(name)):
            return False
        f = f.f_back
    return False


