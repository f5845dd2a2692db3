"""grade's course policy: a submission is written in the course's Python, deny by default.

Embedded in the `grade` binary beside driver.py. The submission's source (a notebook's code cells
arrive as one module) is compiled with RestrictedPython under `CoursePolicy`, and runs with the
guards below as its only way to reach attributes, imports and builtins:

* every attribute read `a.b` becomes `_getattr_(a, "b")`, every write `a.b = v` / `del a.b`
  becomes `_write_(a, "b").b = v`, so a name computed at run time (`getattr(x, name)`,
  `operator.attrgetter(name)`, a `{0.name}` format field) is judged exactly like a literal one;
* `import` goes through `_import`: only the modules the course allows (`course.yaml`'s
  `policy.modules:`, plus the lesson's own `policy:` in `exercise.yaml`), and of each only the
  names it allows (`"*"`: every public name, `"!name"`: except that one);
* the builtins are a short list (no `eval`/`exec`/`compile`/`vars`/`__import__`/`open` of
  /proc…); `class` statements go through `_build_class`, which allows the bases of
  `policy.bases:` (and the submission's own classes) and no metaclass.

The one rule for what is private: a name beginning with `_` (and every dunder but a few plain
ones: `__name__`, `__doc__`, `__class__`, …) may be read or written only on what the submission
made itself — its own classes, their instances, its own functions. Frames, code objects,
tracebacks and cells are never handed out, whatever the route.

A refusal found by reading the source is a finding before anything runs (the submission is then
not imported: the policy is a gate, like a syntax error). A refusal at run time raises
`PolicyRefusal` (a BaseException: `except Exception` does not swallow it) and is reported at once
through `report` (set by the driver), so catching it hides nothing.
"""
import _string
import ast
import builtins as _builtins_module
import functools
import operator
import os
import string
import sys
import types

from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence
from RestrictedPython.transformer import IOPERATOR_TO_STR, INSPECT_ATTRIBUTES, RestrictingNodeTransformer

_real_getattr, _real_setattr, _real_delattr = getattr, setattr, delattr
_real_import = _builtins_module.__import__
_real_build_class = _builtins_module.__build_class__
_real_open = _builtins_module.open
_ModuleType, _FunctionType, _MethodType = types.ModuleType, types.FunctionType, types.MethodType

# Dunders readable on anything (names and documentation, the type of an object).
READABLE_DUNDERS = frozenset({"__name__", "__qualname__", "__doc__", "__class__", "__module__"})
# The dunder methods and attributes a class normally defines: allowed in a class body, and readable
# on the submission's own objects (`super().__init__()`, `self.__dict__` is not among them).
CLASS_DUNDERS = frozenset("""
__init__ __post_init__ __call__ __enter__ __exit__ __iter__ __next__ __reversed__ __len__
__getitem__ __setitem__ __delitem__ __contains__ __missing__ __repr__ __str__ __format__ __hash__
__bool__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __add__ __radd__ __iadd__ __sub__ __rsub__
__isub__ __mul__ __rmul__ __imul__ __truediv__ __rtruediv__ __itruediv__ __floordiv__
__rfloordiv__ __ifloordiv__ __mod__ __rmod__ __pow__ __rpow__ __matmul__ __rmatmul__ __neg__
__pos__ __abs__ __float__ __int__ __index__ __round__ __slots__ __doc__
__module__ __qualname__ __match_args__ __all__
""".split())
# The protocol dunders that only do what the syntax does (`with x:`, `for`, `len(x)`, `x[k]`,
# `x(...)`, comparisons, arithmetic, `repr`): readable on any object, so a careful
# `hooks.__enter__()` on a torch context manager is no refusal. Not among them: what rewrites an
# object (`__init__`, `__setattr__`, `__setitem__`), what reaches its insides (`__dict__`,
# `__reduce__`, `__getstate__`, `__copy__`) or its class's machinery.
PROTOCOL_DUNDERS = frozenset("""
__enter__ __exit__ __iter__ __next__ __reversed__ __len__ __getitem__ __contains__ __call__
__bool__ __float__ __int__ __index__ __round__ __repr__ __str__ __format__ __hash__ __eq__ __ne__
__lt__ __le__ __gt__ __ge__ __add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__
__rtruediv__ __floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __matmul__ __rmatmul__
__neg__ __pos__ __abs__
""".split())
# Module-level dunder names a submission may read or bind (`__name__`, `__file__` read only:
# bound in a class body they would make an object pass for a module of another name).
MODULE_DUNDERS = frozenset({"__name__", "__file__", "__doc__", "__all__"})
_READ_ONLY_NAMES = frozenset({"__name__", "__file__", "__module__", "__qualname__"})
# Builtins a submission may call by name. What is not here does not exist for it; those of
# `REFUSED_BUILTINS` are refused where the source names them, with what to use instead.
SAFE_BUILTINS = """
abs all any ascii bin bool bytearray bytes callable chr classmethod complex dict dir divmod
enumerate filter float format frozenset hash hex id int isinstance issubclass iter len list map
max min next object oct ord pow print property range repr reversed round set slice sorted
staticmethod str sum super tuple zip NotImplemented Ellipsis
""".split()
REFUSED_BUILTINS = {
    "eval": "eval", "exec": "exec", "compile": "compile", "vars": "vars", "locals": "locals",
    "breakpoint": "breakpoint", "input": "input", "help": "help", "memoryview": "memoryview",
    "__import__": "import", "__build_class__": "class", "__builtins__": "builtins",
    "__loader__": "the loader", "__spec__": "the module spec",
}
# Objects that are the interpreter's internals: never handed to a submission.
NEVER_TYPES = frozenset({types.FrameType, types.CodeType, types.TracebackType, types.CellType})


class PolicyRefusal(BaseException):
    """The submission used something the course's Python does not have."""


# ------------------------------------------------------------------------------------------------
# The policy, as the driver hands it over (course.yaml + exercise.yaml, validated by the grader).

class _Rule:
    __slots__ = ("all", "names", "deny", "scanned", "subst")

    def __init__(self, entries):
        self.all = "*" in entries
        self.names = frozenset(e for e in entries if e != "*" and not e.startswith("!"))
        self.deny = set(e[1:] for e in entries if e.startswith("!"))
        self.scanned = False
        self.subst = {}  # name -> the guarded stand-in of what it names (`_SUBSTITUTES`)

    def allows(self, name):
        if name in self.deny:
            return False
        return name in self.names or (self.all and name[:1] != "_")


_TENSOR = ()  # torch.Tensor, once torch is imported (configure)
_RULES = {}  # module name -> _Rule
_BASES = set()  # classes a submission's class may derive from
_WRITABLE_MODULES = ()  # dotted prefixes whose attributes a submission may set
_WRITABLE_TYPES = ()  # types whose public attributes a submission may set on any instance
_WRITABLE_ATTRS = {}  # of those, type -> {attribute: exact value types}: only these, only so
_PLAIN_TYPES = {"int": int, "bool": bool, "float": float, "str": str}
_PLAIN_SETTINGS = (bool, int, float, str, type(None))  # what a writable module's attribute may be set to
_HINTS = {}  # dotted prefix -> (zh, en): what to use instead
_DENIED = {}  # attribute name -> classes whose attribute of that name is refused (`denied:`)
_OWN_CLASSES = set()
_SUBMISSION_FILES = set()
report = None  # the driver's: report(finding) sends a run-time refusal at once


def configure(policy, files):
    """Install `policy` (the job's `policy`) for the submission in `files`."""
    global _WRITABLE_MODULES, _WRITABLE_TYPES, _TENSOR
    torch = sys.modules.get("torch")
    _TENSOR = (torch.Tensor,) if torch is not None else ()
    _RULES.clear()
    for name, entries in (policy.get("modules") or {}).items():
        _RULES[name] = _Rule(entries)
    _BASES.clear()
    for dotted in policy.get("bases") or ():
        obj = _resolve(dotted)
        if obj is not None:
            _BASES.add(obj)
    writable_types = []
    mods = []
    _WRITABLE_ATTRS.clear()
    for dotted in policy.get("writable") or ():
        obj = _resolve(dotted)
        if isinstance(obj, type):
            writable_types.append(obj)
        else:
            mods.append(dotted)
    # `settings:` types whose instances may have only these attributes set, each to a value of
    # exactly one of its plain types
    for dotted, attrs in (policy.get("settings") or {}).items():
        obj = _resolve(dotted)
        if isinstance(obj, type):
            writable_types.append(obj)
            _WRITABLE_ATTRS[obj] = {a: tuple(_PLAIN_TYPES[t] for t in ts) for a, ts in attrs.items()}
    _WRITABLE_MODULES = tuple(mods)
    _WRITABLE_TYPES = tuple(writable_types)
    _DENIED.clear()
    for dotted in policy.get("denied") or ():
        owner, _, attr = dotted.rpartition(".")
        cls = _resolve(owner)
        if isinstance(cls, type):
            _DENIED.setdefault(attr, []).append(cls)
    _HINTS.clear()
    for prefix, hint in (policy.get("hints") or {}).items():
        _HINTS[prefix] = (hint.get("zh", ""), hint.get("en", ""))
    _SUBMISSION_FILES.clear()
    _SUBMISSION_FILES.update(files)
    # the grader's own files the submission may read but not change: inductor's compile cache
    # (this run's copy: the kernels, graphs and headers the grader's compile reads), as the
    # grader's environment names it before the submission exists
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    _GRADER_TREES[:] = [os.path.join(os.path.realpath(cache), "")] if cache else []
    if _RULES:
        _hold_every_route()
    _guard_enum_factory()
    _SUBST_IDS.clear()
    _DENIED_IDS.clear()
    _MODULE_NAMES.clear()
    for mname, mod in list(sys.modules.items()):
        if isinstance(mod, _ModuleType):
            _MODULE_NAMES.setdefault(id(mod), mname)
    for mname, rule in list(_RULES.items()):  # what the listed modules re-export (`_scan`)
        mod = sys.modules.get(mname)
        if mod is not None:
            _scan(rule, mod)


def _guard_enum_factory():
    """Enum's functional form (`Enum("E", {...})`) makes a class from a mapping of any names:
    called on the submission's behalf, its names must be plain identifiers (no dunder or `_sunder_`
    that would become the class's machinery, past the class statement's checks), with no `type=`
    mixin and no `module=`."""
    import enum

    meta = enum.EnumMeta
    real = meta.__dict__["_create_"]
    if getattr(real, "__grade_guarded__", False):
        return
    real_fn = real.__func__ if isinstance(real, classmethod) else real

    def _create_(cls, class_name, names, *args, **kwargs):
        if _line():  # a submission frame is on the stack
            items = names.split() if isinstance(names, str) else (
                names.keys() if hasattr(names, "keys") else [n[0] if isinstance(n, (tuple, list)) else n for n in names])
            for n in items:
                if not (isinstance(n, str) and n.isidentifier() and not n.startswith("_")):
                    refuse(f"enum {class_name!r}: {n!r}", "枚举成员名必须是普通标识符", "enum member names must be plain identifiers")
            if kwargs.get("type") is not None or kwargs.get("module") is not None or len(args) > 1:
                refuse(f"enum {class_name!r}(type=…, module=…)", "不能给枚举指定 type 或 module", "no type= or module= for an enum")
        return real_fn(cls, class_name, names, *args, **kwargs)

    _create_.__grade_guarded__ = True
    setattr(meta, "_create_", classmethod(_create_) if isinstance(real, classmethod) else _create_)


def _resolve(dotted):
    """The object a dotted path names (`torch.nn.Module`), importing its module; None if absent."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = _real_import(".".join(parts[:i]), None, None, ["*"], 0)
        except ImportError:
            continue
        try:
            for p in parts[i:]:
                obj = _real_getattr(obj, p)
        except AttributeError:
            return None
        return obj
    return None


# ------------------------------------------------------------------------------------------------
# Refusals: a finding with the submission's line, sent at once, then raised.

def _line():
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_filename in _SUBMISSION_FILES:
            return f.f_lineno
        f = f.f_back
    return 0


def _hint(what):
    best = None
    for prefix, hint in _HINTS.items():
        if (what == prefix or what.startswith(prefix + ".") or what.startswith(prefix + "(")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, hint)
    return best[1] if best else None


def finding(line, col, what, zh, en):
    hint = _hint(what)
    if hint:
        zh, en = f"{zh}；改用 {hint[0]}", f"{en}; use {hint[1]} instead"
    return {"line": line, "col": col, "code": "policy", "what": what,
            "zh": f"`{what}`：{zh}", "en": f"`{what}`: {en}"}


def refuse(what, zh, en):
    f = finding(_line(), 0, what, zh, en)
    if report is not None:
        report(f)
    raise PolicyRefusal(f["en"])


def _private(what):
    refuse(what, "不属于课程的 Python（以 _ 开头的名字只能用在你自己定义的对象上）",
           "not part of the course's Python (a name beginning with _ is only for objects you made)")


# ------------------------------------------------------------------------------------------------
# Whose is an object: the submission's own classes (made by its `class` statements), their
# instances, its own functions and methods.

def _own(obj):
    t = type(obj)
    if t in _OWN_CLASSES:
        return True
    if t is _FunctionType:
        return obj.__code__.co_filename in _SUBMISSION_FILES
    if t is _MethodType:
        return _own(obj.__func__) and _own(obj.__self__)
    if t is super:
        return obj.__thisclass__ in _OWN_CLASSES
    if isinstance(obj, type):
        return obj in _OWN_CLASSES
    return False


def _module_ok(mod, via=None):
    """Is module object `mod` one the policy allows (by its own name or the dotted name `via`
    it was reached by, e.g. `os.path` for posixpath)?"""
    name = _MODULE_NAMES.setdefault(id(mod), mod.__name__)
    if name in _RULES:
        return True
    if via is not None and via in _RULES:
        _RULES[name] = _RULES[via]
        return True
    return False


def _check_value(value, what):
    t = type(value)
    if t in NEVER_TYPES:
        refuse(what, "会交出解释器的内部（栈帧、代码对象）", "hands out the interpreter's internals (frames, code)")
    if isinstance(value, _ModuleType) and not _module_ok(value, what):
        refuse(what, "这个模块不属于课程的 Python", "this module is not part of the course's Python")
    return value


# ------------------------------------------------------------------------------------------------
# The guards the compiled submission calls.

_MISSING = object()
_FORMAT_NAMES = frozenset({"format", "format_map"})
_BUILTIN_METHOD = type("".format)


def _getattr_(obj, name, default=_MISSING):
    """`obj.name` as the course's Python reads it (also `getattr(obj, name[, default])`)."""
    if type(name) is not str:
        raise TypeError("attribute name must be string")
    if isinstance(obj, _ModuleType):
        if name in READABLE_DUNDERS:
            value = _real_getattr(obj, name)
            return _safe_type if value is type else value
        return _module_attr(obj, name, default)
    if name[:1] == "_":
        if name in READABLE_DUNDERS:
            value = _real_getattr(obj, name)
            if isinstance(value, type):  # x.__class__: as type(x)
                if issubclass(value, type):  # a class's class: a metaclass (abc.ABC.__class__)
                    return _safe_type if value is type else _metaclass(f"{_describe(obj)}.{name}")
                return _same_door(value, f"{_describe(obj)}.{name}")
            return value
        elif name[:2] == "__" and name[-2:] == "__":
            if not (name in PROTOCOL_DUNDERS or (name in CLASS_DUNDERS and _own(obj))):
                _private(f"{_describe(obj)}.{name}")
        elif not (_own(obj) or _namedtuple_api(obj, name)):
            _private(f"{_describe(obj)}.{name}")
    elif name in _FORMAT_NAMES and (isinstance(obj, str) or (isinstance(obj, type) and issubclass(obj, str))):
        return _safe_format_method(obj, name)
    if name in INSPECT_ATTRIBUTES:
        refuse(f"{_describe(obj)}.{name}", "会交出解释器的内部（栈帧、代码对象）",
               "hands out the interpreter's internals (frames, code)")
    if name in _DENIED:
        for cls in _DENIED[name]:
            if isinstance(obj, cls) or (isinstance(obj, type) and issubclass(obj, cls)):
                refuse(f"{cls.__module__}.{cls.__qualname__}.{name}", "课程不允许用这个方法（它会让评分器看不到你的工作）",
                       "the course does not allow this method (it hides your work from the grader)")
    if isinstance(obj, _TENSOR):
        # a tensor's public attributes are data and methods, never the interpreter's internals;
        # and torch.compile traces this guard inline: a type test on a tensor's method would
        # break its graph
        return _real_getattr(obj, name) if default is _MISSING else _real_getattr(obj, name, default)
    if default is _MISSING:
        value = _real_getattr(obj, name)
    else:
        value = _real_getattr(obj, name, default)
    if type(value) in NEVER_TYPES or isinstance(value, _ModuleType):
        return _check_value(value, f"{_describe(obj)}.{name}")
    if id(value) in _DENIED_IDS or id(value) in _SUBST_IDS:
        return _same_door(value, f"{_describe(obj)}.{name}")
    if type(value) is _BUILTIN_METHOD and value.__name__ in _FORMAT_NAMES and isinstance(value.__self__, str):
        return _safe_format_method(value.__self__, value.__name__)  # `super(S, s).format`
    if isinstance(value, type) and issubclass(value, type):
        return _safe_type if value is type else _metaclass(f"{_describe(obj)}.{name}")
    return value


def _metaclass(what):
    refuse(what, "元类（包括 type 本身）不属于课程的 Python：请用 class 语句",
           "a metaclass (type itself included) is not part of the course's Python: use a class statement")


def _namedtuple_api(obj, name):
    """A named tuple's public API begins with `_` (`_asdict`, `_replace`, `_fields`, `_make`)."""
    return name in ("_asdict", "_replace", "_fields", "_make", "_field_defaults") and (
        isinstance(obj, tuple) or (isinstance(obj, type) and issubclass(obj, tuple))
    )


def _describe(obj):
    if isinstance(obj, _ModuleType):
        return obj.__name__
    if isinstance(obj, type):
        return f"{obj.__module__}.{obj.__qualname__}" if obj.__module__ != "builtins" else obj.__qualname__
    name = _real_getattr(obj, "__qualname__", None) or _real_getattr(obj, "__name__", None)
    if isinstance(name, str) and callable(obj):
        return name
    return type(obj).__name__


def _module_attr(mod, name, default=_MISSING):
    mname = _MODULE_NAMES.get(id(mod)) or mod.__name__
    rule = _RULES.get(mname)
    what = f"{mname}.{name}"
    if rule is None:
        refuse(mname, "这个模块不属于课程的 Python", "this module is not part of the course's Python")
    if not rule.scanned:
        _scan(rule, mod)
    if not rule.allows(name):
        # a submodule of an allowed module may be allowed as a module of its own
        if not (what in _RULES and isinstance(_real_getattr(mod, name, None), _ModuleType)):
            refuse(what, "不属于课程的 Python（课程允许的模块里没有这个名字）",
                   "not part of the course's Python (not among what the course allows of this module)")
    sub = rule.subst.get(name)
    if sub is not None:
        return sub
    if default is _MISSING:
        value = _real_getattr(mod, name)
    else:
        value = _real_getattr(mod, name, default)
    if isinstance(value, _ModuleType) or type(value) in NEVER_TYPES:
        _check_value(value, what)
    return value


_HOMED = (types.FunctionType, types.BuiltinFunctionType, type)
# id(module) -> its name when the policy was configured (or it was first imported): a rule is the
# module's own, whatever its `__name__` says later
_MODULE_NAMES = {}
_SUBST_IDS = {}  # id(what a substitute stands in for) -> the substitute
_DENIED_IDS = set()  # ids of what a module's rule refuses by name, refused wherever reached
# Where a function's `__module__` names an implementation module of a module the policy lists
_HOME_ALIASES = {"posix": "os", "posixpath": "os", "genericpath": "os", "_io": "io", "_sre": "re"}
_GRADER_HOMES = ("grade_", "__main__")  # the grader's instruments (the recording clocks …)


def _package(name):
    top = name.split(".")[0]
    top = _HOME_ALIASES.get(top, top)
    return top.lstrip("_")


def _scan(rule, mod):
    """Judge once what module `mod` re-exports from other packages (`torch.utils.checkpoint.
    get_type_hints` is typing's): a function or class is the API of the module that defines it,
    so a name refused there is refused everywhere; metaclasses (`type` itself) never. What is
    refused joins the rule's `deny` (the guard then asks only `rule.allows(name)`: a check
    torch.compile traces as a constant). Run for every listed module already imported when the
    policy is configured, else at the module's first use."""
    rule.scanned = True
    mname = _MODULE_NAMES.setdefault(id(mod), mod.__name__)
    _SUBST_IDS[id(str.format)] = _safe_format_method(str, "format")
    _SUBST_IDS[id(str.format_map)] = _safe_format_method(str, "format_map")
    for dotted, sub in _SUBSTITUTES.items():  # what they stand in for, once its module is imported
        owner, _, attr = dotted.rpartition(".")
        real = getattr(sys.modules.get(owner), attr, None)
        if real is not None and real is not sub:
            _SUBST_IDS[id(real)] = sub
    try:
        items = list(vars(mod).items())
    except TypeError:
        return
    for name, value in items:
        if name in rule.deny:
            if isinstance(value, _HOMED):  # a function or class (not a shared constant like False)
                _DENIED_IDS.add(id(value))  # refused wherever it is reached (`_getattr_`)
            continue
        sub = _SUBST_IDS.get(id(value))
        if sub is not None:  # a stand-in, under whatever name a module re-exports it
            rule.subst[name] = sub
            continue
        if name[:1] == "_" or not isinstance(value, _HOMED):
            continue
        if isinstance(value, type) and issubclass(value, type):
            rule.deny.add(name)
            continue
        home = _real_getattr(value, "__module__", None)
        if type(home) is not str or home.startswith(_GRADER_HOMES) or _package(home) == _package(mname):
            continue
        own_name = _real_getattr(value, "__name__", None)
        if home == "builtins":
            ok = BUILTINS.get(own_name) is value or (isinstance(value, type) and issubclass(value, BaseException))
        else:
            home_rule = _RULES.get(_HOME_ALIASES.get(home, home)) or _RULES.get(home.lstrip("_"))
            ok = home_rule is not None and type(own_name) is str and home_rule.allows(own_name)
        if not ok:
            rule.deny.add(name)


def _write_(obj, name=None):
    """The object of `obj.name = v` / `del obj.name` (`name` given) or `obj[k] = v` (None)."""
    if name is None:
        if isinstance(obj, (_ModuleType, type, types.MappingProxyType)):
            refuse(_describe(obj) + "[…]", "不能改写模块或类的内容", "a module's or class's contents cannot be rewritten")
        return obj
    if name[:2] == "__" and name[-2:] == "__":
        refuse(f"{_describe(obj)}.{name}", "不能改写对象的特殊属性", "an object's special attributes cannot be rewritten")
    if _own(obj):
        return obj
    what = f"{_describe(obj)}.{name}"
    if name[:1] == "_":
        _private(what)
    if isinstance(obj, _ModuleType):
        rule = _RULES.get(obj.__name__)
        if _WRITABLE_MODULES and obj.__name__.startswith(_WRITABLE_MODULES) and rule is not None \
                and rule.allows(name):
            # a setting, so a plain value: an object of the submission's there runs its code
            # wherever torch reads or compares the setting (red team 37: a dynamo setting whose
            # `__bool__` spun inside the grader's compile; `torch.backends.mkldnn.is_available`
            # rebound to a function of its own, called by inductor inside it)
            return _PlainWrite(obj, _PLAIN_SETTINGS, what)
        refuse(what, "不能修改不是你定义的模块（猴子补丁）", "you may not change a module you did not write (monkey-patching)")
    if isinstance(obj, type):
        refuse(what, "不能修改不是你定义的类（猴子补丁）", "you may not change a class you did not write (monkey-patching)")
    if _WRITABLE_TYPES and isinstance(obj, _WRITABLE_TYPES):
        for cls, attrs in _WRITABLE_ATTRS.items():
            if isinstance(obj, cls):
                if name not in attrs:
                    refuse(what, f"{_describe(cls)} 只能设置这些属性：{', '.join(attrs)}",
                           f"of a {_describe(cls)} only these may be set: {', '.join(attrs)}")
                return _PlainWrite(obj, attrs[name], what)
        return obj
    refuse(what, "不能修改不是你创建的对象的属性", "you may not set attributes of an object you did not make")


class _PlainWrite:
    """The object of `obj.name = v` where only plain values may go (`writable:` with attributes):
    `v` of exactly one of `kinds`, so that nothing of the submission's runs where the value is read
    (red team 35: a logger's `parent` of its own with a `level` property, read by logging inside the
    grader's own seconds). Reading through it reads `obj` (`obj.name += 1`); `del` is refused."""

    __slots__ = ("_obj", "_kinds", "_what")

    def __init__(self, obj, kinds, what):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_kinds", kinds)
        object.__setattr__(self, "_what", what)

    def __getattr__(self, name):
        return _real_getattr(object.__getattribute__(self, "_obj"), name)

    def __setattr__(self, name, value):
        if type(value) not in object.__getattribute__(self, "_kinds"):
            kinds = " / ".join(k.__name__ for k in object.__getattribute__(self, "_kinds"))
            refuse(f"{object.__getattribute__(self, '_what')} = {type(value).__name__}(…)",
                   f"这里只能放普通的 {kinds}", f"only a plain {kinds} may go here")
        _real_setattr(object.__getattribute__(self, "_obj"), name, value)

    def __delattr__(self, name):
        refuse(f"del {object.__getattribute__(self, '_what')}", "不能删除这个属性", "this attribute cannot be deleted")


def _getitem_(obj, key):
    return obj[key]


def _dunder(name):
    return isinstance(name, str) and len(name) > 4 and name.startswith("__") and name.endswith("__")


def _apply_(f, *args, **kwargs):
    # keyword names are written as code: a dunder one (`SimpleNamespace(**{"__array_interface__":
    # ...})`) gives an object the interpreter's or numpy's machinery, as a class body would
    # (red team 13: numpy read a storage's address through it)
    bad = next((k for k in kwargs if _dunder(k)), None)
    if bad is not None:
        refuse(bad, f"关键字参数名 `{bad}` 不属于课程的 Python（双下划线名字是解释器的协议）",
               f"the keyword argument `{bad}` is not part of the course's Python (double-underscore names "
               "are the interpreter's protocol)")
    return f(*args, **kwargs)


_IOPS = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "%=": operator.imod, "**=": operator.ipow, "<<=": operator.ilshift, ">>=": operator.irshift,
    "|=": operator.ior, "^=": operator.ixor, "&=": operator.iand, "//=": operator.ifloordiv,
    "@=": operator.imatmul,
}


def _inplacevar_(op, target, value):
    return _IOPS[op](target, value)


_IMPORT_NAME = __import__("dis").opmap["IMPORT_NAME"]


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    """`import` in the course's Python: allowed modules only, and of them allowed names only.
    Python's C code imports through the builtins of the frame that is running too (torch's
    `torch.Tensor([...])` imports `torch.storage` that way): such an import is torch's own, made
    for its C caller, which gets the module; only an `import` statement (IMPORT_NAME) is the
    submission's, and judged."""
    f = sys._getframe(1)
    if f.f_lasti < 0 or f.f_code.co_code[f.f_lasti] != _IMPORT_NAME:
        return _real_import(name, globals, locals, fromlist, level)
    if level:
        refuse("from . import", "不能相对导入", "relative imports are not part of the course's Python")
    if name not in _RULES:
        refuse(name, "这个模块不属于课程的 Python", "this module is not part of the course's Python")
    top = _real_import(name, None, None, fromlist, 0)
    if not fromlist:
        # `import a.b.c` binds `a`; its attributes are then read through `_getattr_`
        parts = name.split(".")
        for i in range(1, len(parts)):
            if ".".join(parts[:i]) not in _RULES:
                # `import torch.utils.checkpoint` reaches `torch.utils`: allowed as a path
                _RULES.setdefault(".".join(parts[:i]), _Rule(()))
        return top
    mod = top
    _module_ok(mod, name)
    view = _FromImport(name)
    for item in fromlist:
        if item == "*":
            refuse(f"from {name} import *", "不能用 * 导入", "`import *` is not part of the course's Python")
        qual = f"{name}.{item}"
        if qual in _RULES:
            value = _real_import(qual, None, None, ["*"], 0)
            _module_ok(value, qual)
        else:
            value = _module_attr(mod, item)
        object.__setattr__(view, item, value)
    return view


class _FromImport:
    """What `from M import a, b` reads `a` and `b` from: the allowed (and substituted) names."""

    def __init__(self, name):
        object.__setattr__(self, "__name__", name)


def _build_class(func, name, *bases, **kwargs):
    """A `class` statement: bases the course allows (and the submission's own), no metaclass."""
    if kwargs:
        refuse(f"class {name}({', '.join(kwargs)}=…)", "类定义不能带 metaclass 或其他关键字参数",
               "a class may not take a metaclass or other keywords")
    for base in bases:
        if not _base_ok(base):
            what = "type" if base is _safe_type else _describe(base) if isinstance(base, type) else repr(base)[:60]
            refuse(what, "不能继承这个类（课程允许继承的基类见 README）",
                   "your classes may not derive from this class (the course's allowed bases are in the README)")
    cls = _real_build_class(func, name, *bases)
    if issubclass(cls, (int, float, complex)):
        own = sorted(k for k in cls.__dict__ if k in _NUMBER_PROTOCOL)
        if own:
            refuse(f"class {name}({', '.join(_describe(b) for b in bases)}): {', '.join(own)}",
                   "数字类型（int、float、complex 及 IntEnum）的子类不能定义比较、运算或转换：评分器和 torch 比较、"
                   "读取这个数时会运行你的代码；请直接用普通的数",
                   "a subclass of a number type (int, float, complex, IntEnum) may not define comparisons, "
                   "arithmetic or conversions: your code would run wherever the grader or torch compares or reads "
                   "the number; use the plain number")
    _OWN_CLASSES.add(cls)
    return cls


# What makes a number run code where it is read (red team 35: a logger level of an `int` subclass
# whose `__ge__` spun inside every comparison logging made, in the grader's own seconds).
_NUMBER_PROTOCOL = frozenset(
    f"__{n}__" for n in (
        "eq ne lt le gt ge hash bool index int float complex trunc floor ceil round neg pos abs invert "
        "getattribute getattr add sub mul matmul truediv floordiv mod divmod pow lshift rshift and or xor"
    ).split()
) | frozenset(
    f"__{p}{n}__" for p in ("r", "i") for n in
    "add sub mul matmul truediv floordiv mod divmod pow lshift rshift and or xor".split()
)


def _base_ok(base):
    if base in _OWN_CLASSES or base in _BASES:
        return True
    if isinstance(base, type):
        if base.__module__ == "builtins" and base is not type:
            return True  # object, Exception and the other exceptions, dict, list, tuple …
        if issubclass(base, tuple) and hasattr(base, "_fields") and hasattr(base, "_make"):
            return True  # collections.namedtuple(...)
    return _real_getattr(base, "__origin__", None) in _BASES  # typing.Generic[T], Protocol[T]


def _safe_type(*args):
    if len(args) != 1:
        refuse("type(name, bases, dict)", "不能用 type() 动态创建类，请用 class 语句",
               "classes are made with a class statement, not type(name, bases, dict)")
    t = type(args[0])
    if issubclass(t, type):  # the type of a class is a metaclass: never handed out
        return _safe_type if t is type else _metaclass(f"type({_describe(args[0])})")
    return _same_door(t, f"type({_describe(args[0])})")


def _same_door(value, what):
    """What `value` is as the policy hands it out: a substituted class or function (the real
    `timeit.Timer` behind the type of a timer) is its stand-in, a refused one is refused, however
    it was reached (`type(x)`, `x.__class__`, an attribute)."""
    sub = _SUBST_IDS.get(id(value))
    if sub is not None:
        return sub
    if id(value) in _DENIED_IDS:
        refuse(what, "不属于课程的 Python（它在自己的模块里被拒绝）",
               "not part of the course's Python (refused in its own module)")
    if isinstance(value, type) and value.__name__[:1] == "_" and value not in _OWN_CLASSES:
        # a private class is refused by its name (`module._Name`), so through `type(x)` too
        # (red team 28: `type(prof.experimental_config)`, torch's `_ExperimentalConfig`)
        _private(what)
    return value


def _safe_getattr(obj, name, *default):
    if len(default) > 1:
        raise TypeError("getattr expected at most 3 arguments")
    return _getattr_(obj, name, *default)


def _safe_setattr(obj, name, value):
    if type(name) is not str:
        raise TypeError("attribute name must be string")
    _real_setattr(_write_(obj, name), name, value)


def _safe_delattr(obj, name):
    if type(name) is not str:
        raise TypeError("attribute name must be string")
    _real_delattr(_write_(obj, name), name)


def _quiet_hasattr(obj, name):
    """Whether `obj` has `name`: only whether (reading it is `getattr`'s business), so a careful
    `hasattr(x, "__len__")` is no refusal."""
    if type(name) is not str:
        raise TypeError("attribute name must be string")
    try:
        return hasattr(obj, name)
    except Exception:
        return False


# the submission's module namespace (`run`), in a holder: the driver watches this module's names
# for rebinding, and the holder itself never changes
_SUBMISSION_NS = [{}]


def _safe_globals():
    """A copy of the submission's module namespace (to hand to `timeit(..., globals=...)`):
    always the submission's own, whoever calls it (a library frame that calls `globals` as a
    callback — a default_factory, a defaultdict's factory — gets the submission's too)."""
    return {k: v for k, v in _SUBMISSION_NS[0].items() if k != "__builtins__"}


_BLOCKED_PATHS = ("/proc", "/dev", "/sys")


def _safe_open(file, mode="r", *args, **kwargs):
    if not isinstance(file, (str, bytes, os.PathLike)):
        refuse("open(fd)", "只能按路径打开文件", "files are opened by path")
    _refuse_blocked(os.path.realpath(os.fsdecode(file)))
    return _real_open(file, mode, *args, **kwargs)


def _refuse_blocked(path):
    """`path`, resolved (`os.path.realpath`): no process or device files."""
    if path.startswith(_BLOCKED_PATHS):
        refuse(f"open({path!r})", "不能打开进程或设备文件", "process and device files cannot be opened")


# Python's audit events for a new process (`multiprocessing`'s fork start, `subprocess`, `os`'s).
_PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn",
                             "os.system", "subprocess.Popen"})


def _process_refused(frame):
    """Any new process while the course's Python is in force, whoever's frames start it (torch's
    DataLoader workers are forks of this process running what the submission handed it: a
    callable of the submission's may run under torch's frames, red team 15), except the
    compiler's own builds (torch.compile's inductor runs g++ and its worker pool) and the standard
    library's query of the machine (`platform.processor()` runs `uname -p`). The grader starts
    none. Decided by the code that starts it: walking up from the event through the standard
    library (subprocess, multiprocessing, os), the first other frame must be the compiler's
    (torch/_inductor, torch/_dynamo) — not such a frame anywhere on the stack (red team 16: a
    DataLoader's workers started inside `torch.compiler.disable(fn)`, whose wrapper is a frame
    of torch/_dynamo)."""
    attribution = sys.modules.get("grade_attribution")
    stdlib = attribution._STDLIB if attribution is not None else ()
    while frame is not None:
        name = frame.f_code.co_filename
        if name.endswith("/platform.py"):
            return False
        if "-packages" in name or not (name.startswith(stdlib) or name.startswith("<frozen ")):
            return not ("/torch/_inductor/" in name or "/torch/_dynamo/" in name)
        frame = frame.f_back
    return True


# What of a process's own /proc entry (`/proc/<pid>/X`, `/proc/<pid>/task/<tid>/X`) may be opened at
# all: its statistics. Not its memory (`mem`, `pagemap`), its descriptors (`fd/N`: the results
# pipe), its environment: those by path would hand any reader the grader's secrets, by whoever's
# frames (red team 15 read /proc/self/mem through numpy.fromfile as a DataLoader's collate_fn).
_PROC_STATISTICS = frozenset({"schedstat", "stat", "statm", "status", "sched", "io", "limits",
                              "cgroup", "cpuset", "comm", "cmdline", "maps", "smaps",
                              "smaps_rollup", "numa_maps", "mountinfo", "mounts", "oom_score"})


def _process_file(path):
    """A file of a process's own /proc entry other than its statistics, or shared memory
    (`/dev/shm`: it outlives the run, a channel between runs)."""
    if path == "/dev/shm" or path.startswith("/dev/shm/"):
        return True
    parts = path.split("/")
    if len(parts) < 3 or parts[1] != "proc" or not parts[2].isdigit():
        return False
    rest = parts[3:]
    if len(rest) >= 2 and rest[0] == "task" and rest[1].isdigit():
        rest = rest[2:]
    return not (len(rest) == 1 and rest[0] in _PROC_STATISTICS)


_AUDIT_ON = [False]
_GRADER_TREES = []  # folders of the grader's whose files no code of the submission's may change

# Python's audit events that change a file by path (besides `open` for writing): the paths each
# names, changed or made, are checked against `_GRADER_TREES`.
_CHANGE_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.truncate", "os.link", "os.symlink",
                            "os.chmod", "os.chown", "os.utime", "os.mkdir", "shutil.rmtree", "shutil.move",
                            "shutil.copyfile", "shutil.copytree"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _audit(event, args):
    """The course's Python on the routes no name in the submission shows, held in Python's audit
    hook (`sys.addaudithook`: not in the course's Python, and once added never removed; one set
    lookup for any other event): new processes, and files opened by path."""
    if event in _PROCESS_EVENTS:
        if _process_refused(sys._getframe(1)):
            refuse(f"{event} (a new process)",
                   "评分期间不能启动进程（包括 DataLoader 的 num_workers > 0）：别的进程里做的事评分器看不到，"
                   "还会和被计时的工作抢 CPU；请在本进程里完成（num_workers=0）",
                   "no process may be started while being graded (DataLoader's num_workers > 0 "
                   "included): work in another process is out of the grader's sight and competes "
                   "with the timed work for the CPU; do it in this process (num_workers=0)")
        return
    if event == "open":
        _open_audit(args, sys._getframe(1))
        if _GRADER_TREES and _writes(args):
            _grader_files_kept(event, args[:1], sys._getframe(1))
    elif event in _CHANGE_EVENTS and _GRADER_TREES:
        _grader_files_kept(event, args, sys._getframe(1))


def _writes(args):
    """An `open` event's (path, mode, flags): opened to write (a mode with w, a, x or +, or
    `os.open`'s flags)."""
    mode = args[1] if len(args) > 1 else None
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    flags = args[2] if len(args) > 2 else 0
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _grader_files_kept(event, args, caller):
    """No file of the grader's (`_GRADER_TREES`: lesson 05's compile cache) written, removed,
    renamed or linked by the submission's code, directly or through the standard library
    (`attributed`); torch's own writes there (inductor caching what it compiled) are torch's. Red
    team 41 removed the precompiled headers, the kernels or every entry of this run's cache at its
    import, or overwrote them: the grader's compiled first call then rebuilt them inside its own
    call, 3-10x its time, and every check compared the number with the grader's clock on that same
    call. What is checked: each path's own entry (a link's own path: removing a header link), for
    an `open` also where it leads (a link made elsewhere into the cache), and of a copy only its
    destination (copying out of the cache reads it)."""
    if event in ("shutil.copyfile", "shutil.copytree"):
        args = args[1:2]
    paths = []
    for a in args:
        if isinstance(a, (str, bytes, os.PathLike)):
            p = os.fsdecode(a)
            paths.append(os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(p))), os.path.basename(p)))
            if event == "open":
                paths.append(os.path.realpath(p))
    hit = [p for p in paths if any(p.startswith(t) or p + os.sep == t for t in _GRADER_TREES)]
    if not hit:
        return
    attribution = sys.modules.get("grade_attribution")
    mine = attribution.attributed(caller) is not None if attribution is not None else _line() != 0
    if mine:
        refuse(f"{event}({hit[0]!r})",
               "不能改动评分器的编译缓存（写入、删除、改名）：评分器自己的编译要读它",
               "the grader's compile cache cannot be changed (written, removed, renamed): the grader's "
               "own compile reads it")


def _open_audit(args, caller):
    """Every route to a file by path (Python's `open` event: `io.open`, `os.open`, `FileIO`, and so
    the standard library's and numpy's openers: `logging.FileHandler`, `numpy.fromfile`, …): the
    process's memory, descriptors and environment by no one (`_process_file`), and the rule of the
    submission's own `open` (no `/proc`, `/dev`, `/sys`) when it is made on the submission's
    behalf (`attributed`; red team 14 opened `/proc/self/...` through
    `logging.FileHandler(path, mode="rb")`)."""
    file = args[0]
    if not isinstance(file, (str, bytes, os.PathLike)):
        return
    path = os.path.realpath(os.fsdecode(file))
    if _process_file(path):
        refuse(f"open({path!r})", "不能打开进程的内存、文件描述符、环境或共享内存",
               "a process's memory, descriptors and environment, and shared memory, cannot be opened")
    attribution = sys.modules.get("grade_attribution")
    if attribution is not None:
        mine = attribution.attributed(caller) is not None
    else:
        mine = _line() != 0
    if mine:
        _refuse_blocked(path)


def _hold_every_route():
    if not _AUDIT_ON[0]:
        _AUDIT_ON[0] = True
        sys.addaudithook(_audit)


# ------------------------------------------------------------------------------------------------
# Substitutes: the standard library's ways to read an attribute, or to run a statement, by a
# string the submission gives, each judged or compiled under the policy.

class _SafeFormatter(string.Formatter):
    def get_field(self, field_name, args, kwargs):
        first, rest = _string.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, i in rest:
            obj = _getattr_(obj, i) if is_attr else obj[i]
        return obj, first


_FORMATTER = _SafeFormatter()


def _safe_format_method(obj, name):
    if isinstance(obj, type):  # str.format(template, ...)
        if name == "format":
            return lambda template, *a, **k: _FORMATTER.vformat(template, a, k)
        return lambda template, mapping: _FORMATTER.vformat(template, (), mapping)
    if name == "format":
        return lambda *a, **k: _FORMATTER.vformat(obj, a, k)
    return lambda mapping: _FORMATTER.vformat(obj, (), mapping)


def _attrgetter(*names):
    for n in names:
        if type(n) is not str:
            raise TypeError("attribute name must be a string")
    paths = [n.split(".") for n in names]

    def get(obj):
        out = []
        for parts in paths:
            o = obj
            for p in parts:
                o = _getattr_(o, p)
            out.append(o)
        return out[0] if len(out) == 1 else tuple(out)

    return get


def _methodcaller(name, *args, **kwargs):
    if type(name) is not str:
        raise TypeError("method name must be a string")
    return lambda obj: _getattr_(obj, name)(*args, **kwargs)


def _update_wrapper(wrapper, wrapped, assigned=functools.WRAPPER_ASSIGNMENTS,
                    updated=functools.WRAPPER_UPDATES):
    """functools.update_wrapper with its usual names only (its `assigned`/`updated` are
    attribute names read from `wrapped`): what it copies of an object the submission did not make
    is what `_getattr_` would let it read (the plain dunders, the public entries of `__dict__`)."""
    if tuple(assigned) != tuple(functools.WRAPPER_ASSIGNMENTS) or tuple(updated) != tuple(functools.WRAPPER_UPDATES):
        if not (set(assigned) <= set(functools.WRAPPER_ASSIGNMENTS) and set(updated) <= set(functools.WRAPPER_UPDATES)):
            refuse("functools.update_wrapper(assigned=…, updated=…)", "只能复制 functools 默认的那些属性",
                   "only functools' usual attributes may be copied")
    if not _own(wrapper):  # it writes dunders into `wrapper`: only into what the submission made
        refuse(f"functools.update_wrapper({_describe(wrapper)}, …)", "只能写入你自己创建的函数或对象",
               "it writes into its first argument: only into a function or object you made")
    if _own(wrapped):
        return functools.update_wrapper(wrapper, wrapped, assigned, updated)
    for attr in assigned:
        if attr in READABLE_DUNDERS:
            try:
                value = _real_getattr(wrapped, attr)
            except AttributeError:
                continue
            _real_setattr(_write_target(wrapper, attr), attr, value)
    if "__dict__" in updated:
        public = {k: v for k, v in _real_getattr(wrapped, "__dict__", {}).items() if k[:1] != "_"}
        _real_getattr(wrapper, "__dict__").update(public)
    return wrapper


def _write_target(obj, name):
    if name[:2] == "__" and not _own(obj):
        refuse(f"{_describe(obj)}.{name}", "不能改写不是你创建的对象", "you may not rewrite an object you did not make")
    return obj


def _wraps(wrapped, assigned=functools.WRAPPER_ASSIGNMENTS, updated=functools.WRAPPER_UPDATES):
    return functools.partial(_update_wrapper, wrapped=wrapped, assigned=assigned, updated=updated)


def _format_fields_ok(fmt, what):
    """A `{`-style format (logging's) reads attributes of its values by name: judge them."""
    if not isinstance(fmt, str):
        return
    for _, field, _, _ in string.Formatter().parse(fmt):
        if field and any(p.startswith("_") for p in field.replace("[", ".").replace("]", "").split(".")[1:]):
            refuse(f"{what}({fmt!r})", "格式字符串读取了以 _ 开头的属性", "the format reads an attribute beginning with _")


def _stmt(src, globals_, label):
    """A statement given as text (timeit's `stmt`/`setup`) compiled under the policy, as a
    function that runs it in `globals_` (a copy: the submission's namespace is not rewritten)."""
    if not isinstance(src, str):
        return src
    code, found = compile_source(src, label)
    if found:
        f = found[0]
        refuse(f"{label} {f['what']}", f["zh"].split("：", 1)[-1], f["en"].split(": ", 1)[-1])
    ns = dict(globals_ or {})
    ns["__builtins__"] = BUILTINS
    ns.setdefault("__name__", "submission")

    def run():
        exec(code, ns)

    return run


def _timeit_module():
    import timeit

    return timeit


def _Timer(stmt="pass", setup="pass", timer=None, number=None, globals=None):
    """timeit.Timer: text compiled under the policy; the clock read when it runs (the grader's
    recording clock, not the one timeit bound when it was imported)."""
    t = _timeit_module()
    if timer is None:
        timer = t.default_timer
    return t.Timer(_stmt(stmt, globals, "<timeit stmt>"), _stmt(setup, globals, "<timeit setup>"), timer)


def _timeit(stmt="pass", setup="pass", timer=None, number=1000000, globals=None):
    return _Timer(stmt, setup, timer, globals=globals).timeit(number)


def _repeat(stmt="pass", setup="pass", timer=None, repeat=5, number=1000000, globals=None):
    return _Timer(stmt, setup, timer, globals=globals).repeat(repeat, number)


def _bench_timer(stmt="pass", setup="pass", global_setup="", timer=None, globals=None, **kwargs):
    """torch.utils.benchmark.Timer: its statements compiled under the policy (torch compiles the
    text it is given with Python's own compiler)."""
    import time

    from torch.utils.benchmark import Timer

    ns = {"__grade_stmt": _stmt(stmt, globals, "<benchmark stmt>"),
          "__grade_setup": _stmt(setup, globals, "<benchmark setup>")}
    if global_setup:
        refuse("torch.utils.benchmark.Timer(global_setup=…)", "global_setup 是 C++ 代码", "global_setup is C++ code")
    return Timer("__grade_stmt()", "__grade_setup()", timer=timer or time.perf_counter, globals=ns, **kwargs)


def _guard_style(formatter):
    """A `{`-style logging formatter formats through the guarded formatter: its fields read the
    record's values with `_getattr_`, as an f-string of the submission would."""
    import logging

    style = _real_getattr(formatter, "_style", None)
    if isinstance(style, logging.StrFormatStyle):
        fmt = style._fmt
        style._format = lambda record: _FORMATTER.vformat(fmt, (), record.__dict__)
    return formatter


def _logging_formatter(fmt=None, datefmt=None, style="%", *args, **kwargs):
    import logging

    if style == "{":
        _format_fields_ok(fmt, "logging.Formatter")
    return _guard_style(logging.Formatter(fmt, datefmt, style, *args, **kwargs))


def _logging_basic_config(**kwargs):
    import logging

    if kwargs.get("style") == "{":
        _format_fields_ok(kwargs.get("format"), "logging.basicConfig")
    out = logging.basicConfig(**kwargs)
    for handler in logging.getLogger().handlers:
        if handler.formatter is not None:
            _guard_style(handler.formatter)
    return out


def _deepcopy(x, memo=None, _nil=None):
    """copy.deepcopy without a memo of the submission's: the memo keeps every original the copy
    walked through (the private state of an object the submission did not make)."""
    import copy

    if memo is not None:
        refuse("copy.deepcopy(x, memo)", "不能传入 memo（它会留下被复制对象的内部）",
               "no memo of your own (it keeps the insides of what was copied)")
    return copy.deepcopy(x)


def _dataclass(cls=None, /, **kwargs):
    """dataclasses.dataclass for the submission's own classes only: it writes code from the class's
    field names and runs it (a class made elsewhere — typing.TypedDict("T", {...}), an Enum's
    functional form — may carry any text as a field name)."""
    import dataclasses

    def wrap(c):
        if c not in _OWN_CLASSES:
            refuse(f"dataclasses.dataclass({_describe(c)})", "只能用在你自己用 class 语句定义的类上",
                   "only for classes you define with a class statement")
        for name in _real_getattr(c, "__dict__", {}).get("__annotations__", {}):
            if not (isinstance(name, str) and name.isidentifier()):
                refuse(f"dataclasses.dataclass({_describe(c)})", "字段名必须是标识符", "field names must be identifiers")
        return dataclasses.dataclass(c, **kwargs)

    return wrap if cls is None else wrap(cls)


def _compile(model=None, **kwargs):
    """torch.compile with a backend named by its string (`"inductor"`, `"eager"`, `"aot_eager"`):
    a backend of the submission's own would get the FX graph, whose code generation runs text."""
    import torch

    backend = kwargs.get("backend", "inductor")
    if not isinstance(backend, str):
        refuse("torch.compile(backend=…)", "backend 只能是名字（\"inductor\"、\"eager\"、\"aot_eager\"）",
               'the backend is named by a string ("inductor", "eager", "aot_eager")')
    if model is None:
        return lambda m: torch.compile(m, **kwargs)
    return torch.compile(model, **kwargs)


_SUBSTITUTES = {
    "operator.attrgetter": _attrgetter,
    "operator.methodcaller": _methodcaller,
    "timeit.Timer": _Timer,
    "timeit.timeit": _timeit,
    "timeit.repeat": _repeat,
    "torch.utils.benchmark.Timer": _bench_timer,
    "torch.utils.benchmark.utils.timer.Timer": _bench_timer,
    "logging.Formatter": _logging_formatter,
    "logging.basicConfig": _logging_basic_config,
    "functools.wraps": _wraps,
    "copy.deepcopy": _deepcopy,
    "dataclasses.dataclass": _dataclass,
    "torch.compile": _compile,
    "functools.update_wrapper": _update_wrapper,
}
_SUBSTITUTES["_operator.attrgetter"] = _attrgetter  # operator's functions come from _operator
_SUBSTITUTES["_operator.methodcaller"] = _methodcaller


# ------------------------------------------------------------------------------------------------
# The builtins of the course's Python.

def _make_builtins():
    b = {name: _real_getattr(_builtins_module, name) for name in SAFE_BUILTINS}
    for name, obj in vars(_builtins_module).items():  # every exception and warning class
        if isinstance(obj, type) and issubclass(obj, BaseException) and not name.startswith("_"):
            b[name] = obj
    b.update({
        "__import__": _import,
        "__build_class__": _build_class,
        "__name__": "builtins",
        "type": _safe_type,
        "getattr": _safe_getattr,
        "setattr": _safe_setattr,
        "delattr": _safe_delattr,
        "hasattr": _quiet_hasattr,
        "globals": _safe_globals,
        "open": _safe_open,
        "_getattr_": _getattr_,
        "_write_": _write_,
        "_getitem_": _getitem_,
        "_getiter_": iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_inplacevar_": _inplacevar_,
        "_apply_": _apply_,
    })
    return b


BUILTINS = _make_builtins()


# ------------------------------------------------------------------------------------------------
# Compiling: RestrictedPython's transformer, with the course's rule for names.

def _guard_name(name):
    """RestrictedPython's own names (`_getattr_`, `_write_`, …): `_x_` with one underscore each side."""
    return len(name) > 2 and name[0] == "_" and name[-1] == "_" and name[1] != "_"


class CoursePolicy(RestrictingNodeTransformer):
    """RestrictedPython's transformer with the course's rule: names beginning with `_` are the
    submission's own (judged at run time on the object they are read from), dunders are the plain
    ones a class defines, and every refusal is a finding with its line and what to use instead."""

    def __init__(self, errors=None, warnings=None, used_names=None):
        super().__init__(errors, warnings, used_names)
        self.findings = []
        self._class_depth = 0
        self._classes = []  # enclosing class names, for private-name mangling
        self._storing = False

    def _mangle(self, attr):
        """`self.__x` inside class `C` is `self._C__x`, as Python's compiler would make it: the
        guards get the name the attribute really has."""
        if attr[:2] != "__" or attr[-2:] == "__" or not self._classes:
            return attr
        owner = self._classes[-1].lstrip("_")
        return f"_{owner}{attr}" if owner else attr

    def flag(self, node, what, zh, en):
        f = finding(getattr(node, "lineno", 0), getattr(node, "col_offset", 0) + 1, what, zh, en)
        self.findings.append(f)
        self.errors.append(f"Line {f['line']}: {f['en']}")

    def error(self, node, info):  # RestrictedPython's own refusals (async, try/except*, …)
        self.flag(node, info.split(" ")[0].strip('"'), "不属于课程的 Python：" + info, "not part of the course's Python: " + info)

    def check_name(self, node, name, allow_magic_methods=False):
        if name is None:
            return
        if _guard_name(name):
            self.flag(node, name, "这个名字留给评分器的守卫", "this name is reserved for the grader's guards")
        elif name[:2] == "__" and name[-2:] == "__":
            if name in REFUSED_BUILTINS:
                self.flag(node, name, "不属于课程的 Python", "not part of the course's Python")
            elif name in _READ_ONLY_NAMES and self._storing:
                self.flag(node, name, "只能读，不能赋值", "may be read, not assigned")
            elif not (name in MODULE_DUNDERS or (allow_magic_methods and self._class_depth and name in CLASS_DUNDERS)):
                self.flag(node, name, "这个特殊名字不属于课程的 Python", "this special name is not part of the course's Python")

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in REFUSED_BUILTINS:
            self.flag(node, node.id, "不属于课程的 Python", "not part of the course's Python")
            return node
        self._storing = not isinstance(node.ctx, ast.Load)
        try:
            self.check_name(node, node.id, allow_magic_methods=self._class_depth > 0)
        finally:
            self._storing = False
        return node

    def visit_Call(self, node):
        """Star-args calls go through `_apply_` (exec/eval are refused as names: visit_Name); a
        keyword argument may not be named like the interpreter's protocol (`__array_interface__=`
        made numpy read a storage's raw address: red team 13)."""
        for k in node.keywords:
            if _dunder(k.arg):
                self.flag(k, k.arg, "双下划线名字的关键字参数不属于课程的 Python",
                          "a keyword argument with a double-underscore name is not part of the course's Python")
        wrap = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        node = self.node_contents_visit(node)
        if wrap:
            node.args.insert(0, node.func)
            node.func = ast.copy_location(ast.Name("_apply_", ast.Load()), node.args[0])
        return node

    def visit_AnnAssign(self, node):
        return self.node_contents_visit(node)

    def visit_Attribute(self, node):
        attr = self._mangle(node.attr)
        if attr[:2] == "__" and attr[-2:] == "__" and attr not in READABLE_DUNDERS and attr not in CLASS_DUNDERS:
            self.flag(node, "." + attr, "这个特殊属性不属于课程的 Python", "this special attribute is not part of the course's Python")
        if attr in INSPECT_ATTRIBUTES:
            self.flag(node, "." + attr, "会交出解释器的内部（栈帧、代码对象）", "hands out the interpreter's internals (frames, code)")
        node = self.node_contents_visit(node)
        if isinstance(node.ctx, ast.Load):
            new = ast.Call(func=ast.Name("_getattr_", ast.Load()), args=[node.value, ast.Constant(attr)], keywords=[])
            ast.copy_location(new, node)
            ast.fix_missing_locations(new)
            return new
        new_value = ast.Call(func=ast.Name("_write_", ast.Load()), args=[node.value, ast.Constant(attr)], keywords=[])
        ast.copy_location(new_value, node.value)
        ast.fix_missing_locations(new_value)
        node.value = new_value
        return node

    def visit_AugAssign(self, node):
        node = self.node_contents_visit(node)
        if isinstance(node.target, ast.Name):
            new = ast.Assign(
                targets=[node.target],
                value=ast.Call(func=ast.Name("_inplacevar_", ast.Load()),
                               args=[ast.Constant(IOPERATOR_TO_STR[type(node.op)]),
                                     ast.Name(node.target.id, ast.Load()), node.value],
                               keywords=[]))
            ast.copy_location(new, node)
            ast.fix_missing_locations(new)
            return new
        return node  # `a.x += v` / `a[i] += v`: the target is already `_write_(a, "x").x`

    def visit_Nonlocal(self, node):
        return node

    def visit_FunctionDef(self, node):
        self.check_name(node, node.name, allow_magic_methods=True)
        self.check_function_argument_names(node)
        depth, self._class_depth = self._class_depth, 0
        try:
            return self.node_contents_visit(node)
        finally:
            self._class_depth = depth

    def visit_Lambda(self, node):
        self.check_function_argument_names(node)
        return self.node_contents_visit(node)

    def visit_ClassDef(self, node):
        self.check_name(node, node.name)
        for kw in node.keywords:
            self.flag(node, f"class {node.name}({kw.arg}=…)", "类定义不能带 metaclass 或其他关键字参数",
                      "a class may not take a metaclass or other keywords")
        self._class_depth += 1
        self._classes.append(node.name)
        try:
            return self.node_contents_visit(node)
        finally:
            self._class_depth -= 1
            self._classes.pop()

    def visit_Module(self, node):
        return self.node_contents_visit(node)

    def visit_Import(self, node):
        self._check_imports(node, [a.name for a in node.names])
        return self.check_import_names(node)

    def visit_ImportFrom(self, node):
        if node.level:
            self.flag(node, "from . import", "不能相对导入", "relative imports are not part of the course's Python")
        elif node.module:
            if self._check_imports(node, [node.module]):
                rule = _RULES.get(node.module)
                for a in node.names:
                    if a.name != "*" and rule is not None and not rule.allows(a.name) \
                            and f"{node.module}.{a.name}" not in _RULES:
                        self.flag(node, f"{node.module}.{a.name}", "不属于课程的 Python（课程允许的模块里没有这个名字）",
                                  "not part of the course's Python (not among what the course allows of this module)")
        return self.check_import_names(node)

    def _check_imports(self, node, names):
        ok = True
        for name in names:
            if name not in _RULES:
                self.flag(node, name, "这个模块不属于课程的 Python", "this module is not part of the course's Python")
                ok = False
        return ok

    def check_import_names(self, node):
        for a in node.names:
            if a.name == "*":
                self.flag(node, "import *", "不能用 * 导入", "`import *` is not part of the course's Python")
            if a.asname:
                self.check_name(node, a.asname)
            elif isinstance(node, ast.ImportFrom):
                self.check_name(node, a.name)
        return self.node_contents_visit(node)


def compile_source(source, filename):
    """The submission's code under the policy, and the findings (`[]` when it may run). A syntax
    error is not a finding: it is raised as Python raises it, when the submission is loaded."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError:
        return compile(source, filename, "exec"), []  # raises the same SyntaxError, as the import would
    policy = CoursePolicy()
    tree = policy.visit(tree)
    findings = sorted({(f["line"], f["what"]): f for f in policy.findings}.values(), key=lambda f: (f["line"], f["col"]))
    if findings:
        return None, findings
    ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec", dont_inherit=True), []


def run(code, path, name="submission", plain=False):
    """Import the submission (`code`, from `compile_source`) as module `name`, its builtins the
    course's (Python's own when `plain`: GRADE_POLICY=off); returns the module."""
    module = types.ModuleType(name)
    module.__file__ = path
    if not plain:
        module.__dict__["__builtins__"] = BUILTINS
    _SUBMISSION_NS[0] = module.__dict__
    sys.modules[name] = module
    exec(code, module.__dict__)
    return module
