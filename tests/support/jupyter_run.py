"""Execute notebooks headless through a real kernel (nbclient + ipykernel), as Jupyter would:
each in its own kernel, started in the notebook's folder with JPY_SESSION_NAME set to the
notebook's path (what a Jupyter server gives its kernels; ipykernel turns it into `__session__`).
Errors in cells do not stop the run (allow_errors): the caller reads every cell's outputs.

usage: python jupyter_run.py NOTEBOOK.ipynb... ; writes NOTEBOOK.out.ipynb beside each, and
prints `executed NOTEBOOK in S s` per notebook.
"""
import os
import sys
import time

import nbformat
from nbclient import NotebookClient

for path in sys.argv[1:]:
    path = os.path.abspath(path)
    nb = nbformat.read(path, as_version=4)
    started = time.monotonic()
    client = NotebookClient(
        nb,
        timeout=900,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": os.path.dirname(path)}},
    )
    client.execute(env={**os.environ, "JPY_SESSION_NAME": path})
    nbformat.write(nb, path[: -len(".ipynb")] + ".out.ipynb")
    print(f"executed {os.path.basename(path)} in {time.monotonic() - started:.1f} s", flush=True)
