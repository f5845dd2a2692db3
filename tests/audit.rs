//! The static audit (`src/driver/audit.py`, run by the driver before the import): each way of
//! inspecting or patching the grader is found, with its line; correct code of every kind the
//! course's students write is not (every solution, starter and must-pass fixture of the course).
//! One Python process audits every case (no torch import: ~0.1 s).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> PathBuf {
    let venv = root().join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

/// `file -> [(line, code)]` for every file given, with `allow` (exercise.yaml `audit_allow`).
fn audit(files: &[PathBuf], allow: &[String]) -> BTreeMap<String, Vec<(u64, String)>> {
    let out = Command::new(python())
        .arg(root().join("src/driver/audit.py"))
        .args(["--allow", &allow.join(",")])
        .args(files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut found: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut f = line.splitn(4, ':');
        let (path, ln, _col, rest) = (f.next(), f.next(), f.next(), f.next());
        let code = rest.unwrap().trim().split(':').next().unwrap().to_string();
        found
            .entry(path.unwrap().to_string())
            .or_default()
            .push((ln.unwrap().parse().unwrap(), code));
    }
    found
}

/// (source, the (line, code) findings it must give); `[]`: must be clean.
const CASES: &[(&str, &[(u64, &str)])] = &[
    // reading the grader's answers
    ("import gc\nobjs = gc.get_objects()\n", &[(2, "gc")]),
    ("from gc import get_referrers as r\n", &[(1, "gc")]),
    ("import gc\ngc.collect()\ngc.disable()\n", &[]),
    ("import sys\nf = sys._getframe(2)\nm = f.f_locals['ctx']\n", &[(2, "frames"), (3, "frames")]),
    ("import inspect\nfor fr in inspect.stack():\n    pass\n", &[(2, "frames")]),
    ("import inspect\nprint(inspect.signature(len))\n", &[]),
    ("def f(step):\n    return step.__closure__[0].cell_contents\n", &[(2, "internals")]),
    ("def f(sync):\n    dev = sync.__self__\n", &[(2, "internals")]),
    ("def f(fn):\n    return fn.__defaults__, fn.__globals__\n", &[(2, "internals")]),
    ("def f(fn):\n    return getattr(fn, '__wrapped__', fn)\n", &[(2, "internals")]),
    // the grader's modules and data
    ("import sys\nlib = sys.modules['grade_lib']\n", &[(2, "modules")]),
    ("import grade_lib\n", &[(1, "modules")]),
    ("from grade_scenario import WATCH\n", &[(1, "modules")]),
    ("import importlib\nm = importlib.import_module('grade_' + 'lib')\n", &[(2, "dynamic")]),
    ("m = __import__(name)\n", &[(1, "dynamic")]),
    ("import importlib\nimportlib.import_module('math')\n", &[]),
    // native and raw channels
    ("import ctypes\n", &[(1, "native")]),
    ("import os\nos.write(3, b'x')\n", &[(2, "native")]),
    ("open('/proc/self/mem', 'rb')\n", &[(1, "native")]),
    // torch's mode stacks, where the grader's counters are
    ("from torch.overrides import _get_current_function_mode_stack\n", &[(1, "instruments")]),
    ("import torch\nn = torch._C._len_torch_function_stack()\n", &[(2, "instruments")]),
    ("import torch.utils._python_dispatch as d\nm = d._get_current_dispatch_mode()\n", &[(2, "instruments")]),
    ("from torch.utils._python_dispatch import TorchDispatchMode\nclass Count(TorchDispatchMode):\n    pass\n", &[]),
    ("import torch\nwith torch._C._DisableTorchDispatch():\n    pass\n", &[(2, "instruments")]),
    // the saved-tensors hooks stack, where the grader's saved-bytes hooks are (also through an
    // alias of a private module); registering hooks of one's own is the lesson's contract
    (
        "import torch\nA = torch._C._autograd\nh = A._top_saved_tensors_default_hooks(True)\n\
         A._pop_saved_tensors_default_hooks()\n",
        &[(3, "instruments"), (4, "instruments")],
    ),
    ("import torch\nwith torch.autograd.graph.saved_tensors_hooks(pack, unpack):\n    pass\n", &[]),
    // code the audit cannot see
    ("exec(compile(src, '<x>', 'exec'))\n", &[(1, "dynamic")]),
    ("x = eval('1+1')\n", &[(1, "dynamic")]),
    ("import builtins\n", &[(1, "dynamic")]),
    ("import torch\nf = torch.compile(model)\nimport re\nr = re.compile('a')\n", &[]),
    // patching what the submission did not define
    ("import time\ntime.perf_counter = lambda: 0.0\n", &[(2, "patching")]),
    ("import time as t\nsetattr(t, 'perf_counter', None)\n", &[(2, "patching")]),
    ("from torch import Tensor\nTensor.item = None\n", &[(2, "patching")]),
    ("import torch\ndel torch.utils.checkpoint.checkpoint\n", &[(2, "patching")]),
    ("from torch._dynamo.utils import counters\ncounters['stats']['x'] = 1\n", &[(2, "patching")]),
    ("def f(x):\n    type(x).forward = None\n", &[(2, "patching")]),
    ("object.__setattr__(thing, 'a', 1)\n", &[(1, "patching")]),
    // a name built from literals is the name (issue 18)
    ("import sys\nf = getattr(sys, '_get' + 'frame')\n", &[(2, "frames")]),
    ("def f(step):\n    return getattr(step, '__clo' + 'sure__')\n", &[(2, "internals")]),
    ("import operator\ng = operator.attrgetter(''.join(['cell_', 'contents']))\n", &[(2, "internals")]),
    ("def f(tb):\n    return getattr(tb, f'tb_{\"frame\"}')\n", &[(2, "frames")]),
    ("def f(m):\n    return m._forward_hooks\n", &[(2, "instruments")]),
    ("def f(m):\n    return type(m).__mro__[1]\n", &[(2, "internals")]),
    ("import inspect\ndef f(m):\n    return inspect.getmodule(type(m))\n", &[(3, "modules")]),
    ("import torch\ntc = torch.compiler\ntc.is_compiling = lambda: True\n", &[(3, "patching")]),
    // ... but a class bound to a name, or a name bound to something else too, is no module alias
    (
        "import torch\nopt = torch.optim.SGD\nopt = opt(params, lr=0.1)\nopt.param_groups[0]['lr'] = 0.2\n\
         cudnn = torch.backends.cudnn\ncudnn.benchmark = True\n",
        &[],
    ),
    ("import pickle\nx = pickle.loads(blob)\n", &[(2, "dynamic")]),
    ("class A:\n    def set(self, k, v):\n        setattr(self, k, v)\n        return getattr(self, k)\n", &[]),
    // ordinary code: attributes of its own objects, config the course allows everywhere
    (
        "import torch\nclass M:\n    def __init__(self):\n        self.x = 1\n        setattr(self, 'y', 2)\n\
         m = M()\nm.z = 3\ntorch.backends.cudnn.benchmark = True\nimport os\nos.environ['A'] = '1'\n",
        &[],
    ),
];

#[test]
fn every_primitive_is_found_with_its_line_and_ordinary_code_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = CASES
        .iter()
        .enumerate()
        .map(|(i, (src, _))| {
            let p = dir.path().join(format!("case{i:02}.py"));
            std::fs::write(&p, src).unwrap();
            p
        })
        .collect();
    let found = audit(&files, &[]);
    for ((src, want), file) in CASES.iter().zip(&files) {
        let got = found
            .get(file.to_str().unwrap())
            .cloned()
            .unwrap_or_default();
        let mut got_lines: Vec<(u64, &str)> = got.iter().map(|(l, c)| (*l, c.as_str())).collect();
        got_lines.dedup();
        let mut want = want.to_vec();
        want.sort();
        let mut got_sorted = got_lines.clone();
        got_sorted.sort();
        got_sorted.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        assert_eq!(got_sorted, want, "audit of:\n{src}");
    }
}

/// Every course file a student could legitimately have written: solutions, starters and the
/// fixtures that must pass or fail for a reason other than tampering (their `expected.yaml`
/// entries neither name `instruments_intact` nor say `refused`) are clean.
#[test]
fn no_correct_or_careless_submission_of_the_course_is_flagged() {
    let mut audited = 0;
    for entry in std::fs::read_dir(root().join("exercises"))
        .unwrap()
        .flatten()
    {
        let id = entry.file_name().to_string_lossy().to_string();
        let Ok(yaml) = std::fs::read_to_string(entry.path().join("exercise.yaml")) else {
            continue;
        };
        let spec: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
        let allow: Vec<String> = spec["audit_allow"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        let mut files = vec![
            entry.path().join("exercise.py"),
            root().join("solutions").join(&id).join("exercise.py"),
        ];
        let fixtures = root().join("tests/fixtures").join(&id);
        let expected = std::fs::read_to_string(fixtures.join("expected.yaml")).unwrap_or_default();
        let doc: serde_yaml::Value = serde_yaml::from_str(&expected).unwrap_or_default();
        for (name, entry) in doc.as_mapping().into_iter().flatten() {
            let name = name.as_str().unwrap_or_default();
            let text = serde_yaml::to_string(entry).unwrap_or_default();
            let path = fixtures.join(format!("{name}.py"));
            // `refused`: the course's Python refuses it before it runs (a cheat)
            if path.is_file() && !text.contains("instruments_intact") && !text.contains("refused") {
                files.push(path);
            }
        }
        audited += files.len();
        let found = audit(&files, &allow);
        assert!(found.is_empty(), "{id}: flagged: {found:#?}");
    }
    assert!(audited > 60, "the course's files: {audited}");
}
