"""`number()`: what a submission reports, read as a number (lessons' shared parser); `plain()`:
what a call returned, read with none of the submission's code running."""
import sys as _sys

import numpy as _np
import torch


_NP_INTS = frozenset((_np.int8, _np.int16, _np.int32, _np.int64, _np.uint8, _np.uint16, _np.uint32,
                       _np.uint64))
_NP_FLOATS = frozenset((_np.float16, _np.float32, _np.float64))


class NotANumber(TypeError):
    """A value the contract asks to be a number is not one; the message says what it was."""


class NotPlain(NotANumber):
    """What a call returned holds an object of a class the submission wrote."""


def _own_type(t):
    """Is `t`, or a class it derives from, one the submission's `class` statements made (the
    course's Python records each: `grade_policy._OWN_CLASSES`)?"""
    owned = getattr(_sys.modules.get("grade_policy"), "_OWN_CLASSES", None)
    return bool(owned) and any(k in owned for k in t.__mro__)


def plain(value, what="the result", fail=NotPlain, _depth=0):
    """`value`, once no object of a class the submission wrote is found in it (itself, or the
    items, keys and values of its lists, tuples and dicts, four levels deep), or `NotPlain`.

    The grader reads what a call returned after the call, outside every window it watches: an
    object of the submission's own there (a `tolist()`, an `__iter__`, a `get()` or `__getitem__`
    of a list or dict subclass) would run the submission's code while the grader reads, after the
    call's checks, and make its numbers then (red team 26: samples computed by a `tolist()` the
    grader called, the grader's next reference steps started cold by it). Every lesson reads what
    its calls return through this first; containers of the standard library (a namedtuple, an
    OrderedDict) and torch's and numpy's own types are plain. `fail`: the exception class raised
    (a scenario passes its `ProbeFailed`, so the message is the criterion's reason)."""
    t = type(value)
    if _own_type(t):
        raise fail(f"{what} is a {t.__name__}, an object of a class of your own: return plain "
                       "lists, tuples, dicts, numbers and tensors (the grader reads them after the call, and "
                       "runs none of your code while it does)")
    if _depth < 4:
        if isinstance(value, (list, tuple)):
            for i, v in enumerate(tuple.__iter__(value) if isinstance(value, tuple) else list.__iter__(value)):
                plain(v, f"{what}[{i}]", fail, _depth + 1)
        elif isinstance(value, dict):
            for k, v in dict.items(value):
                plain(k, f"a key of {what}", fail, _depth + 1)
                plain(v, f"{what}[{k!r}]", fail, _depth + 1)
    return value


def number(value, *, integral=False, what="value"):
    """`value` as a plain Python `int` (integral) or `float`, or `NotANumber`.

    The one place every lesson turns a submission's number into the grader's: whatever the
    contract calls a number is accepted as exactly a Python `int` or `float`, a numpy scalar
    (`np.int64(13)`, `np.float32(0.5)`), a one-element numpy array or a 0-d / one-element tensor
    (a plain `torch.Tensor`): nothing else, so no object of the submission's own (a class
    registered as `numbers.Real`, a subclass of float) runs code when the grader reads it. `bool`
    is refused (it is an `int` in Python but never a count or a time). An integral value must be a
    whole number: `13.0` is accepted as `13`, `13.5` is not."""
    v = value
    if type(v) in (torch.Tensor, torch.nn.Parameter):
        if v.numel() != 1:
            raise NotANumber(f"{what} is a tensor of {v.numel()} elements, not one number")
        v = v.detach().cpu().reshape(()).tolist()
    elif type(v) is _np.ndarray:
        if v.size != 1:
            raise NotANumber(f"{what} is an array of {v.size} elements, not one number")
        v = v.reshape(()).item()
    t = type(v)
    if t is bool or t is _np.bool_:
        raise NotANumber(f"{what} is a bool ({value!r}), not a number")
    if t is int or t in _NP_INTS:
        return int(v)
    if t is float or t in _NP_FLOATS:
        f = float(v)
        if integral:
            if f != f or f in (float("inf"), float("-inf")) or not f.is_integer():
                raise NotANumber(f"{what} is {value!r}, not a whole number")
            return int(f)
        return f
    raise NotANumber(f"{what} is {type(value).__name__}, not a number (a Python int or float, a numpy "
                     "scalar, or a one-element tensor or array)")

