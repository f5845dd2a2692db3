"""grade's static audit of a submission's source, before it runs (Python's `ast`; nothing of the
submission is executed). Embedded in the `grade` binary beside driver.py; the driver runs it
before the import and sends the findings at once, so they are reported even if the run crashes.

A submission may not inspect or modify the grader: it runs in the grader's process, so these
primitives are how a cheat reaches the grader's answers and instruments. Each use is a finding
`{line, col, code, zh, en}`; any finding fails the lesson's integrity criterion. What is flagged:

  gc          gc.get_objects / get_referrers / get_referents / garbage (gc.collect() is fine)
  frames      sys._getframe, sys._current_frames, inspect.currentframe / stack / trace / …,
              traceback.walk_stack / walk_tb, and the attributes f_back, f_locals, f_globals,
              tb_frame, gi_frame, cr_frame, ag_frame
  internals   __closure__, __globals__, __code__, __defaults__, __kwdefaults__, __self__,
              __func__, __wrapped__, __subclasses__, __bases__, __mro__, cell_contents,
              __dict__ (except on self/cls);
              these names (and the frame attributes) as strings too, also when built from
              literals (`"__clo" + "sure__"` for getattr or operator.attrgetter); inspect's
              getmodule / getfile / getsource / unwrap (an object's module: the grader's)
  modules     sys.modules, sys.meta_path, sys.path_hooks, settrace/setprofile, addaudithook;
              importing the grader's modules (grade_lib, grade_scenario, grade_baseline, driver, …)
  native      ctypes, _ctypes, cffi; /proc/… and /dev/fd/… paths; os.write/dup/dup2/fdopen/…
  dynamic     exec, eval, compile of strings; __import__ / importlib.import_module with a computed
              name; builtins / __builtins__; getattr of a module with a computed name; pickle/marshal
              loads; building functions or code objects by hand
  instruments torch's mode stacks (torch.overrides._get_current_function_mode_stack,
              torch.utils._python_dispatch._get_current_dispatch_mode(_stack), torch._C's stack
              getters and poppers, its guards that run below the modes) and the saved-tensors
              hooks stack (torch._C._autograd's top/pop/push): the grader's counters are modes
              and hooks there, so reading the stack is how code finds them, or tells a counted
              call from a timed one, and popping it is how code hides from them; the hooks
              registered on a module or tensor (`_forward_hooks`, …), where the grader's
              observers are
  patching    assigning, deleting or setattr-ing an attribute (or item) of a module or class the
              submission did not define (`time.perf_counter = …`, `torch.Tensor.item = …`,
              `setattr(time, "perf_counter", …)`, `type(x).f = …`)

`allow` (exercise.yaml `audit_allow:`, plus `ALWAYS_ALLOWED`) lists dotted prefixes a lesson's
contract truly needs to assign (e.g. `torch._dynamo.config`).
"""
import ast

ALWAYS_ALLOWED = ("torch.backends.", "os.environ")

GRADER_MODULES = {"grade_lib", "grade_scenario", "grade_baseline", "grade_audit", "driver", "zygote",
                  "__main__", "lib", "scenario"}
GC_HARMLESS = {"collect", "enable", "disable", "isenabled", "get_count", "get_stats",
               "set_threshold", "get_threshold", "freeze", "unfreeze", "get_freeze_count"}
FRAME_FUNCS = {
    "sys": {"_getframe", "_current_frames", "_current_exceptions", "settrace", "setprofile",
            "gettrace", "getprofile", "modules", "meta_path", "path_hooks", "path_importer_cache",
            "addaudithook", "_getframemodulename", "call_tracing"},
    "inspect": {"currentframe", "stack", "trace", "getouterframes", "getinnerframes",
                "getframeinfo", "getclosurevars", "getmembers", "getmembers_static", "getattr_static",
                # an object's module or source file: the grader's module from an object it handed over
                "getmodule", "getfile", "getsourcefile", "getabsfile", "getsource", "getsourcelines",
                "getcomments", "unwrap"},
    "traceback": {"walk_stack", "walk_tb"},
    "threading": {"settrace", "setprofile", "settrace_all_threads", "setprofile_all_threads"},
    "os": {"write", "writev", "pwrite", "pwritev", "dup", "dup2", "fdopen", "sendfile", "ftruncate"},
    # torch's mode stacks, where the grader's counters live (code "instruments")
    "torch.overrides": {"_get_current_function_mode_stack", "_get_current_function_mode", "_pop_mode",
                        "_pop_mode_temporarily", "_TorchFunctionModeInfo"},
    "torch.utils._python_dispatch": {"_get_current_dispatch_mode", "_get_current_dispatch_mode_stack",
                                     "_pop_mode", "_pop_mode_temporarily", "_disable_current_modes"},
    "torch._C": {"_len_torch_function_stack", "_get_function_stack_at", "_pop_torch_function_stack",
                 "_is_torch_function_mode_enabled", "_len_torch_dispatch_stack", "_get_dispatch_stack_at",
                 "_pop_torch_dispatch_stack", "_get_dispatch_mode", "_unset_dispatch_mode",
                 # guards that run code below the dispatch modes, past the grader's
                 "_DisableTorchDispatch", "_ExcludeDispatchKeyGuard", "ExcludeDispatchKeyGuard",
                 "_SetExcludeDispatchKeyGuard", "_ForceDispatchKeyGuard",
                 "_dispatch_tls_set_dispatch_key_excluded"},
    # the saved-tensors hooks stack, where the grader's saved-bytes hooks are
    "torch._C._autograd": {"_top_saved_tensors_default_hooks", "_pop_saved_tensors_default_hooks",
                           "_push_saved_tensors_default_hooks"},
}
INSTRUMENT_MODULES = {"torch.overrides", "torch.utils._python_dispatch", "torch._C", "torch._C._autograd"}
MODULE_NAMES = {"modules", "meta_path", "path_hooks", "path_importer_cache"}


def _func_code(mod, attr):
    """The finding code of `mod.attr` in FRAME_FUNCS."""
    if mod == "os":
        return "native"
    if mod in INSTRUMENT_MODULES:
        return "instruments"
    if mod == "inspect" and attr in INSPECT_MODULE_FUNCS:
        return "modules"
    if mod == "inspect" and attr == "unwrap":
        return "internals"
    return "modules" if attr in MODULE_NAMES else "frames"


INSPECT_MODULE_FUNCS = {"getmodule", "getfile", "getsourcefile", "getabsfile", "getsource",
                        "getsourcelines", "getcomments"}
FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame", "cr_frame",
               "ag_frame", "tb_next"}
DUNDER_ATTRS = {"__closure__", "__globals__", "__code__", "__defaults__", "__kwdefaults__",
                "__self__", "__func__", "__wrapped__", "__subclasses__", "cell_contents",
                "__builtins__", "__bases__", "__base__", "__mro__"}
# Where torch keeps the hooks registered on a module or tensor: the grader's instruments are hooks
# there (calling one forges what it records), so reading them is reaching into the grader.
HOOK_ATTRS = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
              "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
              "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
              "_global_backward_pre_hooks", "_global_forward_hooks_always_called",
              "_post_accumulate_grad_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
              "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"}
# Names read only by code that reaches into an object (as attributes, or as strings handed to
# getattr / operator.attrgetter / object.__getattribute__, folded when built from literals).
INTERNAL_NAMES = FRAME_ATTRS | DUNDER_ATTRS | HOOK_ATTRS
NATIVE_MODULES = {"ctypes", "_ctypes", "cffi", "builtins", "gc_", "_testcapi", "_posixsubprocess"}

WHY = {
    "gc": ("用 gc 遍历进程里的对象（包括评分器的对象）", "walks the process's objects with gc (the grader's included)"),
    "frames": ("读取调用栈帧或跟踪钩子（会看到评分器的局部变量）", "reads stack frames or trace hooks (the grader's locals with them)"),
    "internals": ("读取函数或对象的内部（闭包、全局变量、默认值、被包装的原函数）", "reads a function's or object's internals (closure, globals, defaults, the wrapped original)"),
    "modules": ("访问 sys.modules 或评分器的模块", "reaches sys.modules or the grader's own modules"),
    "native": ("使用 ctypes/原生内存、/proc 或直接写文件描述符", "uses ctypes/native memory, /proc or raw file-descriptor writes"),
    "dynamic": ("动态执行或导入代码（exec/eval/compile、计算出的模块名、builtins）", "runs or imports code dynamically (exec/eval/compile, a computed module name, builtins)"),
    "instruments": ("读取 torch 的模式栈（评分器的计数器就在那里）", "reads torch's mode stacks (where the grader's counters are)"),
    "patching": ("修改不是自己定义的模块或类的属性（猴子补丁）", "changes an attribute of a module or class it did not define (monkey-patching)"),
}


def _bound_names(t):
    """The names an assignment target binds (`a`, `a, (b, *c)`), not the bases of `a.x` or `a[i]`."""
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _bound_names(e)]
    if isinstance(t, ast.Starred):
        return _bound_names(t.value)
    return []


def _fold(node):
    """The string an expression made only of string literals evaluates to (`"__clo" + "sure__"`,
    f-strings of literals, `"".join([...literals])`), or None."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _fold(node.left), _fold(node.right)
        return a + b if a is not None and b is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [_fold(v.value) if isinstance(v, ast.FormattedValue) and not v.format_spec else _fold(v)
                 for v in node.values]
        return "".join(parts) if None not in parts else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple))):
        parts = [_fold(e) for e in node.args[0].elts]
        return node.func.value.value.join(parts) if None not in parts else None
    return None


class _Audit(ast.NodeVisitor):
    def __init__(self, allow):
        self.allow = tuple(allow) + ALWAYS_ALLOWED
        self.imported = {}  # local name -> dotted module path (or module.attr)
        self.rebound = set()  # names the file binds to something other than a module path
        self.findings = []

    # -- helpers ----------------------------------------------------------------------------------
    def flag(self, node, code, what):
        zh, en = WHY[code]
        self.findings.append({
            "line": getattr(node, "lineno", 0),
            "col": getattr(node, "col_offset", 0) + 1,
            "code": code,
            "what": what,
            "zh": f"`{what}`：{zh}",
            "en": f"`{what}`: {en}",
        })

    def dotted(self, node):
        """`a.b.c` with `a` resolved through the imports, or None when the root is no name."""
        parts = []
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            parts.append(node.attr if isinstance(node, ast.Attribute) else "[]")
            node = node.value
        if isinstance(node, ast.Name):
            root = self.imported.get(node.id)
            parts.append(root if root is not None else "<local>." + node.id)
            return ".".join(reversed(parts))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("type", "__import__", "getattr", "vars"):
            parts.append("<dynamic>")
            return ".".join(reversed(parts))
        return None

    def foreign(self, node):
        """Is `node` (an assignment's object) a module or class the submission did not define?"""
        path = self.dotted(node)
        if path is None:
            return None
        if path.startswith("<local>."):
            return None
        if path.startswith(self.allow):
            return None
        return path

    def check_import(self, node, module):
        top = module.split(".")[0]
        if top in GRADER_MODULES or module in GRADER_MODULES:
            self.flag(node, "modules", f"import {module}")
        elif top in NATIVE_MODULES:
            self.flag(node, "dynamic" if top == "builtins" else "native", f"import {module}")

    # -- imports ----------------------------------------------------------------------------------
    def visit_Import(self, node):
        for a in node.names:
            self.check_import(node, a.name)
            if a.asname:
                self.imported[a.asname] = a.name
            else:
                self.imported[a.name.split(".")[0]] = a.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        module = ("." * node.level) + (node.module or "")
        if node.level == 0 and node.module:
            self.check_import(node, node.module)
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if node.module == "gc" and a.name not in GC_HARMLESS:
                    self.flag(node, "gc", f"from gc import {a.name}")
                elif node.module in FRAME_FUNCS and a.name in FRAME_FUNCS[node.module]:
                    self.flag(node, _func_code(node.module, a.name), f"from {node.module} import {a.name}")
                elif node.module == "importlib" and a.name == "import_module":
                    pass  # judged where it is called
                self.imported[a.asname or a.name] = full
        elif node.level:
            self.flag(node, "modules", f"from {module} import …")
        self.generic_visit(node)

    # -- reads --------------------------------------------------------------------------------------
    def visit_Attribute(self, node):
        path = self.dotted(node)
        if path:
            mod, _, attr = path.rpartition(".")
            if mod == "gc" and attr not in GC_HARMLESS:
                self.flag(node, "gc", path)
            elif mod in FRAME_FUNCS and attr in FRAME_FUNCS[mod]:
                self.flag(node, _func_code(mod, attr), path)
        if node.attr in FRAME_ATTRS:
            self.flag(node, "frames", "." + node.attr)
        elif node.attr in HOOK_ATTRS:
            self.flag(node, "instruments", "." + node.attr)
        elif node.attr in DUNDER_ATTRS:
            self.flag(node, "dynamic" if node.attr == "__builtins__" else "internals", "." + node.attr)
        elif node.attr == "__dict__" and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            self.flag(node, "internals", ".__dict__")
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id == "__builtins__":
            self.flag(node, "dynamic", "__builtins__")
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            self.check_string(node, node.value)
        self.generic_visit(node)

    def check_string(self, node, value):
        """A string literal (or one folded from literals) naming a way into the grader."""
        if value.startswith(("/proc/", "/dev/fd", "/dev/mem")):
            self.flag(node, "native", value[:40])
        elif value in HOOK_ATTRS:
            self.flag(node, "instruments", repr(value))
        elif value in INTERNAL_NAMES:
            self.flag(node, "frames" if value in FRAME_ATTRS else "internals", repr(value))

    def visit_BinOp(self, node):
        self.check_folded(node)
        self.generic_visit(node)

    def visit_JoinedStr(self, node):
        self.check_folded(node)
        self.generic_visit(node)

    def check_folded(self, node):
        value = _fold(node)
        if value is not None:
            self.check_string(node, value)

    # -- calls ----------------------------------------------------------------------------------
    def visit_Call(self, node):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "join":
            self.check_folded(node)
        f = node.func
        name = f.id if isinstance(f, ast.Name) else None
        literal = bool(node.args) and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
        if name in ("exec", "eval", "compile") and name not in self.imported:
            self.flag(node, "dynamic", f"{name}(…)")
        elif name in ("globals", "locals", "vars") and name not in self.imported and name == "vars" and node.args:
            target = self.foreign(node.args[0])
            if target:
                self.flag(node, "internals", f"vars({target})")
        path = self.dotted(f) if isinstance(f, ast.Attribute) else (self.imported.get(name) if name else None)
        if name == "__import__" or path in ("importlib.import_module", "importlib.__import__", "importlib.reload"):
            if not literal:
                self.flag(node, "dynamic", f"{name or path}(<computed name>)")
            else:
                self.check_import(node, node.args[0].value)
        if path in ("builtins.exec", "builtins.eval", "builtins.compile", "builtins.__import__",
                    "pickle.loads", "pickle.load", "marshal.loads", "marshal.load",
                    "types.FunctionType", "types.CodeType", "types.CellType"):
            self.flag(node, "dynamic", path)
        if name in ("setattr", "delattr") and node.args:
            target = self.foreign(node.args[0])
            if target is not None:
                self.flag(node, "patching", f"{name}({target}, …)")
        if name == "getattr" and len(node.args) >= 2:
            obj = self.dotted(node.args[0])
            attr = node.args[1]
            a = _fold(attr)
            if a is not None:
                if a == "__dict__":  # the other internal names are flagged as strings (check_string)
                    self.flag(node, "internals", f"getattr(…, {a!r})")
                elif obj and obj in FRAME_FUNCS and a in FRAME_FUNCS[obj]:
                    self.flag(node, _func_code(obj, a), f"getattr({obj}, {a!r})")
                elif obj == "gc" and a not in GC_HARMLESS:
                    self.flag(node, "gc", f"getattr(gc, {a!r})")
            elif obj and not obj.startswith("<local>."):
                self.flag(node, "dynamic", f"getattr({obj}, <computed name>)")
        if isinstance(f, ast.Attribute) and f.attr in ("__setattr__", "__delattr__", "__setitem__"):
            owner = self.dotted(f.value)
            if owner in ("<local>.object", "<local>.type") or (owner and not owner.startswith("<local>.")):
                self.flag(node, "patching", f"{owner or '…'}.{f.attr}(…)")
        self.generic_visit(node)

    # -- writes ---------------------------------------------------------------------------------
    def _target(self, t, verb):
        if isinstance(t, ast.Attribute):
            owner = self.foreign(t.value)
            if owner is not None:
                self.flag(t, "patching", f"{verb}{owner}.{t.attr}")
        elif isinstance(t, ast.Subscript):
            owner = self.foreign(t.value)
            if owner is not None:
                self.flag(t, "patching", f"{verb}{owner}[…]")
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self._target(e, verb)
        elif isinstance(t, ast.Starred):
            self._target(t.value, verb)

    def visit_Assign(self, node):
        for t in node.targets:
            self._target(t, "")
        # `tc = torch.compiler`: a name bound to a module (or an attribute of one) is that path,
        # so `tc.is_compiling = …` is patching torch.compiler. Not a class (`opt = torch.optim.SGD`,
        # later called) and not a name the file also binds to anything else.
        path = self.dotted(node.value) if isinstance(node.value, (ast.Name, ast.Attribute)) else None
        if path and not path.startswith(("<local>.", "<dynamic>")) and path.rpartition(".")[2].lstrip("_")[:1].islower():
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id not in self.rebound:
                    self.imported[t.id] = path
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._target(node.target, "")
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._target(node.target, "")
        self.generic_visit(node)

    def visit_Delete(self, node):
        for t in node.targets:
            self._target(t, "del ")
        self.generic_visit(node)

    def visit_Global(self, node):
        self.generic_visit(node)


def audit(source, filename="submission.py", allow=()):
    """The findings for `source`, sorted by line; `[]` when clean or when it does not parse (the
    import reports a syntax error by itself)."""
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    a = _Audit(allow)
    # imports first, wherever they are, so a use above its import is still resolved
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for al in node.names:
                a.imported[al.asname or al.name.split(".")[0]] = al.name if al.asname else al.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for al in node.names:
                a.imported[al.asname or al.name] = f"{node.module}.{al.name}"
    for node in ast.walk(tree):  # names bound to anything but a name or attribute path
        targets = []
        if isinstance(node, ast.Assign) and not isinstance(node.value, (ast.Name, ast.Attribute)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
            targets = [getattr(node, "target", None)] + [i.optional_vars for i in getattr(node, "items", ())]
        elif isinstance(node, ast.arg):
            a.rebound.add(node.arg)
        for t in targets:
            a.rebound.update(_bound_names(t))
    try:
        a.visit(tree)
    except RecursionError:
        a.flag(tree, "dynamic", "source nested too deeply to audit")
    seen, out = set(), []
    for f in sorted(a.findings, key=lambda f: (f["line"], f["col"])):
        key = (f["line"], f["what"])
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


if __name__ == "__main__":  # python audit.py [--allow A,B] FILE...: the findings, for maintainers
    import sys

    args, allow = sys.argv[1:], ()
    if args[:1] == ["--allow"]:
        allow, args = tuple(a for a in args[1].split(",") if a), args[2:]
    for path in args:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for f in audit(fh.read(), path, allow):
                print(f"{path}:{f['line']}:{f['col']}: {f['code']}: {f['en']}")
    sys.exit(0)
