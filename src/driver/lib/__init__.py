"""grade's scenario library (`grade_lib`, `ctx.lib` in a scenario): instruments every lesson shares.

Embedded in the `grade` binary next to driver.py and loaded as the package `grade_lib`, one module
per concern; this file re-exports what scenarios use (`ctx.lib.X`) and names the entry points:

- `reported`  `number()`: a reported value read as a number; `plain()`: a call's result read
              with none of the submission's code running
- `memory`    bytes a forward saves or keeps (`saved_bytes`, `kept_bytes`, `hooked_forwards`)
- `steps`     the observed model: a training step is what ran (`StepObserver`, `observed_model`)
- `simdevice` an asynchronous device on an exact virtual clock (`SimDevice`)
- `reads`     the CPU device boundary: read-backs, constants, kept graphs (`HostReads`)
- `integrity` what a call may not leave behind or take along (`leftover_state`, `sealed`, `Lease`),
              a handed-over call sealed and stamped (`handed`)


- `observed_model(...)`: a TinyGPT whose every forward is observed as (the start of) a training
  step. The grader marks, in the active trace,
      step      {id, inputs: {idx, targets}, grad, t} the forward began (inputs labelled against
                                                      the batch the grader handed over; `t`: the
                                                      grader's own clock, seconds)
      fwd_end   {id, ckpt, variant}                 the forward returned: checkpoint calls in it
      step_done {id, t, variant?}                   the backward that began at the loss ended,
                                                    through every layer, to the embedding, with
                                                    a new gradient for every parameter
      step_undone {id, embedding, back, layers,     a backward from the loss that missed one:
                   grads, params, t}                reached the embedding?, layers backpropagated
                                                    of those that ran, parameters given a new
                                                    gradient of all
      outside_step {t}                              a forward outside the handed-over step()
                                                    (lesson 01's observer only): no step
  A whole training step is a `step` with its `step_done`; a forward without one (measuring bytes,
  inference) is not a step. Every forward is also summarised in `ctx.traces["forwards.<probe>"]`
  (checkpoint calls, autograd on/off, the checkpointing flag when the grader set it), so rules such
  as "one checkpoint per block in every forward where autograd records" hold in every probe.
"""
from .integrity import Lease, global_state, handed, leftover_state, loggers_as_before, sealed
from .memory import SAVES_SINKS, hooked_forwards, kept_bytes, param_storages, saved_bytes
from .reads import (DISPATCH, FACTORIES, READBACKS, HostReads, _Alive, _Unseen, _engine_run_watched,
                    _frombuffer_watched, _from_numpy_watched, _storage_from_file_watched, graph_steps, graphs_steps,
                    step_marks)
from .reported import NotANumber, NotPlain, number, plain
from .simdevice import TICK, SimDevice, ticks
from .steps import _LAYER_FORWARD, ObservedTinyGPT, StepObserver, label, observed_model, untrained

# What torch or the submission may call directly (driver.py's `_forged`): the observed model's
# forward (the submission calls `model(...)`, or `model.forward(...)`), a simulated device's
# `sync` (handed over as `sync=`), the read-back modes (torch calls them from the submission's
# own frames) and the wrapped `torch.frombuffer`.
ENTRY_POINTS = (ObservedTinyGPT.forward, _LAYER_FORWARD, SimDevice.sync, HostReads.__torch_function__,
                HostReads._frombuffer, _Unseen.__torch_dispatch__, _frombuffer_watched,
                _engine_run_watched, _storage_from_file_watched, _from_numpy_watched, _Alive.__call__)
del _LAYER_FORWARD, _Alive, _Unseen, _engine_run_watched, _frombuffer_watched, _from_numpy_watched, _storage_from_file_watched
