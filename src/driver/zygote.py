"""grade's warm interpreter for `grade batch`, `grade check` and `grade watch` (a fork server):
imports torch once, then forks one child per submission. Embedded in the `grade` binary
(src/runner/zygote.rs), which starts one per kind of run.

    python -I -B zygote.py DRIVER_PY [--compile]   (fd 3: a SOCK_SEQPACKET socket to the grader)

The grader starts it inside the batch's sandbox (Landlock: read the Python environment, the
course, the batch's staging folder; write only the staging folder; no network; no capabilities;
a task limit). Nothing runs here but imports: no torch op, no thread pool, no CUDA context, so a
fork is safe. Per request (one JSON message with three descriptors: stdout, stderr, results) the
child:

1. takes its own process group (the grader kills it whole) and the three descriptors as fd 1, 2
   and 3, stdin from /dev/null, and closes every other descriptor (the socket to this server
   included: a submission cannot ask for more children);
2. sets its resource limits and restricts itself with a second Landlock layer: read only what
   its run needs, write only its own temporary folder, no signals or abstract sockets outside
   itself (so children cannot see or signal one another or this server);
3. runs the driver (driver.run_job) exactly as a fresh `python driver.py` would.

Messages to the grader: {"started": id, "pid": p} after each fork, {"exited": id, "status": s}
(the raw wait status) when a child ends, {"error": id, "why": ...} when a fork failed.
"""
import ctypes
import json
import os
import select
import signal
import socket
import sys

# What torch imports lazily on first use, paid once here instead of in every child: the first
# non-reentrant checkpoint() pulls in dynamo (sympy, ~900 modules, ~0.9 s); lesson 02 the
# profiler.
WARM_MODULES = (
    "torch.utils.checkpoint",
    "torch._dynamo",
    "torch.profiler",
    "torch.testing",
    "RestrictedPython.transformer",  # the course's Python (policy.py): compiled per run, imported once
)
# With `--compile` (a zygote for an exercise with a compile cache, lesson 05): what a child's
# first torch.compile imports (~800 modules, 0.44 s of every grading). Inductor reads its cache
# folder from the environment when it uses it (`cache_dir()`), so each child's own
# TORCHINDUCTOR_CACHE_DIR holds; the one path fixed at import, the precompiled headers'
# (`codecache._HEADER_DIR`, from the temporary folder), each child makes again from its own
# (`_child`), and no lru-cached path is computed by an import. What inductor computes once per
# process is computed here too (`_warm_compiler`). Only these zygotes: other
# lessons' children never carry the compiler (a larger heap makes every full collection slower).
COMPILE_MODULES = (
    "torch._inductor.compile_fx",
    "torch._inductor.codecache",
    "torch._inductor.fx_passes.post_grad",
    "torch._inductor.fx_passes.joint_graph",
    "torch._inductor.codegen.cpp",
    "torch._inductor.codegen.cpp_wrapper_cpu",
    "torch._inductor.cpp_builder",
)

# -- Landlock (linux/landlock.h), for the child's own layer -----------------------------------
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # same on x86_64 and arm64
RULE_PATH_BENEATH = 1
READ = (1 << 0) | (1 << 2) | (1 << 3)  # EXECUTE, READ_FILE, READ_DIR
FS_BITS = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16, 6: 16, 7: 16}  # rights per ABI: bits below this
FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)  # exec, write, read, truncate, ioctl
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock(read, write):
    """A Landlock layer: `read` read-only, `write` read-write, nothing else; signals and abstract
    sockets scoped to this process and its children. Returns the ABI used (0: none)."""
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi <= 0:
        return 0
    abi = min(abi, 7)
    all_fs = (1 << FS_BITS[abi]) - 1
    attr = _RulesetAttr(all_fs, 0, (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 8 if abi < 4 else 16
    fd = syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    for paths, rights in ((read, READ), (write, all_fs)):
        for path in paths:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a path that does not exist needs no rule
            allowed = rights & all_fs
            if not os.path.isdir(path):  # a file takes file rights only
                allowed &= FILE_RIGHTS
            rule = _PathBeneath(allowed, pfd)
            r = syscall(SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(RULE_PATH_BENEATH),
                        ctypes.byref(rule), ctypes.c_uint32(0))
            os.close(pfd)
            if r != 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    if syscall(SYS_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(fd)
    return abi


def _warm_compiler(cache):
    """What inductor computes once per process and every child would compute again, computed here
    (`--compile`): the cache keys that hash torch's and triton's installed files (`torch_key`,
    `triton_key`: ~0.4 s a child) and, given a compile cache folder it may write
    (`--compile-cache DIR`: the shared one for the course's own runs, a copy of it for students'),
    the CPU's vector ISA (`pick_vec_isa`: a probe library per ISA, built there unless it is, each
    loaded by a fresh `python -c`: ~0.8 s of CPU a child, ~6 s where none was built). The
    environment is then as it was (inductor's `cache_dir()` writes the folder into it). Any
    failure leaves the work to each child, as before."""
    try:
        codecache = sys.modules["torch._inductor.codecache"]
        codecache.torch_key()
        codecache.triton_key()
    except Exception:
        return
    if cache is None:
        return
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    try:
        from torch._inductor import cpu_vec_isa

        bool(cpu_vec_isa.pick_vec_isa())
    except Exception:
        pass
    finally:
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


def _child(req, fds, driver):
    """In the forked child: never returns."""
    try:
        os.setpgid(0, 0)
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        for i, fd in enumerate(fds):
            os.dup2(fd, i + 1)  # stdout, stderr, results (dup2 clears close-on-exec)
        os.closerange(4, 1 << 16)  # the socket to the server, the passed copies, everything else
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        for name, value in (("data", resource.RLIMIT_DATA), ("fsize", resource.RLIMIT_FSIZE)):
            if req["limits"].get(name) is not None:
                resource.setrlimit(value, (req["limits"][name], req["limits"][name]))
        if req.get("landlock"):
            _landlock(req["read"], req["write"])
        os.chdir(req["dir"])
        os.environ.update(req["env"])
        import tempfile

        tempfile.tempdir = req["dir"]
        # the one path inductor's import fixes from the temporary folder (`--compile`): as the
        # child's own import would have made it (a submission that compiles at import, before
        # lesson 05's scenario moves it into the compile cache, writes its header there)
        codecache = sys.modules.get("torch._inductor.codecache")
        if codecache is not None and hasattr(codecache, "_HEADER_DIR"):
            codecache._HEADER_DIR = os.path.join(codecache.default_cache_dir(), "precompiled_headers")
            codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
        sys.argv = ["driver.py", req["job"]]
        sys.modules["__main__"] = driver  # as in a fresh `python driver.py`
        driver.run_job(req["job"], req["nonce"])
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(3)


def main():
    import importlib
    import importlib.util

    spec = importlib.util.spec_from_file_location("grade_driver", sys.argv[1])
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    try:  # the grader's own environment; what every child would import anyway
        import numpy  # noqa: F401
        import safetensors.torch  # noqa: F401
        import torch
    except ImportError as e:
        print(f"grade zygote: {e}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(driver.ENV_BROKEN)  # as a fresh driver would
    torch.set_num_threads(1)
    warm = WARM_MODULES + (COMPILE_MODULES if "--compile" in sys.argv[2:] else ())
    for name in warm:  # imports only: no op runs, no thread starts
        try:
            importlib.import_module(name)
        except Exception:
            pass
    if "--compile" in sys.argv[2:]:
        _warm_compiler(sys.argv[sys.argv.index("--compile-cache") + 1] if "--compile-cache" in sys.argv else None)
    sock = socket.socket(fileno=3)
    sock.setblocking(True)
    children = {}  # pidfd -> (pid, request id): a pidfd is readable once its process ended
    sock.send(json.dumps({"ready": True}).encode())

    def send(msg):
        sock.send(json.dumps(msg).encode())

    while True:
        r, _, _ = select.select([sock, *children], [], [])
        for pidfd in [fd for fd in r if fd in children]:
            pid, rid = children.pop(pidfd)
            _, status = os.waitpid(pid, 0)
            os.close(pidfd)
            send({"exited": rid, "status": status})
        if sock not in r:
            continue
        msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 3)
        if not msg:  # the grader closed the socket: the batch is over
            for pid, _ in children.values():
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            os._exit(0)
        req = json.loads(msg)
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            send({"error": req["id"], "why": str(e)})
            continue
        if pid == 0:
            _child(req, fds, driver)
        try:
            os.setpgid(pid, pid)  # also here: the grader may signal the group at once
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        children[os.pidfd_open(pid)] = (pid, req["id"])
        send({"started": req["id"], "pid": pid})


if __name__ == "__main__":
    main()
